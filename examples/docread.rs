//! docread: pullgate's side of the differential test of image documents. A TEST TOOL, not part
//! of pullgate.
//!
//!   docread [--platform OS/ARCH[/VARIANT]] CORPUS
//!
//! CORPUS holds one directory per case: `root.json` (the image record's target: a descriptor
//! with mediaType, digest and size) and `blobs/sha256/<hex>` (the documents). For each case, in
//! name order, prints one JSON line: what pullgate reads (`pullgate::document::read_image`: the
//! manifest chosen for the platform, its config and layers, the config's diff_ids, whether it
//! is a checkpoint image), or `"ok": false` with the reason it refuses; and the configs the CRI
//! front requires to be the image's (`cri_configs`, `pullgate::document::cri_configs`), or
//! `cri_error`. tests/difftest/go's docread prints the image from containerd's own code;
//! tests/difftest/compare.py compares.

use std::path::Path;

/// A case's root: its bytes and declared media type, checked against root.json's descriptor,
/// and a reader of its blobs.
fn root_of(dir: &Path) -> Result<(Vec<u8>, String, impl FnMut(&str) -> Option<Vec<u8>> + '_), String> {
    let root: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("root.json")).map_err(|e| format!("root.json: {e}"))?).map_err(|e| format!("root.json: {e}"))?;
    let digest = root["digest"].as_str().ok_or("root.json has no digest")?;
    let media_type = root["mediaType"].as_str().unwrap_or_default();
    let blob = |d: &str| {
        let hex = d.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| std::fs::read(dir.join("blobs/sha256").join(hex)).ok())?
    };
    let bytes = blob(digest).ok_or_else(|| format!("blob {digest} not found"))?;
    if root["size"].as_u64() != Some(bytes.len() as u64) {
        return Err(format!("root {digest}: size {} is not the descriptor's", bytes.len()));
    }
    let actual = pullgate::reference::sha256_digest(&bytes);
    if actual != digest {
        return Err(format!("root {digest} hashes to {actual}"));
    }
    Ok((bytes, media_type.to_string(), blob))
}

fn case(dir: &Path, platform: (&str, &str, Option<&str>)) -> Result<pullgate::document::Reading, String> {
    let (bytes, media_type, mut blob) = root_of(dir)?;
    pullgate::document::read_image(&bytes, &media_type, platform, &mut blob)
}

/// The configs the CRI front requires to be the image's (`document::cri_configs`).
fn cri_case(dir: &Path, os: &str, arch: &str) -> Result<Vec<String>, String> {
    let (bytes, media_type, mut blob) = root_of(dir)?;
    pullgate::document::cri_configs(&bytes, &media_type, os, arch, &mut blob)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (platform, corpus) = match args.as_slice() {
        [flag, p, c] if flag == "--platform" => (p.clone(), c.clone()),
        [c] => ("linux/amd64".to_string(), c.clone()),
        _ => {
            eprintln!("usage: docread [--platform OS/ARCH[/VARIANT]] CORPUS");
            std::process::exit(2);
        }
    };
    let (os, arch, variant) = match pullgate::registry::parse_platform(&platform) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("docread: {e}");
            std::process::exit(2);
        }
    };
    let mut cases: Vec<_> = match std::fs::read_dir(&corpus) {
        Ok(d) => d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect(),
        Err(e) => {
            eprintln!("docread: {corpus}: {e}");
            std::process::exit(2);
        }
    };
    cases.sort();
    for dir in cases {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let line = match case(&dir, (&os, &arch, variant.as_deref())) {
            Ok(r) => {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["case"] = name.into();
                v["ok"] = true.into();
                v
            }
            Err(e) => serde_json::json!({"case": name, "ok": false, "error": e}),
        };
        let mut line = line;
        match cri_case(&dir, &os, &arch) {
            Ok(configs) => line["cri_configs"] = configs.into(),
            Err(e) => line["cri_error"] = e.into(),
        }
        println!("{line}");
    }
}

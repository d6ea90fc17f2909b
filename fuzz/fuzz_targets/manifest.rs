#![no_main]
// Manifests, indexes and configs as a registry might send them: the one reading (media types,
// keys containerd would read otherwise, duplicates, platforms), manifest, index and config
// parsing, platform strings. Never panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(media_type) = pullgate::document::media_type_of(data, "") {
        let f = pullgate::registry::Fetched { digest: pullgate::registry::sha256_digest(data), media_type, bytes: data.to_vec() };
        if pullgate::registry::is_index(&f.media_type) {
            if let Ok(idx) = pullgate::document::index(data, &f.media_type) {
                let _ = pullgate::document::select_platform(&idx, "linux", "amd64", None);
            }
        } else if let Ok(m) = pullgate::registry::parse_manifest(&f) {
            for l in m.layers() {
                let _ = pullgate::reference::is_digest(&l.digest().to_string());
            }
        }
    }
    let _ = pullgate::document::config(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = pullgate::registry::parse_platform(s);
    }
});

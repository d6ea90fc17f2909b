//! benchkit: the in-process gate benchmark (`cargo bench --bench gate`), here because it needs
//! the crate's private storage. Builds a ledger of N manifests (shared base layers plus unique
//! ones), M blobs and K namespaces with grants, then measures the gate's decision on a
//! container's Prepare (p50/p99), the unknown-chain test, daemon start-up (opening the
//! snapshotter on that root), the database size and resident memory.
#![doc(hidden)]
use crate::gate::{ChainInfo, Gate, GateConfig, Subject};
use crate::ledger::{self, ManifestRec};
use crate::metastore::StoreError;
use crate::snapshotter::{Driver, Snapshotter};
use std::sync::Arc;
use std::time::Instant;

pub struct Params {
    pub manifests: usize,
    pub layers_per_manifest: usize,
    pub shared_base_layers: usize,
    pub namespaces: usize,
    pub grants_per_namespace: usize,
    pub decisions: usize,
}

fn digest(kind: &str, i: usize) -> String {
    crate::registry::sha256_digest(format!("{kind}-{i}").as_bytes())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// Set (to the root) in the child process that measures start-up and memory.
const CHILD_ENV: &str = "PULLGATE_BENCH_STARTUP_ROOT";

/// In the child: opens the snapshotter on the root, makes 1,000 decisions across namespaces,
/// prints "<start-up ms> <VmRSS KiB>" and returns true. False when not the child.
pub fn startup_probe() -> Result<bool, Box<dyn std::error::Error>> {
    let Some(root) = std::env::var_os(CHILD_ENV) else { return Ok(false) };
    let gate = Arc::new(Gate::new(GateConfig::default()));
    let t = Instant::now();
    let snap = Snapshotter::open(std::path::Path::new(&root), Driver::Copy, gate.clone())?;
    let startup = t.elapsed();
    let store = snap.store();
    for i in 0..1000 {
        let rec = store.read(|tx| ledger::manifest(tx, &digest("manifest", i)))?.ok_or("manifest missing")?;
        let chain = ChainInfo { chain_id: String::new(), diff_ids: rec.diff_ids, ..Default::default() };
        let ns = format!("ns-{i}");
        let _ = store.read(|tx| Ok::<_, StoreError>(gate.use_chain(tx, &Subject { namespace: &ns, principal: "" }, &chain)))?;
    }
    println!("{} {}", startup.as_secs_f64() * 1e3, rss_kib());
    Ok(true)
}

pub fn run(p: &Params) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let gate = Arc::new(Gate::new(GateConfig::default()));
    let t = Instant::now();
    {
        let snap = Snapshotter::open(root, Driver::Copy, gate.clone())?;
        let store = snap.store();
        let origin = "registry.example.com:5000/team/app";
        let mut blob_count = 0;
        for chunk in (0..p.manifests).collect::<Vec<_>>().chunks(500) {
            store.write(|tx| -> Result<(), ledger::LedgerError> {
                for &m in chunk {
                    let mut layers = Vec::new();
                    let mut diff_ids = Vec::new();
                    for l in 0..p.layers_per_manifest {
                        let id = if l < 2 { format!("base-{}", (m * 2 + l) % p.shared_base_layers) } else { format!("m{m}-l{l}") };
                        // Each blob is a small uncompressed "layer" that pullgate hashes, as a
                        // pull would, so that the ledger pairs it with its layer ID.
                        let payload = format!("blob-{id}");
                        let b = format!("sha256:{}", hex::encode(sha2_of(&payload)));
                        let mut h = crate::diffid::Hasher::new(&b, payload.len() as u64);
                        let v = h.update(payload.as_bytes()).and_then(|()| h.finish());
                        let v = v.map_err(|e| StoreError::Corrupt { key: b.clone(), reason: e.to_string() })?;
                        ledger::record_pairing(tx, &v)?;
                        let d = v.diff_id().to_string();
                        ledger::record_blob(tx, &b, origin, "hmac-sha256:bench", 1)?;
                        blob_count += 1;
                        layers.push(b);
                        diff_ids.push(d);
                    }
                    let rec = ManifestRec {
                        config: digest("config", m),
                        layers,
                        diff_ids,
                        origins: [origin.to_string()].into(),
                        names: [ledger::name_entry(origin, &format!("{origin}:v{m}"))].into(),
                    };
                    ledger::record_manifest(tx, &digest("manifest", m), &rec)?;
                }
                Ok(())
            })?;
        }
        store.write(|tx| -> Result<(), StoreError> {
            for n in 0..p.namespaces {
                for g in 0..p.grants_per_namespace {
                    let m = (n * 7 + g * 13) % p.manifests;
                    ledger::put_grant(tx, &format!("ns-{n}"), "", origin, &digest("manifest", m), "hmac-sha256:bench", i64::MAX / 2)?;
                }
            }
            Ok(())
        })?;
        println!(
            "ledger: {} manifests, {} blobs recorded ({} distinct), {} namespaces x {} grants, built in {:.1} s",
            p.manifests,
            blob_count,
            p.manifests * (p.layers_per_manifest - 2) + p.shared_base_layers,
            p.namespaces,
            p.grants_per_namespace,
            t.elapsed().as_secs_f64()
        );
    }
    let size = std::fs::metadata(root.join("metadata.redb"))?.len();
    // Start-up and memory of a fresh process, as a daemon would start on this root (this one
    // has just built the ledger, and its allocator keeps what that used).
    let child = std::process::Command::new(std::env::current_exe()?).env(CHILD_ENV, root).output()?;
    let (startup_ms, rss_kib): (f64, u64) = std::str::from_utf8(&child.stdout)?
        .split_once(' ')
        .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
        .ok_or_else(|| format!("start-up probe failed: {}", String::from_utf8_lossy(&child.stderr)))?;
    let snap = Snapshotter::open(root, Driver::Copy, gate.clone())?;
    let store = snap.store();

    // Decisions: a container's Prepare on a granted chain (allowed) and on a chain of a manifest
    // the namespace has no grant for (denied).
    let mut allowed = Vec::with_capacity(p.decisions);
    let mut denied = Vec::with_capacity(p.decisions);
    for i in 0..p.decisions {
        let n = i % p.namespaces;
        let granted = (n * 7 + (i % p.grants_per_namespace) * 13) % p.manifests;
        let other = (granted + 1) % p.manifests;
        for (m, out, expect_ok) in [(granted, &mut allowed, true), (other, &mut denied, false)] {
            let rec = store.read(|tx| ledger::manifest(tx, &digest("manifest", m)))?.ok_or("manifest missing")?;
            let chain = ChainInfo { chain_id: String::new(), diff_ids: rec.diff_ids, ..Default::default() };
            let ns = format!("ns-{n}");
            let t = Instant::now();
            let r = store.read(|tx| Ok::<_, StoreError>(gate.use_chain(tx, &Subject { namespace: &ns, principal: "" }, &chain)))?;
            out.push(t.elapsed().as_secs_f64() * 1e6);
            if r.is_ok() != expect_ok && !(m == other && (0..p.grants_per_namespace).any(|g| (n * 7 + g * 13) % p.manifests == other)) {
                return Err(format!("unexpected decision for ns-{n} manifest {m}: {r:?}").into());
            }
        }
    }
    allowed.sort_by(f64::total_cmp);
    denied.sort_by(f64::total_cmp);
    // The unknown-chain test: an extract whose target chain pullgate never recorded.
    let mut unknown = Vec::new();
    for i in 0..20 {
        let parent = ChainInfo { chain_id: digest("unknown-parent", i), diff_ids: vec![], unknown_layers: 1, ..Default::default() };
        let target = digest("unknown-target", i);
        let t = Instant::now();
        let _ = store.read(|tx| Ok::<_, StoreError>(gate.extract(tx, &Subject { namespace: "ns-0", principal: "" }, &parent, &target)))?;
        unknown.push(t.elapsed().as_secs_f64() * 1e3);
    }
    unknown.sort_by(f64::total_cmp);
    println!("| measurement                                        | value        |");
    println!("|----------------------------------------------------|--------------|");
    println!("| gate decision, container Prepare, allowed: p50     | {:>9.1} µs |", percentile(&allowed, 0.5));
    println!("| gate decision, container Prepare, allowed: p99     | {:>9.1} µs |", percentile(&allowed, 0.99));
    println!("| gate decision, container Prepare, denied: p50      | {:>9.1} µs |", percentile(&denied, 0.5));
    println!("| gate decision, container Prepare, denied: p99      | {:>9.1} µs |", percentile(&denied, 0.99));
    println!("| unknown-chain extract (tests every protected layer), p50 | {:>6.1} ms |", percentile(&unknown, 0.5));
    println!("| daemon start-up (open snapshotter and ledger)      | {:>9.1} ms |", startup_ms);
    println!("| ledger file size                                   | {:>9.1} MB |", size as f64 / 1048576.0);
    println!("| resident memory, fresh process after 1,000 decisions | {:>7.1} MB |", rss_kib as f64 / 1024.0);
    Ok(())
}

fn sha2_of(s: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).into()
}

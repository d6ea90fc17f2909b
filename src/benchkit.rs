//! benchkit: the in-process gate benchmark (`cargo bench --bench gate`), here because it needs
//! the crate's private storage. Builds a ledger of N manifests (shared base layers plus unique
//! ones), M blobs and K namespaces with grants, then measures the gate's decision on a
//! container's Prepare (p50/p99), the unknown-chain test, daemon start-up (opening the
//! snapshotter on that root), the database size and resident memory.
#![doc(hidden)]
use crate::gate::{ChainInfo, Gate, GateConfig, Subject};
use crate::ledger::{self, ManifestRec};
use crate::metastore::{LedgerRead as _, StoreError};
use crate::snapshotter::{Driver, Snapshotter};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Copy)]
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

/// This thread's CPU time, in µs: a decision's own cost, without the time the scheduler gave
/// other processes (the benchmark machine may be shared).
fn cpu_us() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map(|t| t.tv_sec() as f64 * 1e6 + t.tv_nsec() as f64 / 1e3).unwrap_or(0.0)
}

/// Wall-clock and thread CPU time of `f`, in µs.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
    let (t, c) = (Instant::now(), cpu_us());
    let out = f();
    let cpu = cpu_us() - c;
    (out, t.elapsed().as_secs_f64() * 1e6, cpu)
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

/// Builds the benchmark's ledger under `root`; returns the number of blob records.
fn build_ledger(root: &std::path::Path, p: &Params) -> Result<usize, Box<dyn std::error::Error>> {
    let gate = Arc::new(Gate::new(GateConfig::default()));
    let snap = Snapshotter::open(root, Driver::Copy, gate)?;
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
                    let mut h = crate::diffid::Hasher::new(&b);
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
    Ok(blob_count)
}

/// Start-up (ms) and resident memory (KiB) of a fresh process opening `root` and making 1,000
/// decisions, as a daemon would start on it (the process that built the ledger keeps in its
/// allocator what that used).
fn startup_of(root: &std::path::Path) -> Result<(f64, u64), Box<dyn std::error::Error>> {
    let child = std::process::Command::new(std::env::current_exe()?).env(CHILD_ENV, root).output()?;
    Ok(std::str::from_utf8(&child.stdout)?
        .split_once(' ')
        .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
        .ok_or_else(|| format!("start-up probe failed: {}", String::from_utf8_lossy(&child.stderr)))?)
}


fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

pub fn run(p: &Params) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let t = Instant::now();
    let blob_count = build_ledger(root, p)?;
    println!(
        "ledger: {} manifests, {} blobs recorded ({} distinct), {} namespaces x {} grants, built in {:.1} s",
        p.manifests,
        blob_count,
        p.manifests * (p.layers_per_manifest - 2) + p.shared_base_layers,
        p.namespaces,
        p.grants_per_namespace,
        t.elapsed().as_secs_f64()
    );
    let size = std::fs::metadata(root.join("metadata.redb"))?.len();
    let (startup_ms, rss_kib) = startup_of(root)?;
    let gate = Arc::new(Gate::new(GateConfig::default()));
    let snap = Snapshotter::open(root, Driver::Copy, gate.clone())?;
    let store = snap.store();

    // Decisions: a container's Prepare on a granted chain (allowed) and on a chain of a manifest
    // the namespace has no grant for (denied). The same decisions twice: first right after the
    // ledger is opened (redb's cache empty: each namespace's first decisions read its pages
    // from the file), then again, as a running daemon makes them.
    let (mut first_allowed, mut first_denied) = (Samples::default(), Samples::default());
    let mut allowed = Samples::default();
    let mut denied = Samples::default();
    for i in 0..2 * p.decisions {
        let (allowed, denied) = if i < p.decisions { (&mut first_allowed, &mut first_denied) } else { (&mut allowed, &mut denied) };
        let i = i % p.decisions;
        let n = i % p.namespaces;
        let granted = (n * 7 + (i % p.grants_per_namespace) * 13) % p.manifests;
        let other = (granted + 1) % p.manifests;
        for (m, out, expect_ok) in [(granted, &mut *allowed, true), (other, &mut *denied, false)] {
            let rec = store.read(|tx| ledger::manifest(tx, &digest("manifest", m)))?.ok_or("manifest missing")?;
            let chain = ChainInfo { chain_id: String::new(), diff_ids: rec.diff_ids, ..Default::default() };
            let ns = format!("ns-{n}");
            let (r, wall, cpu) = timed(|| store.read(|tx| Ok::<_, StoreError>(gate.use_chain(tx, &Subject { namespace: &ns, principal: "" }, &chain))));
            let r = r?;
            out.push(wall, cpu);
            if r.is_ok() != expect_ok && !(m == other && (0..p.grants_per_namespace).any(|g| (n * 7 + g * 13) % p.manifests == other)) {
                return Err(format!("unexpected decision for ns-{n} manifest {m}: {r:?}").into());
            }
        }
    }

    // Unpacks of chains no pull recorded: image i's unknown base x_i, then on it a private
    // layer of a manifest namespace ns-0 holds no grant for (denied) or an unknown layer
    // (allowed), as an attacker's manifest or an imported image stacks them.
    let protected = store.read(|tx| {
        let mut n = 0usize;
        tx.find_key(crate::metastore::Collection::Protected, &mut |_| {
            n += 1;
            false
        })?;
        Ok::<_, StoreError>(n)
    })?;
    let subject = Subject { namespace: "ns-0", principal: "" };
    let private_layer = |i: usize| private_layer(store, p, i);
    let parent_of = |i: usize, round: &str| ChainInfo { chain_id: digest(&format!("unknown-base-{round}"), i), diff_ids: vec![], unknown_layers: 1, ..Default::default() };
    let decide = |out: &mut Samples, parent: &ChainInfo, target: &str, hints: &[String], want_denied: bool| -> Result<(), Box<dyn std::error::Error>> {
        let (r, wall, cpu) = timed(|| store.read(|tx| Ok::<_, StoreError>(gate.extract_hinted(tx, &subject, parent, target, hints))));
        let r = r?;
        if r.is_err() != want_denied {
            return Err(format!("unexpected unpack decision on {}: {r:?}", parent.chain_id).into());
        }
        out.push(wall, cpu);
        Ok(())
    };
    const IMAGES: usize = 20;
    const STEPS: usize = 50;
    // The scan every protected layer took before the index (the anchor), same ledger.
    let mut scan = Samples::default();
    for i in 0..IMAGES {
        let parent = parent_of(i, "scan");
        let target = ledger::chain_id(&parent.chain_id, &private_layer(i)?);
        let (found, wall, cpu) = timed(|| store.read(|tx| ledger::protected_layer_for_chain(tx, &parent.chain_id, &target)));
        scan.push(wall, cpu);
        if found?.is_none() {
            return Err("the scan missed a protected layer".into());
        }
    }
    // The index, as an unpack meets it: the step that created the parent was allowed, so its
    // table was built while containerd applied that layer (timed apart: off the decision).
    let (mut ahead, mut built) = (Samples::default(), Samples::default());
    for i in 0..IMAGES {
        let parent = parent_of(i, "ahead");
        let ((), wall, _) = timed(|| {
            gate.index.prefetch(snap.store_arc(), "", &parent.chain_id);
            gate.index.settle();
        });
        built.push(wall, f64::NAN);
        for k in 0..STEPS {
            let (d, deny) = if k % 2 == 0 { (private_layer(i * STEPS + k)?, true) } else { (digest("never-recorded", i * STEPS + k), false) };
            decide(&mut ahead, &parent, &ledger::chain_id(&parent.chain_id, &d), &[], deny)?;
        }
    }
    // containerd 2.4's unpacker labels the layer's diffID: confirmed by the arithmetic, no table.
    gate.index.clear();
    let mut labelled = Samples::default();
    for i in 0..IMAGES * STEPS {
        let parent = parent_of(i, "label");
        let (d, deny) = if i % 2 == 0 { (private_layer(i)?, true) } else { (digest("never-recorded-l", i), false) };
        decide(&mut labelled, &parent, &ledger::chain_id(&parent.chain_id, &d), std::slice::from_ref(&d), deny)?;
    }
    // A parent never seen and no label (a client's own commit named by a chainID, then an
    // unpack on it): the decision builds the parent's table itself.
    let mut cold = Samples::default();
    for i in 0..IMAGES {
        let parent = parent_of(i, "cold");
        decide(&mut cold, &parent, &ledger::chain_id(&parent.chain_id, &private_layer(i)?), &[], true)?;
    }
    let st = gate.index.stats();
    println!("| measurement                                                     |  wall clock | thread CPU | anchor / target |");
    println!("|-----------------------------------------------------------------|-------------|------------|-----------------|");
    let row = |name: &str, s: &Samples, q: f64, ms: bool, note: &str| {
        let (w, c) = (s.at(q, true), s.at(q, false));
        let (w, c, unit) = if ms { (w / 1e3, c / 1e3, "ms") } else { (w, c, "µs") };
        let c = if c.is_nan() { "          -".to_string() } else { format!("{c:>8.1} {unit}") };
        println!("| {name:<63} | {w:>8.1} {unit} | {c} | {note:<15} |");
    };
    row("gate decision, container Prepare, first after opening, allowed: p99", &first_allowed, 0.99, false, "");
    row("gate decision, container Prepare, first after opening, denied: p99", &first_denied, 0.99, false, "");
    row("gate decision, container Prepare, allowed: p50", &allowed, 0.5, false, "");
    row("gate decision, container Prepare, allowed: p99", &allowed, 0.99, false, "target < 20 µs");
    row("gate decision, container Prepare, denied: p50", &denied, 0.5, false, "");
    row("gate decision, container Prepare, denied: p99", &denied, 0.99, false, "target < 20 µs");
    println!("| unpack of an unrecorded chain, {protected} protected layers:{:<19} |             |            |                 |", "");
    row("  scan of every protected layer (before the index): p50", &scan, 0.5, true, "anchor");
    row("  scan of every protected layer (before the index): p99", &scan, 0.99, true, "anchor");
    row("  decision, parent's table built ahead: p50", &ahead, 0.5, false, "");
    row("  decision, parent's table built ahead: p99", &ahead, 0.99, false, "target < 100 µs");
    row("  decision, containerd 2.4's diff-id label confirmed: p50", &labelled, 0.5, false, "");
    row("  decision, containerd 2.4's diff-id label confirmed: p99", &labelled, 0.99, false, "target < 100 µs");
    row("  table build, ahead of the decision (off its path): p50", &built, 0.5, true, "");
    row("  decision on a parent never seen, no label (builds): p50", &cold, 0.5, true, "");
    println!("| daemon start-up (open snapshotter and ledger)                   | {:>8.1} ms |            |                 |", startup_ms);
    println!("| ledger file size                                                | {:>8.1} MB |            |                 |", size as f64 / 1048576.0);
    println!("| resident memory, fresh process after 1,000 decisions            | {:>8.1} MB |            |                 |", rss_kib as f64 / 1024.0);
    println!(
        "({} container decisions each; {} unpack decisions from tables built ahead, {} labelled; chain index: {} answers from tables, {} tables built ahead, {} in decisions)",
        p.decisions,
        ahead.wall.len(),
        labelled.wall.len(),
        st.hits,
        st.built_ahead,
        st.built_in_decision
    );
    Ok(())
}

/// The `i`th private layer of a manifest namespace ns-0 holds no grant for (an unpack of it on
/// an unrecorded chain is denied).
fn private_layer(store: &crate::metastore::MetaStore, p: &Params, i: usize) -> Result<String, Box<dyn std::error::Error>> {
    let granted0: Vec<usize> = (0..p.grants_per_namespace).map(|g| (g * 13) % p.manifests).collect();
    let m = (0..p.manifests).map(|k| (k * 7919 + i * 104729) % p.manifests).find(|m| !granted0.contains(m)).ok_or("no manifest")?;
    let rec = store.read(|tx| ledger::manifest(tx, &digest("manifest", m)))?.ok_or("manifest missing")?;
    Ok(rec.diff_ids[2 + i % (p.layers_per_manifest - 2)].clone())
}

/// `PULLGATE_BENCH_COLD=1 cargo bench --bench gate`: what an unpack decision on an unrecorded
/// chain costs as the first thing its thread does after a pause, against the same right after
/// another decision, and the parts of it alone (each the first after the pause: a read
/// transaction with nothing read, one point read of the ledger, the chain index's look-up, the
/// grant check of the layer found). The pause is the parent's table being built on the
/// worker, a 30 ms sleep, 30 ms of spinning, or a 16 MiB memory sweep; medians of 15.
pub fn run_cold(p: &Params) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    build_ledger(dir.path(), p)?;
    let gate = Arc::new(Gate::new(GateConfig::default()));
    let snap = Snapshotter::open(dir.path(), Driver::Copy, gate.clone())?;
    let store = snap.store();
    let subject = Subject { namespace: "ns-0", principal: "" };
    const PAUSES: [&str; 5] = ["table built", "sleep 30 ms", "spin 30 ms", "16 MiB sweep", "none (after a decision)"];
    const PARTS: [&str; 5] = ["whole decision", "read transaction, nothing read", "one point read", "chain index look-up", "grant check of the layer"];
    println!("| first after                  | {:<30} | wall p50 µs | wall max µs | CPU p50 µs |", "part");
    println!("|------------------------------|{:-<32}|-------------|-------------|------------|", "");
    let mut n = 0;
    // First a round left out of the table: the ledger's pages come into redb's cache from the
    // file as decisions first touch them, which is not what this measures.
    for (i, pause) in std::iter::once("warm-up").chain(PAUSES).enumerate() {
        for part in if i == 0 { &PARTS[..1] } else { &PARTS[..] } {
            let part = *part;
            let (mut took, mut cpu) = (Vec::new(), Vec::new());
            for _ in 0..if i == 0 { 100 } else { 15 } {
                n += 1;
                let d = private_layer(store, p, n)?;
                let parent = ChainInfo { chain_id: digest("cold-parent", n), unknown_layers: 1, ..Default::default() };
                let target = ledger::chain_id(&parent.chain_id, &d);
                let decide = || store.read(|tx| Ok::<_, StoreError>(gate.extract_hinted(tx, &subject, &parent, &target, &[]).is_err()));
                gate.index.prefetch(snap.store_arc(), "", &parent.chain_id);
                gate.index.settle();
                match pause {
                    "sleep 30 ms" => std::thread::sleep(std::time::Duration::from_millis(30)),
                    "spin 30 ms" => {
                        let t = Instant::now();
                        while t.elapsed().as_millis() < 30 {
                            std::hint::spin_loop();
                        }
                    }
                    "16 MiB sweep" => {
                        let mut buf = vec![1u8; 16 << 20];
                        for i in (0..buf.len()).step_by(64) {
                            buf[i] = buf[i].wrapping_add(1);
                        }
                        std::hint::black_box(&buf);
                    }
                    "none (after a decision)" => decide()?.then_some(()).ok_or("an unpack of a private layer was allowed")?,
                    _ => {}
                }
                let ((), wall, on_cpu) = match part {
                    "whole decision" => timed(|| drop(std::hint::black_box(decide()))),
                    "read transaction, nothing read" => timed(|| drop(std::hint::black_box(store.read(|_| Ok::<_, StoreError>(()))))),
                    "one point read" => timed(|| drop(std::hint::black_box(store.read(|tx| ledger::chain(tx, &target))))),
                    "chain index look-up" => timed(|| drop(std::hint::black_box(store.read(|tx| gate.index.protected_layer_for_chain(tx, &parent.chain_id, &target))))),
                    _ => {
                        let chain = ChainInfo { diff_ids: vec![d.clone()], ..Default::default() };
                        timed(|| drop(std::hint::black_box(store.read(|tx| Ok::<_, StoreError>(gate.use_chain(tx, &subject, &chain).is_err())))))
                    }
                };
                took.push(wall);
                cpu.push(on_cpu);
            }
            let (took, cpu) = (sorted(took), sorted(cpu));
            if i == 0 {
                continue;
            }
            println!("| {pause:<28} | {part:<30} | {:>11.1} | {:>11.1} | {:>10.1} |", percentile(&took, 0.5), took[took.len() - 1], percentile(&cpu, 0.5));
        }
    }
    Ok(())
}

/// Wall-clock and thread CPU samples, in µs.
#[derive(Default)]
struct Samples {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Samples {
    fn push(&mut self, wall: f64, cpu: f64) {
        self.wall.push(wall);
        self.cpu.push(cpu);
    }

    fn at(&self, q: f64, wall: bool) -> f64 {
        let v = sorted(if wall { self.wall.clone() } else { self.cpu.clone() });
        if v.is_empty() {
            f64::NAN
        } else {
            percentile(&v, q)
        }
    }
}

/// Start-up time and resident memory of a fresh process (as the daemon starts) on ledgers of
/// `sizes` blob records (10 per manifest), side by side.
pub fn run_startup(sizes: &[usize], base: &Params) -> Result<(), Box<dyn std::error::Error>> {
    println!("| recorded blobs | manifests | ledger build |  ledger file | start-up |  resident memory |");
    println!("|----------------|-----------|--------------|--------------|----------|------------------|");
    for &blobs in sizes {
        let dir = tempfile::tempdir()?;
        let p = Params { manifests: (blobs / base.layers_per_manifest).max(1000), ..*base };
        let t = Instant::now();
        let n = build_ledger(dir.path(), &p)?;
        let build = t.elapsed().as_secs_f64();
        let size = std::fs::metadata(dir.path().join("metadata.redb"))?.len();
        let (ms, kib) = startup_of(dir.path())?;
        println!("| {:>14} | {:>9} | {:>10.0} s | {:>9.1} MB | {:>5.1} ms | {:>13.1} MB |", n, p.manifests, build, size as f64 / 1048576.0, ms, kib as f64 / 1024.0);
    }
    Ok(())
}

fn sha2_of(s: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).into()
}

/// Decisions in one namespace whose grants belong to many principals (`k8s.io` under the CRI
/// front with `[cri] principal = "pod"`: a grant per pod): a container's use of a chain by a
/// principal holding a grant (allowed) and by one holding none (refused), and an unpack step
/// (any grant of the namespace), at each of `sizes` grants, side by side.
pub fn run_principals(sizes: &[usize]) -> Result<(), Box<dyn std::error::Error>> {
    println!("| grants in k8s.io | use, own grant (p50 wall / cpu) | use, no grant (p50 wall / cpu) | unpack step (p50 wall / cpu) |");
    println!("|------------------|--------------------------------|--------------------------------|------------------------------|");
    for &n in sizes {
        let dir = tempfile::tempdir()?;
        let ns = "k8s.io";
        let cfg = GateConfig { require_principal: [ns.to_string()].into(), tenant_principals: [ns.to_string()].into(), ..Default::default() };
        let gate = Arc::new(Gate::new(cfg));
        let snap = Snapshotter::open(dir.path(), Driver::Copy, gate.clone())?;
        let store = snap.store();
        let origin = "registry.example.com:5000/team/app";
        let manifest = digest("manifest", 0);
        let mut diff_ids = Vec::new();
        store.write(|tx| -> Result<(), ledger::LedgerError> {
            let mut layers = Vec::new();
            for l in 0..10 {
                let payload = format!("blob-{l}");
                let b = crate::registry::sha256_digest(payload.as_bytes());
                let mut h = crate::diffid::Hasher::new(&b);
                let v = h.update(payload.as_bytes()).and_then(|()| h.finish()).map_err(|e| StoreError::Corrupt { key: b.clone(), reason: e.to_string() })?;
                ledger::record_pairing(tx, &v)?;
                ledger::record_blob(tx, &b, origin, "hmac-sha256:bench", 1)?;
                diff_ids.push(v.diff_id().to_string());
                layers.push(b);
            }
            let rec = ManifestRec { config: digest("config", 0), layers, diff_ids: diff_ids.clone(), origins: [origin.to_string()].into(), names: Default::default() };
            ledger::record_manifest(tx, &manifest, &rec)?;
            Ok(())
        })?;
        for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
            store.write(|tx| -> Result<(), StoreError> {
                for i in chunk {
                    ledger::put_grant(tx, ns, &format!("team-{i}/pod-{i}"), origin, &manifest, "hmac-sha256:bench", now_ns())?;
                }
                Ok(())
            })?;
        }
        let chain = ChainInfo { chain_id: String::new(), diff_ids: diff_ids.clone(), ..Default::default() };
        let parent = ChainInfo { chain_id: ledger::chain_ids(&diff_ids[..9]).pop().unwrap_or_default(), diff_ids: diff_ids[..9].to_vec(), ..Default::default() };
        let target = ledger::chain_ids(&diff_ids).pop().unwrap_or_default();
        let (mut own, mut none, mut unpack) = (Samples::default(), Samples::default(), Samples::default());
        for i in 0..300 {
            let p = format!("team-{}/pod-{}", (i * 7919) % n, (i * 7919) % n);
            let (r, wall, cpu) = timed(|| store.read(|tx| Ok::<_, StoreError>(gate.use_chain(tx, &Subject { namespace: ns, principal: &p }, &chain))));
            r?.map_err(|e| format!("{p}: {e}"))?;
            own.push(wall, cpu);
            let (r, wall, cpu) = timed(|| store.read(|tx| Ok::<_, StoreError>(gate.use_chain(tx, &Subject { namespace: ns, principal: "team-x/none" }, &chain))));
            if r?.is_ok() {
                return Err("a principal without a grant was allowed".into());
            }
            none.push(wall, cpu);
            let (r, wall, cpu) = timed(|| store.read(|tx| Ok::<_, StoreError>(gate.extract(tx, &Subject { namespace: ns, principal: "" }, &parent, &target))));
            r?.map_err(|e| format!("unpack: {e}"))?;
            unpack.push(wall, cpu);
        }
        let cell = |s: &Samples| format!("{:.0} µs / {:.0} µs", s.at(0.5, true), s.at(0.5, false));
        println!("| {n:>16} | {:>30} | {:>30} | {:>28} |", cell(&own), cell(&none), cell(&unpack));
    }
    Ok(())
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

//! `cargo bench --bench gate`: the gate's decision on Prepare with a large ledger
//! (10,000 manifests, 100,000 blobs, 1,000 namespaces by default), daemon start-up time,
//! ledger file size and resident memory. Sizes can be changed with PULLGATE_BENCH_MANIFESTS,
//! PULLGATE_BENCH_NAMESPACES.
fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    match pullgate::benchkit::startup_probe() {
        Ok(true) => return,
        Ok(false) => {}
        Err(e) => {
            eprintln!("start-up probe failed: {e}");
            std::process::exit(1);
        }
    }
    let p = pullgate::benchkit::Params {
        manifests: env("PULLGATE_BENCH_MANIFESTS", 10_000),
        layers_per_manifest: 10,
        shared_base_layers: 50,
        namespaces: env("PULLGATE_BENCH_NAMESPACES", 1_000),
        grants_per_namespace: 10,
        decisions: 5_000,
    };
    if let Err(e) = pullgate::benchkit::run(&p) {
        eprintln!("gate benchmark failed: {e}");
        std::process::exit(1);
    }
}

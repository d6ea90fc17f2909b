//! `cargo bench --bench gate`: the gate's decision on Prepare with a large ledger
//! (10,000 manifests, 100,000 blobs, 1,000 namespaces by default), the decision on an unpack of
//! a chain no pull recorded (80,050 protected layers) against the scan it replaced, daemon
//! start-up time, ledger file size and resident memory. Sizes can be changed with
//! PULLGATE_BENCH_MANIFESTS, PULLGATE_BENCH_NAMESPACES. With PULLGATE_BENCH_STARTUP=N,M,...
//! (recorded blobs, e.g. 100000,1000000) it measures start-up and memory at those sizes instead;
//! with PULLGATE_BENCH_COLD=1, an unpack decision made first after a pause, and its parts; with
//! PULLGATE_BENCH_PRINCIPALS=N,M,... decisions in one namespace holding N grants of distinct
//! principals (k8s.io with a principal per pod).
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
    if std::env::var_os("PULLGATE_BENCH_COLD").is_some() {
        if let Err(e) = pullgate::benchkit::run_cold(&p) {
            eprintln!("cold-decision benchmark failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Ok(sizes) = std::env::var("PULLGATE_BENCH_PRINCIPALS") {
        let sizes: Vec<usize> = sizes.split(',').filter_map(|s| s.trim().parse().ok()).collect();
        if let Err(e) = pullgate::benchkit::run_principals(&sizes) {
            eprintln!("principals benchmark failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Ok(sizes) = std::env::var("PULLGATE_BENCH_STARTUP") {
        let sizes: Vec<usize> = sizes.split(',').filter_map(|s| s.trim().parse().ok()).collect();
        if let Err(e) = pullgate::benchkit::run_startup(&sizes, &p) {
            eprintln!("start-up benchmark failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = pullgate::benchkit::run(&p) {
        eprintln!("gate benchmark failed: {e}");
        std::process::exit(1);
    }
}

//! metrics: pullgate's Prometheus metrics. Owns the one process-wide registry (every metric is
//! `pullgate_`-prefixed), the few `record_*` hooks the rest of the code calls (one line each, at
//! the end of what they count), the gauges computed at scrape time from the metadata database,
//! and the `[metrics] address` endpoint (`GET /metrics`, OpenMetrics text, over hyper).
//!
//! A leaf: it imports nothing of pullgate. Each error names its own outcome class
//! (`SnapshotterError::gated`, `PullError::outcome`), and the database gauges come from a
//! [`GaugeSource`] the snapshotter implements.
//!
//! Labels take values from small fixed sets only (a verb, allow/deny, a reason class, an op,
//! a result class, an outcome class, a source): never an image name, a namespace, a user or
//! anything a request carries, so cardinality is bounded and no secret can reach a label.
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot listen for metrics on {address}: {source}")]
    Bind { address: SocketAddr, source: std::io::Error },
}

/// The snapshot-service call the gate decided on (or the CRI front's CreateContainer).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Verb {
    prepare,
    view,
    mounts,
    create_container,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Decision {
    allow,
    deny,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabels {
    verb: Verb,
    result: Decision,
    /// `none` for an allow; else one of [`crate::gate::DenyReason`]'s names, or `ledger_error`.
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// `registry` (the /v2/ API) or `token` (the token server).
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    /// `downloaded` (from the registry) or `adopted` (already in containerd's content store on
    /// the node, taken into the namespace without a byte sent).
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PurposeLabels {
    /// `create_container` (the CRI front's decision: the image's status, names and documents)
    /// or `refused_request` (a refused Prepare or View reading its namespace's image records).
    purpose: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

struct Metrics {
    registry: Registry,
    gate: Family<GateLabels, Counter>,
    ops: Family<OpLabels, Histogram, fn() -> Histogram>,
    requests: Family<RequestLabels, Counter>,
    blobs: Family<SourceLabels, Counter>,
    blob_bytes: Family<SourceLabels, Counter>,
    containerd_calls: Family<PurposeLabels, Counter>,
    containerd_read: Family<PurposeLabels, Counter>,
    grants: Gauge,
    database_bytes: Gauge,
    snapshots: Family<KindLabels, Gauge>,
    snapshot_bytes: Gauge,
    scrape_errors: Counter,
}

fn latency_histogram() -> Histogram {
    // 5 ms to about 10 min.
    Histogram::new(exponential_buckets(0.005, 2.0, 18))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("pullgate");
    let m = Metrics {
        registry: Registry::default(),
        gate: Family::default(),
        ops: Family::new_with_constructor(latency_histogram),
        requests: Family::default(),
        blobs: Family::default(),
        blob_bytes: Family::default(),
        containerd_calls: Family::default(),
        containerd_read: Family::default(),
        grants: Gauge::default(),
        database_bytes: Gauge::default(),
        snapshots: Family::default(),
        snapshot_bytes: Gauge::default(),
        scrape_errors: Counter::default(),
    };
    registry.register(
        "gate_decisions",
        "Decisions of the gate on Prepare, View and Mounts (and the CRI front's CreateContainer), by verb, result and reason class",
        m.gate.clone(),
    );
    registry.register_with_unit(
        "operation_duration",
        "Duration of pulls and verifies (API and CRI front), by op and result class",
        Unit::Seconds,
        m.ops.clone(),
    );
    registry.register("registry_requests", "HTTP requests to registries and token servers, by kind and outcome class", m.requests.clone());
    registry.register("blobs", "Blobs a pull or verify obtained, by source (downloaded from the registry; adopted from the node's shared content store; copied from another namespace's content under an isolated store)", m.blobs.clone());
    registry.register_with_unit("blob", "Bytes of the blobs a pull or verify obtained, by source", Unit::Bytes, m.blob_bytes.clone());
    registry.register("containerd_calls", "Calls to containerd's API made to decide a request, by purpose", m.containerd_calls.clone());
    registry.register_with_unit("containerd_read", "Bytes of documents read from containerd's content store to decide a request, by purpose", Unit::Bytes, m.containerd_read.clone());
    registry.register("grants", "Grants in the ledger (computed at scrape)", m.grants.clone());
    registry.register_with_unit("metadata_database", "Size of the metadata database (snapshots and ledger) on disk (computed at scrape)", Unit::Bytes, m.database_bytes.clone());
    registry.register("snapshots", "Snapshots, by kind (computed at scrape)", m.snapshots.clone());
    registry.register_with_unit(
        "snapshots_committed",
        "Disk usage of committed snapshots as recorded at commit (computed at scrape)",
        Unit::Bytes,
        m.snapshot_bytes.clone(),
    );
    registry.register("scrape_errors", "Scrapes whose computed gauges could not be refreshed (database error or the time cap)", m.scrape_errors.clone());
    registry.register("build", "pullgate's version", Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]));
    Metrics { registry, ..m }
});

/// What a request meant to the gate: a decision (an allow, or a deny with its reason class),
/// or an error that was not the gate's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gated {
    Allowed,
    Denied(&'static str),
    NotDecided,
}

/// One decision of the gate.
pub fn record_gate(verb: Verb, gated: Gated) {
    let (result, reason) = match gated {
        Gated::Allowed => (Decision::allow, "none"),
        Gated::Denied(reason) => (Decision::deny, reason),
        Gated::NotDecided => return,
    };
    METRICS.gate.get_or_create(&GateLabels { verb, result, reason }).inc();
}

/// A Snapshots-service call: the gate's decision when `op` is one the gate decides (Prepare,
/// View, Mounts).
pub fn record_snapshot_call(op: &str, gated: Gated) {
    let verb = match op {
        "prepare" => Verb::prepare,
        "view" => Verb::view,
        "mounts" => Verb::mounts,
        _ => return,
    };
    record_gate(verb, gated);
}

/// A finished pull or verify (`op`: "pull", "verify", or "public_check" for the anonymous
/// verify of an image's own name that decides whether it is public at its origin), started at
/// `since`, with its result
/// class ("ok", "unauthenticated", "denied", "not_found", "unavailable", "error").
pub fn record_op(op: &'static str, since: Instant, result: &'static str) {
    METRICS.ops.get_or_create(&OpLabels { op, result }).observe(since.elapsed().as_secs_f64());
}

/// Calls made to containerd's API, and document bytes read from its content store, to decide
/// one request (`purpose`: `create_container` or `refused_request`).
pub fn record_containerd_reads(purpose: &'static str, calls: u64, bytes: u64) {
    METRICS.containerd_calls.get_or_create(&PurposeLabels { purpose }).inc_by(calls);
    METRICS.containerd_read.get_or_create(&PurposeLabels { purpose }).inc_by(bytes);
}

/// One HTTP exchange with a registry (`kind` "registry") or token server ("token"): its status,
/// or None when no answer came.
pub fn record_request(kind: &'static str, status: Option<u16>) {
    let outcome = match status {
        None => "network_error",
        Some(200..=299) => "success",
        Some(300..=399) => "redirect",
        Some(401) => "unauthorized",
        Some(403) => "forbidden",
        Some(404) => "not_found",
        Some(429) => "too_many_requests",
        Some(400..=499) => "client_error",
        Some(_) => "server_error",
    };
    METRICS.requests.get_or_create(&RequestLabels { kind, outcome }).inc();
}

/// A blob downloaded whole from the registry.
pub fn record_downloaded(bytes: u64) {
    record_blob("downloaded", bytes);
}

/// A blob taken from the node's content store into a namespace, nothing downloaded.
pub fn record_adopted(bytes: u64) {
    record_blob("adopted", bytes);
}

/// A blob copied into a namespace from another namespace's content (isolated store).
pub fn record_copied(bytes: u64) {
    record_blob("copied", bytes);
}

fn record_blob(source: &'static str, bytes: u64) {
    let l = SourceLabels { source };
    METRICS.blobs.get_or_create(&l).inc();
    METRICS.blob_bytes.get_or_create(&l).inc_by(bytes);
}

/// Longest time a scrape spends computing the database gauges; past it, they keep their last values.
const SCRAPE_CAP: Duration = Duration::from_secs(2);

/// The database's commit count when the gauges were last computed from it. Scrapes take turns
/// (one computes, those waiting reuse its values), and none reads the database again while
/// nothing was committed: a flood of scrapes costs at most one read per write.
static GAUGES_AT: tokio::sync::Mutex<Option<u64>> = tokio::sync::Mutex::const_new(None);

/// The gauges read from the metadata database.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DatabaseGauges {
    pub grants: i64,
    pub active: i64,
    pub view: i64,
    pub committed: i64,
    /// Bytes of the committed snapshots.
    pub committed_bytes: i64,
}

/// Where the database gauges come from (the snapshotter's metadata store).
pub trait GaugeSource: Send + Sync + 'static {
    /// How many writes the database has committed so far.
    fn commits(&self) -> u64;
    /// The gauges, read in one transaction; the error is logged.
    fn read_gauges(&self) -> Result<DatabaseGauges, String>;
}

/// Refreshes the gauges computed from the metadata database when it changed since they were
/// last computed (on the blocking pool, capped).
async fn refresh<S: GaugeSource>(source: &Arc<S>, database: &std::path::Path) {
    let mut at = GAUGES_AT.lock().await;
    let now = source.commits();
    if *at != Some(now) && read_gauges(source).await {
        *at = Some(now);
    }
    if let Ok(md) = std::fs::metadata(database) {
        METRICS.database_bytes.set(md.len() as i64);
    }
}

/// Computes the database gauges; false when the database could not be read in time.
async fn read_gauges<S: GaugeSource>(source: &Arc<S>) -> bool {
    let source = source.clone();
    let task = tokio::task::spawn_blocking(move || source.read_gauges());
    match tokio::time::timeout(SCRAPE_CAP, task).await {
        Ok(Ok(Ok(g))) => {
            let m = &*METRICS;
            m.grants.set(g.grants);
            for (kind, n) in [("active", g.active), ("view", g.view), ("committed", g.committed)] {
                m.snapshots.get_or_create(&KindLabels { kind }).set(n);
            }
            m.snapshot_bytes.set(g.committed_bytes);
            true
        }
        other => {
            METRICS.scrape_errors.inc();
            if let Ok(Ok(Err(e))) = other {
                tracing::warn!(error = %e, "metrics: cannot read the metadata database");
            }
            false
        }
    }
}

/// The exposition of every metric (OpenMetrics text).
fn encode() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &METRICS.registry);
    out
}

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `address` (so a taken port fails start-up) and returns the server to run.
pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, MetricsError> {
    tokio::net::TcpListener::bind(address).await.map_err(|source| MetricsError::Bind { address, source })
}

/// Serves `GET /metrics` on `listener` until `stop` resolves; one HTTP/1 connection per task.
pub async fn serve<S: GaugeSource>(listener: tokio::net::TcpListener, snap: Arc<S>, root: PathBuf, stop: impl std::future::Future<Output = ()>) {
    use http_body_util::Full;
    use hyper::{body::Bytes, Method, Response, StatusCode};
    let database = Arc::new(root.join("metadata.redb"));
    tokio::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (snap, database) = (snap.clone(), database.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (snap, database) = (snap.clone(), database.clone());
                async move {
                    let resp = if req.uri().path() != "/metrics" {
                        Response::builder().status(StatusCode::NOT_FOUND).body(Full::new(Bytes::from_static(b"not found: try /metrics\n")))
                    } else if req.method() != Method::GET && req.method() != Method::HEAD {
                        Response::builder().status(StatusCode::METHOD_NOT_ALLOWED).body(Full::new(Bytes::from_static(b"GET /metrics\n")))
                    } else {
                        refresh(&snap, &database).await;
                        Response::builder().header(hyper::header::CONTENT_TYPE, CONTENT_TYPE).body(Full::new(Bytes::from(encode())))
                    };
                    resp
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics: connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        record_request("registry", Some(200));
        record_request("token", None);
        record_downloaded(10);
        record_adopted(5);
        record_op("verify", Instant::now(), "ok");
        record_gate(Verb::prepare, Gated::Allowed);
        let text = encode();
        for want in [
            "pullgate_registry_requests_total{kind=\"registry\",outcome=\"success\"} 1",
            "pullgate_registry_requests_total{kind=\"token\",outcome=\"network_error\"} 1",
            "pullgate_blobs_total{source=\"downloaded\"} 1",
            "pullgate_blob_bytes_total{source=\"downloaded\"} 10",
            "pullgate_blob_bytes_total{source=\"adopted\"} 5",
            "pullgate_operation_duration_seconds_count{op=\"verify\",result=\"ok\"} 1",
            "pullgate_gate_decisions_total{verb=\"prepare\",result=\"allow\",reason=\"none\"} ",
            "pullgate_build_info{version=\"",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }

    #[test]
    fn errors_outside_the_gate_are_not_decisions() {
        let before = encode().matches("verb=\"view\"").count();
        record_gate(Verb::view, Gated::NotDecided);
        assert_eq!(encode().matches("verb=\"view\"").count(), before);
    }
}

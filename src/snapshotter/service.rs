//! service: the thin gRPC adapter from containerd's Snapshots service to [`Snapshotter`].
//! Each RPC unwraps its request, runs the domain call on the blocking pool, and maps the
//! error once through `From<SnapshotterError> for Status`. Proto<->domain conversion is in
//! `convert` at the bottom.
use super::rpc::snapshots_server::{Snapshots, SnapshotsServer};
use super::{Info, Kind, Labels, Mount, Snapshotter, SnapshotterError};
use containerd_client::services::v1::snapshots as pb;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Code, Request, Response, Status};

/// gRPC metadata key through which containerd (upstream 1.6+) names the namespace.
const NAMESPACE_HEADER: &str = "containerd-namespace";
/// Infos per List response message.
const LIST_BATCH: usize = 100;
/// List response messages waiting for containerd to read them, at most.
const LIST_QUEUE: usize = 2;

impl From<SnapshotterError> for Status {
    fn from(e: SnapshotterError) -> Status {
        let code = match &e {
            SnapshotterError::NotFound(_) => Code::NotFound,
            SnapshotterError::AlreadyExists(_) => Code::AlreadyExists,
            SnapshotterError::FailedPrecondition(_) => Code::FailedPrecondition,
            SnapshotterError::InvalidArgument(_) | SnapshotterError::Filter(_) => Code::InvalidArgument,
            SnapshotterError::Gate(_) => Code::PermissionDenied,
            SnapshotterError::Store(_) | SnapshotterError::Io { .. } => Code::Internal,
        };
        Status::new(code, e.to_string())
    }
}

pub struct Service {
    snap: Arc<Snapshotter>,
    public: Option<Arc<dyn PublicAtOrigin>>,
}

/// Establishes, for a container or view the gate refused, whether an image of the namespace on
/// that chain is public at its own origin (an anonymous verify of one of its names there), so
/// that the request can be decided again. Implemented above this module (by the puller).
#[tonic::async_trait]
pub trait PublicAtOrigin: Send + Sync {
    /// `chain`: the chainID an unpack makes, or a container's or view's parent holds. Returns
    /// the name that verified. `sandbox`: for a pod's sandbox (the images containerd's CRI
    /// keeps are asked first).
    async fn establish(&self, namespace: &str, principal: &str, chain: &str, sandbox: bool) -> Option<String>;
}

pub fn server(snap: Arc<Snapshotter>, public: Option<Arc<dyn PublicAtOrigin>>) -> SnapshotsServer<Service> {
    SnapshotsServer::new(Service { snap, public })
}

fn namespace_header<T>(req: &Request<T>) -> Option<String> {
    req.metadata().get_all(NAMESPACE_HEADER).iter().next().and_then(|v| v.to_str().ok()).map(str::to_string)
}

impl Service {
    async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Snapshotter) -> Result<T, SnapshotterError> + Send + 'static,
    ) -> Result<T, Status> {
        let out = self.call(op, f).await?;
        Self::done(op, out)
    }

    /// Runs `f` on the blocking pool.
    async fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Snapshotter) -> Result<T, SnapshotterError> + Send + 'static,
    ) -> Result<Result<T, SnapshotterError>, Status> {
        let snap = self.snap.clone();
        tokio::task::spawn_blocking(move || f(&snap)).await.map_err(|e| Status::internal(format!("{op}: worker failed: {e}")))
    }

    /// Counts and logs the outcome of `op`, and answers it.
    fn done<T>(op: &'static str, out: Result<T, SnapshotterError>) -> Result<T, Status> {
        crate::metrics::record_snapshot_call(op, super::gated(&out));
        if let Err(e) = &out {
            tracing::debug!(op, error = %e, "request refused");
        }
        Ok(out?)
    }

    /// A Prepare or View (`view`), decided again once when the gate refused it in a namespace
    /// the CRI front does not serve (the front asks for its own pods) and an image of the
    /// namespace holding that chain (an unpack's target, a container's or view's parent)
    /// proves public at its own origin.
    async fn create(&self, op: &'static str, view: bool, key: String, parent: String, labels: Labels, ns: Option<String>) -> Result<Vec<Mount>, Status> {
        let attempt = |key: String, parent: String, labels: Labels, ns: Option<String>| {
            self.call(op, move |s| if view { s.view(&key, &parent, labels, ns.as_deref()) } else { s.prepare(&key, &parent, labels, ns.as_deref()) })
        };
        let out = attempt(key.clone(), parent.clone(), labels.clone(), ns.clone()).await?;
        // The front decides its pods' containers itself; a pod's sandbox (which the front labels,
        // and which no pod's grant speaks for) is decided here, so that a tenant pulling the
        // sandbox image's bytes privately takes no sandbox away.
        let sandbox = labels.contains_key(super::SANDBOX_LABEL);
        let retry = match (&out, &self.public) {
            (Err(SnapshotterError::Gate(crate::gate::GateError::Denied(d))), Some(public))
                if matches!(d.kind, crate::gate::DenyReason::NoGrant | crate::gate::DenyReason::StaleGrant | crate::gate::DenyReason::UnknownLayer)
                    || (sandbox && d.kind == crate::gate::DenyReason::PrincipalRequired) =>
            {
                // Worked out only for a refusal: every other Prepare and View goes on at once.
                let namespace = super::namespace_of_key(&key).or(ns.as_deref()).unwrap_or_default().to_string();
                let chain = super::extract_target(if view { Kind::View } else { Kind::Active }, &key).unwrap_or_else(|| super::name_of_key(&parent).to_string());
                // (A sandbox is prepared for no principal.)
                let principal = match sandbox {
                    true => String::new(),
                    false => labels.get(super::PRINCIPAL_LABEL).cloned().unwrap_or_default(),
                };
                match !chain.is_empty() && (sandbox || !self.snap.serves_front(&namespace)) {
                    true => public.establish(&namespace, &principal, &chain, sandbox).await.map(|name| (name, principal, namespace)),
                    false => None,
                }
            }
            _ => None,
        };
        let out = match retry {
            Some((name, principal, namespace)) => {
                let again = attempt(key.clone(), parent, labels, ns).await?;
                match &again {
                    Ok(_) => tracing::info!(%namespace, %principal, %key, public_at = %name, "admitted: the image is public at its own origin (it verified there without a credential)"),
                    Err(e) => tracing::info!(%namespace, %principal, %key, public_at = %name, error = %e, "still refused after the image verified at its own origin without a credential"),
                }
                again
            }
            None => out,
        };
        Self::done(op, out)
    }
}

type ListStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ListSnapshotsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Snapshots for Service {
    async fn prepare(&self, req: Request<pb::PrepareSnapshotRequest>) -> Result<Response<pb::PrepareSnapshotResponse>, Status> {
        let ns = namespace_header(&req);
        let r = req.into_inner();
        let mounts = self.create("prepare", false, r.key, r.parent, convert::labels(r.labels), ns).await?;
        Ok(Response::new(pb::PrepareSnapshotResponse { mounts: convert::mounts(mounts) }))
    }

    async fn view(&self, req: Request<pb::ViewSnapshotRequest>) -> Result<Response<pb::ViewSnapshotResponse>, Status> {
        let ns = namespace_header(&req);
        let r = req.into_inner();
        let mounts = self.create("view", true, r.key, r.parent, convert::labels(r.labels), ns).await?;
        Ok(Response::new(pb::ViewSnapshotResponse { mounts: convert::mounts(mounts) }))
    }

    async fn mounts(&self, req: Request<pb::MountsRequest>) -> Result<Response<pb::MountsResponse>, Status> {
        let r = req.into_inner();
        let mounts = self.run("mounts", move |s| s.mounts(&r.key)).await?;
        Ok(Response::new(pb::MountsResponse { mounts: convert::mounts(mounts) }))
    }

    async fn commit(&self, req: Request<pb::CommitSnapshotRequest>) -> Result<Response<()>, Status> {
        let r = req.into_inner();
        tracing::debug!(key = %r.key, name = %r.name, "commit");
        self.run("commit", move |s| s.commit(&r.name, &r.key, convert::labels(r.labels))).await?;
        Ok(Response::new(()))
    }

    async fn remove(&self, req: Request<pb::RemoveSnapshotRequest>) -> Result<Response<()>, Status> {
        let r = req.into_inner();
        tracing::debug!(key = %r.key, "remove");
        self.run("remove", move |s| s.remove(&r.key)).await?;
        Ok(Response::new(()))
    }

    async fn stat(&self, req: Request<pb::StatSnapshotRequest>) -> Result<Response<pb::StatSnapshotResponse>, Status> {
        let r = req.into_inner();
        let info = self.run("stat", move |s| s.stat(&r.key)).await?;
        Ok(Response::new(pb::StatSnapshotResponse { info: Some(convert::info(info)) }))
    }

    async fn update(&self, req: Request<pb::UpdateSnapshotRequest>) -> Result<Response<pb::UpdateSnapshotResponse>, Status> {
        let r = req.into_inner();
        let info = r.info.ok_or_else(|| Status::invalid_argument("update: info is required"))?;
        let paths = r.update_mask.map(|m| m.paths).unwrap_or_default();
        let info = convert::info_in(info);
        let out = self.run("update", move |s| s.update(&info, &paths)).await?;
        Ok(Response::new(pb::UpdateSnapshotResponse { info: Some(convert::info(out)) }))
    }

    type ListStream = ListStream;

    async fn list(&self, req: Request<pb::ListSnapshotsRequest>) -> Result<Response<Self::ListStream>, Status> {
        let filters = req.into_inner().filters;
        // A malformed filter is refused before anything is streamed.
        super::filter::parse_all(&filters).map_err(SnapshotterError::from)?;
        // The walk runs on the blocking pool and hands its batches over a channel of two: a
        // Walk of every snapshot (containerd's GC) holds a few batches, not every record, and
        // waits while containerd reads.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<pb::ListSnapshotsResponse, Status>>(LIST_QUEUE);
        let snap = self.snap.clone();
        tokio::task::spawn_blocking(move || {
            let out = snap.walk_batches(&filters, &mut |infos| {
                for c in infos.chunks(LIST_BATCH) {
                    let msg = pb::ListSnapshotsResponse { info: c.iter().cloned().map(convert::info).collect() };
                    if tx.blocking_send(Ok(msg)).is_err() {
                        return false;
                    }
                }
                true
            });
            crate::metrics::record_snapshot_call("list", super::gated(&out));
            if let Err(e) = out {
                tracing::debug!(op = "list", error = %e, "request refused");
                let _ = tx.blocking_send(Err(e.into()));
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn usage(&self, req: Request<pb::UsageRequest>) -> Result<Response<pb::UsageResponse>, Status> {
        let r = req.into_inner();
        let (size, inodes) = self.run("usage", move |s| s.usage(&r.key)).await?;
        Ok(Response::new(pb::UsageResponse { size, inodes }))
    }

    async fn cleanup(&self, _req: Request<pb::CleanupRequest>) -> Result<Response<()>, Status> {
        let n = self.run("cleanup", |s| s.cleanup()).await?;
        tracing::debug!(removed = n, "cleanup");
        Ok(Response::new(()))
    }
}

mod convert {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    pub fn labels(l: std::collections::HashMap<String, String>) -> Labels {
        l.into_iter().collect()
    }

    pub fn mounts(m: Vec<Mount>) -> Vec<containerd_client::types::Mount> {
        m.into_iter()
            .map(|m| containerd_client::types::Mount { r#type: m.kind, source: m.source, target: String::new(), options: m.options })
            .collect()
    }

    fn ts(t: SystemTime) -> prost_types::Timestamp {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        prost_types::Timestamp { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
    }

    fn kind(k: Kind) -> pb::Kind {
        match k {
            Kind::View => pb::Kind::View,
            Kind::Active => pb::Kind::Active,
            Kind::Committed => pb::Kind::Committed,
        }
    }

    pub fn info(i: Info) -> pb::Info {
        pb::Info {
            name: i.name,
            parent: i.parent,
            kind: kind(i.kind) as i32,
            created_at: Some(ts(i.created)),
            updated_at: Some(ts(i.updated)),
            labels: i.labels.into_iter().collect(),
        }
    }

    /// Only name and labels of an incoming Info are used (the rest is immutable).
    pub fn info_in(i: pb::Info) -> Info {
        Info {
            name: i.name,
            parent: i.parent,
            kind: Kind::Active,
            labels: labels(i.labels),
            created: UNIX_EPOCH,
            updated: UNIX_EPOCH,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_class_has_its_code() {
        let io = || std::io::Error::other("x");
        let cases = [
            (SnapshotterError::NotFound("k".into()), Code::NotFound),
            (SnapshotterError::AlreadyExists("k".into()), Code::AlreadyExists),
            (SnapshotterError::FailedPrecondition("p".into()), Code::FailedPrecondition),
            (SnapshotterError::InvalidArgument("a".into()), Code::InvalidArgument),
            (SnapshotterError::Filter(super::super::filter::Filter::parse("==").unwrap_err()), Code::InvalidArgument),
            (SnapshotterError::Io { context: "c".into(), source: io() }, Code::Internal),
            (
                SnapshotterError::Store(crate::metastore::StoreError::Corrupt { key: "k".into(), reason: "r".into() }),
                Code::Internal,
            ),
        ];
        for (e, code) in cases {
            let msg = e.to_string();
            let s = Status::from(e);
            assert_eq!(s.code(), code, "{msg}");
            assert_eq!(s.message(), msg);
        }
    }

    #[test]
    fn namespace_header_first_value_wins() {
        let mut r = Request::new(());
        r.metadata_mut().append(NAMESPACE_HEADER, "first".parse().unwrap());
        r.metadata_mut().append(NAMESPACE_HEADER, "second".parse().unwrap());
        assert_eq!(namespace_header(&r).as_deref(), Some("first"));
    }
}

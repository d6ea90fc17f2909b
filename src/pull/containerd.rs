//! containerd: the calls pullgate makes into containerd's own API on behalf of one namespace
//! and one lease: content (info, labels, streamed writes, adoption by digest, reads), images,
//! snapshots through containerd's metadata (so keys, labels and GC are containerd's), and the
//! diff service that applies a layer to a snapshot's mounts; and, across namespaces, the
//! namespace list (labels included) and copies of a blob from one namespace's content to
//! another's (for an isolated content store).
use containerd_client::services::v1::snapshots as snap;
use containerd_client::services::v1::{
    content_client::ContentClient, diff_client::DiffClient, images_client::ImagesClient, introspection_client::IntrospectionClient, leases_client::LeasesClient,
    snapshots::snapshots_client::SnapshotsClient, AbortRequest, AddResourceRequest, ApplyRequest, CreateImageRequest, CreateRequest,
    DeleteRequest, Image, InfoRequest, ListContentRequest, PluginsRequest, ReadContentRequest, UpdateImageRequest, UpdateRequest, WriteAction,
    WriteContentRequest,
};
use containerd_client::types::{Descriptor, Mount};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

const NAMESPACE_HEADER: &str = "containerd-namespace";
/// Label on every working lease pullgate creates, so leases left by a killed pullgate can be
/// found and deleted.
pub const LEASE_LABEL: &str = "pullgate.io/lease";
/// Label on a lease a verify leaves behind on purpose (value: the manifest): it keeps the blobs
/// the verify placed in the namespace until it expires, for the namespace's next pull or run.
pub const HOLD_LABEL: &str = "pullgate.io/verified";
/// How long a verify's blobs are held in the namespace without an image referencing them.
pub const HOLD_FOR: std::time::Duration = std::time::Duration::from_secs(3600);
/// containerd 1.7+: a namespace with this label set to "true" shares its blobs with every
/// namespace, even under `content_sharing_policy = "isolated"`.
pub const SHAREABLE_LABEL: &str = "containerd.io/namespace.shareable";
const LEASE_HEADER: &str = "containerd-lease";
/// Label on a lease in pullgate's public namespace: it holds the public blobs put there
/// (value "1") until it expires.
pub const PUBLIC_LEASE_LABEL: &str = "pullgate.io/public";
/// How long a public blob stays in pullgate's public namespace after it was put there: then
/// containerd's GC takes the namespace's record (each namespace that adopted it keeps its own),
/// and the next namespace that needs the blob puts it there again.
pub const PUBLIC_HOLD_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// The type of containerd's content plugins (its local store is the one with id `content`).
const CONTENT_PLUGIN_TYPE: &str = "io.containerd.content.v1";
/// The type of containerd's metadata plugin (id `bolt`), which exports the content sharing policy.
const METADATA_PLUGIN_TYPE: &str = "io.containerd.metadata.v1";

/// What pullgate asks containerd about its node (again after `NODE_FACTS_TTL`): where its local
/// content store keeps blobs, its content sharing policy, and what its version reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts {
    /// containerd's local content store's `blobs` directory (`exports.root` of the content plugin).
    pub blobs: Option<Arc<PathBuf>>,
    /// `content_sharing_policy` as the metadata plugin exports it: Some(true) "shared",
    /// Some(false) "isolated", None when containerd does not say.
    pub shared: Option<bool>,
    /// containerd 1.7 or later (reads `containerd.io/namespace.shareable`).
    pub honours_shareable: bool,
    /// How containerd asks an http server with TLS settings ([`http_with_tls`]).
    pub http_with_tls: crate::registry::hosts::HttpWithTls,
}
/// Bytes per read of a blob's file: the size of containerd's own Read messages.
const READ_CHUNK: usize = 1 << 20;
/// Chunks of copies read from the node at once, across all pulls and verifies (each one
/// `READ_CHUNK` bytes on its way to containerd; the semaphore is never closed).
static CHUNK_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(32);
/// Bytes per content Write message of a download (containerd accepts messages of up to 16 MiB).
const WRITE_CHUNK: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
#[error("containerd: {context}: {status}")]
pub struct ContainerdError {
    pub context: String,
    pub status: String,
    pub code: Code,
}

type Result<T> = std::result::Result<T, ContainerdError>;

fn err(context: impl Into<String>) -> impl FnOnce(Status) -> ContainerdError {
    let context = context.into();
    move |s| ContainerdError { context, status: s.message().to_string(), code: s.code() }
}

/// The endpoint of containerd's unix socket (the URI is ignored: `dial` connects), with HTTP/2
/// windows sized for blobs: h2's default of 64 KiB costs a round trip per 64 KiB of a blob
/// streamed through the content API.
fn endpoint() -> tonic::transport::Endpoint {
    tonic::transport::Endpoint::from_static("http://[::]").initial_stream_window_size(8 << 20).initial_connection_window_size(16 << 20)
}

fn dial(
    path: std::path::PathBuf,
) -> impl tower::Service<tonic::codegen::http::Uri, Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>, Error = std::io::Error, Future: Send> + Clone + Send + 'static {
    tower::service_fn(move |_: tonic::codegen::http::Uri| {
        let path = path.clone();
        async move { Ok(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
    })
}

/// A channel to a gRPC server on a unix socket (containerd's, or pullgate's own API).
pub async fn channel(path: &Path) -> std::result::Result<Channel, tonic::transport::Error> {
    endpoint().connect_with_connector(dial(path.to_path_buf())).await
}

/// A channel to containerd that connects on first use (and again after containerd restarts).
pub fn lazy_channel(path: std::path::PathBuf) -> Channel {
    endpoint().connect_with_connector_lazy(dial(path))
}

fn shareable(labels: &HashMap<String, String>) -> bool {
    labels.get(SHAREABLE_LABEL).is_some_and(|v| v == "true")
}

/// (major, minor, patch) of a containerd version as its Version call or `--version` prints it
/// ("1.6.20", "v2.1.4", "1.7.24~ds1"); zeros for what cannot be read.
pub(crate) fn version_parts(version: &str) -> (u32, u32, u32) {
    let mut parts = version.trim().trim_start_matches('v').split(|c: char| !c.is_ascii_digit()).map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Whether a containerd of this version reads `SHAREABLE_LABEL`: 1.7 and later.
pub fn honours_shareable(version: &str) -> bool {
    version_parts(version) >= (1, 7, 0)
}

/// How a containerd of this version asks an `http://` server with TLS settings: as written
/// before 1.6.25 and 1.7.7, over https first from then on (`hosts::HttpWithTls`; 1.7.24 took
/// 2.x's reading), and a loopback registry's own server (a default of its own from 1.6.9); a
/// version that cannot be read is taken as the newest reading.
pub fn http_with_tls(version: &str) -> crate::registry::hosts::HttpWithTls {
    use crate::registry::hosts::HttpWithTls::*;
    match version_parts(version) {
        (0, 0, 0) => UnlessPort80,
        (1, 6, p) if p >= 25 => PortNot80,
        (1, 7, 7) => Always,
        (1, 7, p) if p >= 24 => UnlessPort80,
        (1, 7, p) if p >= 8 => PortNot80,
        (1, 7, _) => AsWritten,
        (1, 6, p) if p >= 9 => AsWritten,
        (0 | 1, _, _) => BeforeLoopback,
        _ => UnlessPort80,
    }
}

#[derive(Clone)]
pub struct Containerd {
    channel: Channel,
    namespace: String,
    lease: Option<String>,
    /// containerd's local content store's `blobs` directory, when known (`with_blobs`).
    blobs: Option<Arc<PathBuf>>,
}

impl Containerd {
    pub async fn connect(address: &Path, namespace: &str) -> Result<Containerd> {
        let channel = channel(address).await.map_err(|e| ContainerdError {
            context: format!("connect to {}", address.display()),
            status: e.to_string(),
            code: Code::Unavailable,
        })?;
        Ok(Containerd::on(channel, namespace))
    }

    /// A client over an existing channel to containerd (the CRI front's).
    pub fn on(channel: Channel, namespace: &str) -> Containerd {
        Containerd { channel, namespace: namespace.to_string(), lease: None, blobs: None }
    }

    /// Where copies read blob bytes from (`content_blobs`); without it they read through
    /// containerd's Read call.
    pub fn with_blobs(mut self, blobs: Option<Arc<PathBuf>>) -> Containerd {
        self.blobs = blobs;
        self
    }

    /// The node's facts (`NodeFacts`): the `blobs` directory of containerd's local content
    /// store, from the root its content plugin exports in Introspection (`ctr plugins ls -d`),
    /// the sharing policy its metadata plugin exports, and its version.
    pub async fn node_facts(&self) -> Result<NodeFacts> {
        let filters = vec![format!("type=={CONTENT_PLUGIN_TYPE},id==content"), format!("type=={METADATA_PLUGIN_TYPE},id==bolt")];
        let plugins = IntrospectionClient::new(self.channel.clone())
            .plugins(PluginsRequest { filters })
            .await
            .map_err(err("list containerd's content and metadata plugins"))?
            .into_inner()
            .plugins;
        let export = |ty: &str, id: &str, key: &str| plugins.iter().find(|p| p.r#type == ty && p.id == id && p.init_err.is_none()).and_then(|p| p.exports.get(key).cloned());
        let blobs = export(CONTENT_PLUGIN_TYPE, "content", "root").filter(|r| Path::new(r).is_absolute()).map(|r| Arc::new(Path::new(&r).join("blobs")));
        let shared = match export(METADATA_PLUGIN_TYPE, "bolt", "policy").as_deref() {
            Some("shared") => Some(true),
            Some("isolated") => Some(false),
            _ => None,
        };
        let version = containerd_client::services::v1::version_client::VersionClient::new(self.channel.clone())
            .version(())
            .await
            .map_err(err("containerd version"))?
            .into_inner()
            .version;
        Ok(NodeFacts { blobs, shared, honours_shareable: honours_shareable(&version), http_with_tls: http_with_tls(&version) })
    }

    /// Makes this namespace one whose blobs containerd 1.7+ lets every namespace read
    /// (`SHAREABLE_LABEL`), creating it if it does not exist; true when it was not labelled so.
    pub async fn make_shareable(&self) -> Result<bool> {
        use containerd_client::services::v1::{namespaces_client::NamespacesClient, CreateNamespaceRequest, GetNamespaceRequest, Namespace};
        let mut client = NamespacesClient::new(self.channel.clone());
        let context = || format!("make namespace {} shareable", self.namespace);
        match client.get(GetNamespaceRequest { name: self.namespace.clone() }).await {
            Ok(r) if r.get_ref().namespace.as_ref().is_some_and(|n| shareable(&n.labels)) => Ok(false),
            Ok(_) => {
                self.set_shareable_label(Some("true")).await.map_err(err(context()))?;
                Ok(true)
            }
            Err(s) if s.code() == Code::NotFound => {
                let ns = Namespace { name: self.namespace.clone(), labels: HashMap::from([(SHAREABLE_LABEL.to_string(), "true".to_string())]) };
                match client.create(CreateNamespaceRequest { namespace: Some(ns) }).await {
                    Ok(_) => Ok(true),
                    Err(s) if s.code() == Code::AlreadyExists => Box::pin(self.make_shareable()).await,
                    Err(s) => Err(err(context())(s)),
                }
            }
            Err(s) => Err(err(context())(s)),
        }
    }

    /// Sets (`Some`) or removes (`None`) this namespace's `SHAREABLE_LABEL`, other labels kept.
    async fn set_shareable_label(&self, value: Option<&str>) -> std::result::Result<(), tonic::Status> {
        use containerd_client::services::v1::{namespaces_client::NamespacesClient, Namespace, UpdateNamespaceRequest};
        let labels = value.map(|v| HashMap::from([(SHAREABLE_LABEL.to_string(), v.to_string())])).unwrap_or_default();
        let ns = Namespace { name: self.namespace.clone(), labels };
        let mask = prost_types::FieldMask { paths: vec![format!("labels.{SHAREABLE_LABEL}")] };
        NamespacesClient::new(self.channel.clone()).update(UpdateNamespaceRequest { namespace: Some(ns), update_mask: Some(mask) }).await.map(drop)
    }

    fn req<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        // Names and lease ids are validated printable ASCII, so these parse.
        if let Some(Ok(v)) = (!self.namespace.is_empty()).then(|| self.namespace.parse()) {
            r.metadata_mut().insert(NAMESPACE_HEADER, v);
        }
        if let Some(Ok(v)) = self.lease.as_deref().map(str::parse) {
            r.metadata_mut().insert(LEASE_HEADER, v);
        }
        r
    }

    /// Creates a lease that protects everything written until it is deleted (or expires, in
    /// an hour). With `hold` (a verify's manifest), the lease is one `keep_lease` may leave
    /// behind: a later pullgate process does not delete it as stale.
    pub async fn begin_lease(&mut self, hold: Option<&str>) -> Result<()> {
        let kind = match hold {
            Some(manifest) => (HOLD_LABEL.to_string(), manifest.to_string()),
            None => (LEASE_LABEL.to_string(), "1".to_string()),
        };
        self.begin_lease_for(kind, HOLD_FOR).await
    }

    /// Begins a lease in pullgate's public namespace that holds what is put under it for
    /// `PUBLIC_HOLD_FOR` (not a working lease: a restarted pullgate leaves it).
    pub async fn begin_public_lease(&mut self) -> Result<()> {
        self.begin_lease_for((PUBLIC_LEASE_LABEL.to_string(), "1".to_string()), PUBLIC_HOLD_FOR).await
    }

    async fn begin_lease_for(&mut self, kind: (String, String), hold_for: std::time::Duration) -> Result<()> {
        let id = format!("pullgate-{}", uuid::Uuid::new_v4());
        let expire = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + hold_for).to_string();
        let labels = HashMap::from([("containerd.io/gc.expire".to_string(), expire), kind]);
        LeasesClient::new(self.channel.clone())
            .create(self.req(CreateRequest { id: id.clone(), labels }))
            .await
            .map_err(err("create lease"))?;
        self.lease = Some(id);
        Ok(())
    }

    /// Puts blobs of the namespace under this pull's lease, so that containerd's GC cannot
    /// take one the pull found present (held, say, only by the lease of a killed pullgate that
    /// was just deleted) before the image record references it. Blobs the namespace does not
    /// have are held once written. Needs `begin_lease`.
    pub async fn hold_content(&self, digests: &[&str]) -> Result<()> {
        self.hold("content", digests).await
    }

    /// Puts a snapshot of the namespace under this pull's lease, for the same reason: an unpack
    /// that finds a layer's chain already there builds on it, and GC must not take it meanwhile
    /// (as it would a chain a killed pull left, once that pull's lease is gone).
    pub async fn hold_snapshot(&self, snapshotter: &str, key: &str) -> Result<()> {
        self.hold(&format!("snapshots/{snapshotter}"), &[key]).await
    }

    async fn hold(&self, kind: &str, ids: &[&str]) -> Result<()> {
        let Some(lease) = &self.lease else { return Ok(()) };
        for id in ids {
            let resource = containerd_client::services::v1::Resource { id: id.to_string(), r#type: kind.to_string() };
            LeasesClient::new(self.channel.clone())
                .add_resource(self.req(AddResourceRequest { id: lease.clone(), resource: Some(resource) }))
                .await
                .map_err(err(format!("hold {kind} {id} under lease {lease}")))?;
        }
        Ok(())
    }

    pub fn has_lease(&self) -> bool {
        self.lease.is_some()
    }

    /// Leaves the lease in place (it expires by itself); returns its id.
    pub fn keep_lease(&mut self) -> Option<String> {
        self.lease.take()
    }

    /// The namespace's verify holds for `manifest` (lease ids).
    pub async fn holds(&self, manifest: &str) -> Result<Vec<String>> {
        use containerd_client::services::v1::ListRequest;
        let filter = format!("labels.\"{HOLD_LABEL}\"==\"{manifest}\"");
        let list = LeasesClient::new(self.channel.clone()).list(self.req(ListRequest { filters: vec![filter] })).await.map_err(err("list leases"))?;
        Ok(list.into_inner().leases.into_iter().map(|l| l.id).collect())
    }

    /// Deletes the namespace's verify holds for `manifest` other than lease `keep` (a verify
    /// run again replaces its hold rather than adding one). Failures only leave a hold to expire.
    pub async fn drop_holds(&self, manifest: &str, keep: &str) {
        let Ok(ids) = self.holds(manifest).await else { return };
        for id in ids.into_iter().filter(|id| id != keep) {
            let _ = LeasesClient::new(self.channel.clone()).delete(self.req(DeleteRequest { id, sync: false })).await;
        }
    }

    pub async fn end_lease(&mut self) {
        if let Some(id) = self.lease.take() {
            let r = LeasesClient::new(self.channel.clone()).delete(self.req(DeleteRequest { id: id.clone(), sync: false })).await;
            if let Err(e) = r {
                tracing::warn!(lease = %id, error = %e.message(), "cannot delete lease; it expires in an hour");
            }
        }
    }

    /// Every namespace of containerd, with its labels.
    pub async fn namespaces(&self) -> Result<Vec<(String, HashMap<String, String>)>> {
        use containerd_client::services::v1::{namespaces_client::NamespacesClient, ListNamespacesRequest};
        let list = NamespacesClient::new(self.channel.clone())
            .list(ListNamespacesRequest { filter: String::new() })
            .await
            .map_err(err("list namespaces"))?
            .into_inner()
            .namespaces;
        Ok(list.into_iter().map(|n| (n.name, n.labels)).collect())
    }

    /// Removes this namespace's `SHAREABLE_LABEL` (nothing to do if it has none, or does not
    /// exist).
    pub async fn make_unshareable(&self) -> Result<()> {
        match self.set_shareable_label(None).await {
            Ok(()) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(err(format!("remove the shareable label of namespace {}", self.namespace))(s)),
        }
    }

    /// The namespaces labelled `containerd.io/namespace.shareable=true`: containerd 1.7+ lets
    /// every namespace read their blobs, whatever the content sharing policy.
    pub async fn shareable_namespaces(&self) -> Result<Vec<String>> {
        Ok(self.namespaces().await?.into_iter().filter(|(_, l)| shareable(l)).map(|(n, _)| n).collect())
    }

    /// Whether this namespace is labelled `containerd.io/namespace.shareable=true` (one Get; a
    /// namespace containerd does not know yet is not).
    pub async fn is_shareable(&self) -> Result<bool> {
        use containerd_client::services::v1::{namespaces_client::NamespacesClient, GetNamespaceRequest};
        match NamespacesClient::new(self.channel.clone()).get(GetNamespaceRequest { name: self.namespace.clone() }).await {
            Ok(r) => Ok(r.into_inner().namespace.is_some_and(|n| shareable(&n.labels))),
            Err(s) if s.code() == Code::NotFound => Ok(false),
            Err(s) => Err(err(format!("get namespace {}", self.namespace))(s)),
        }
    }

    /// Deletes the leases a previous pullgate process left behind (it was killed mid-pull), in
    /// every namespace, so what they held can be collected. Called once, before this process
    /// creates a lease of its own. Returns how many were deleted. A verify's hold
    /// (`HOLD_LABEL`) is not stale: it expires by itself.
    pub async fn delete_stale_leases(address: &Path) -> Result<usize> {
        use containerd_client::services::v1::ListRequest;
        let all = Containerd::connect(address, "").await?;
        let mut n = 0;
        for (ns, _) in all.namespaces().await? {
            let c = all.elsewhere(&ns);
            let filter = format!("labels.\"{LEASE_LABEL}\"");
            let leases = LeasesClient::new(c.channel.clone())
                .list(c.req(ListRequest { filters: vec![filter] }))
                .await
                .map_err(err(format!("list leases in {}", c.namespace)))?
                .into_inner()
                .leases;
            for l in leases {
                if LeasesClient::new(c.channel.clone()).delete(c.req(DeleteRequest { id: l.id, sync: false })).await.is_ok() {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// For each of `digests` this namespace lacks, another namespace whose content store holds
    /// it: the namespaces in `hints` (digest -> namespace) are asked first, and only when they
    /// do not hold every blob, every namespace (one List per namespace).
    pub async fn holders_elsewhere(&self, digests: &[&str], hints: &HashMap<String, String>) -> Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        let hinted: std::collections::BTreeSet<&String> = hints.values().filter(|ns| **ns != self.namespace).collect();
        for ns in hinted {
            for d in self.elsewhere(ns).present(digests).await? {
                out.entry(d).or_insert_with(|| ns.clone());
            }
        }
        if digests.iter().all(|d| out.contains_key(*d)) {
            return Ok(out);
        }
        for (ns, _) in self.namespaces().await? {
            if ns == self.namespace || digests.iter().all(|d| out.contains_key(*d)) {
                continue;
            }
            for d in self.elsewhere(&ns).present(digests).await? {
                out.entry(d).or_insert_with(|| ns.clone());
            }
        }
        Ok(out)
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The same connection, reading namespace `namespace` (no lease).
    pub fn elsewhere(&self, namespace: &str) -> Containerd {
        Containerd { channel: self.channel.clone(), namespace: namespace.to_string(), lease: None, blobs: self.blobs.clone() }
    }

    /// Copies a blob from namespace `from`'s content store into this namespace's (under this
    /// lease): the bytes are written back with the expected digest and size, which containerd
    /// checks again on commit; on disk the content store keeps one copy. Under
    /// `content_sharing_policy = "isolated"` this is the only way a namespace gets a blob
    /// another namespace holds without downloading it again (`blob_bytes` says where the bytes are
    /// read). `labels` are set with the commit (one metadata transaction, not two).
    pub async fn copy_from(&self, from: &str, digest: &str, size: u64, labels: &HashMap<String, String>) -> Result<()> {
        // Timed for the debug log: how long the bytes took to send, and the commit (containerd's
        // fsync and metadata transaction) after them.
        let t0 = std::time::Instant::now();
        let mut r = self.elsewhere(from).blob_bytes(digest, size).await?;
        let mut w = self.writer(digest, size);
        loop {
            // A chunk is read and handed to containerd's stream with a slot held: the chunks of
            // every copy on the node take turns for the slots, so no pull waits for another's
            // whole blobs, and the bytes read ahead of containerd stay bounded.
            let _slot = CHUNK_SLOTS.acquire().await;
            let Some(chunk) = r.next_chunk().await? else { break };
            w.write_owned(chunk).await?;
        }
        let t1 = t0.elapsed();
        w.commit(labels.clone()).await?;
        tracing::debug!(digest, size, sent_ms = t1.as_millis() as u64, committed_ms = t0.elapsed().as_millis() as u64, "copied");
        crate::metrics::record_copied(size);
        Ok(())
    }

    /// Whether the namespace's content store has the blob.
    pub async fn has_content(&self, digest: &str) -> Result<bool> {
        match ContentClient::new(self.channel.clone()).info(self.req(InfoRequest { digest: digest.to_string() })).await {
            Ok(_) => Ok(true),
            Err(s) if s.code() == Code::NotFound => Ok(false),
            Err(s) => Err(err(format!("content info {digest}"))(s)),
        }
    }

    /// Which of `digests` the namespace's content store has, in one List call.
    pub async fn present(&self, digests: &[&str]) -> Result<std::collections::HashSet<String>> {
        Ok(self.present_labelled(digests).await?.into_keys().collect())
    }

    /// Which of `digests` the namespace's content store holds, each with its labels, in one
    /// List call.
    pub async fn present_labelled(&self, digests: &[&str]) -> Result<HashMap<String, HashMap<String, String>>> {
        if digests.is_empty() {
            // (No filter would list every blob of the namespace.)
            return Ok(Default::default());
        }
        Ok(self.list_content_info(digests.iter().map(|d| format!("digest=={d}")).collect()).await?.into_iter().map(|i| (i.digest, i.labels)).collect())
    }

    /// Every blob of the namespace's content store.
    pub async fn all_content(&self) -> Result<Vec<String>> {
        self.list_content(vec![]).await
    }

    /// The digests of the namespace's blobs that match one of `filters` (all without one).
    async fn list_content(&self, filters: Vec<String>) -> Result<Vec<String>> {
        Ok(self.list_content_info(filters).await?.into_iter().map(|i| i.digest).collect())
    }

    /// The namespace's blobs that match one of `filters`, as containerd describes them.
    async fn list_content_info(&self, filters: Vec<String>) -> Result<Vec<containerd_client::services::v1::Info>> {
        let mut stream = ContentClient::new(self.channel.clone())
            .list(self.req(ListContentRequest { filters }))
            .await
            .map_err(err("list content"))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(batch) = stream.next().await {
            out.extend(batch.map_err(err("list content"))?.info);
        }
        Ok(out)
    }

    /// Sets labels on a blob of the namespace (other labels are kept).
    pub async fn label_content(&self, digest: &str, labels: &HashMap<String, String>) -> Result<()> {
        let info = containerd_client::services::v1::Info { digest: digest.to_string(), labels: labels.clone(), ..Default::default() };
        let paths = labels.keys().map(|k| format!("labels.{k}")).collect();
        ContentClient::new(self.channel.clone())
            .update(self.req(UpdateRequest { info: Some(info), update_mask: Some(prost_types::FieldMask { paths }) }))
            .await
            .map_err(err(format!("label content {digest}")))?;
        Ok(())
    }

    /// Opens a blob of the namespace (`size` bytes) for reading: its file in containerd's
    /// content store when pullgate knows where that is (`with_blobs`), which spares containerd
    /// reading the file and sending every byte over its socket, else through containerd.
    /// Whoever reads must not trust the bytes: a copy's commit is checked by containerd, a
    /// layer's hash by pullgate's hasher against the digest.
    pub async fn blob_bytes(&self, digest: &str, size: u64) -> Result<BlobReader> {
        match self.blobs.as_deref().and_then(|b| open_blob_file(b, digest, size)) {
            Some(file) => Ok(BlobReader::File { file: Some(file), left: size, digest: digest.to_string() }),
            None => Ok(BlobReader::Containerd(Box::new(self.reader(digest).await?))),
        }
    }

    /// Opens a blob of the namespace for reading through containerd; `ContentReader::next_chunk`
    /// gives its bytes.
    pub async fn reader(&self, digest: &str) -> Result<ContentReader> {
        let stream = ContentClient::new(self.channel.clone())
            .read(self.req(ReadContentRequest { digest: digest.to_string(), offset: 0, size: 0 }))
            .await
            .map_err(err(format!("read content {digest}")))?
            .into_inner();
        Ok(ContentReader { stream, digest: digest.to_string() })
    }

    /// Reads a whole blob of at most `cap` bytes.
    pub async fn read_content(&self, digest: &str, cap: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut r = self.reader(digest).await?;
        while let Some(c) = r.next_chunk().await? {
            if out.len() + c.len() > cap {
                return Err(ContainerdError { context: format!("read content {digest}"), status: format!("larger than {cap} bytes"), code: Code::OutOfRange });
            }
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    /// Makes a blob that containerd already holds (shared content store) part of this
    /// namespace without sending bytes: containerd reports such an ingest as complete, and
    /// committing it with the expected digest adopts the blob. False when containerd does not
    /// have it. `labels` are set with the commit (one metadata transaction, not two).
    pub async fn adopt_content(&self, digest: &str, size: u64, labels: &HashMap<String, String>) -> Result<bool> {
        let r#ref = format!("pullgate-adopt-{}", uuid::Uuid::new_v4());
        let context = || format!("adopt content {digest}");
        let (tx, rx) = tokio::sync::mpsc::channel::<WriteContentRequest>(2);
        let stat = WriteContentRequest { action: WriteAction::Stat as i32, r#ref: r#ref.clone(), total: size as i64, expected: digest.to_string(), ..Default::default() };
        tx.send(stat).await.map_err(|_| ContainerdError { context: context(), status: "stream closed".into(), code: Code::Aborted })?;
        let mut stream = match ContentClient::new(self.channel.clone()).write(self.req(tokio_stream::wrappers::ReceiverStream::new(rx))).await {
            Err(s) if s.code() == Code::AlreadyExists => return Ok(true),
            Err(s) => return Err(err(context())(s)),
            Ok(s) => s.into_inner(),
        };
        let status = match stream.next().await {
            Some(Ok(m)) => m,
            Some(Err(s)) if s.code() == Code::AlreadyExists => return Ok(true),
            Some(Err(s)) => return Err(err(context())(s)),
            None => return Ok(false),
        };
        let adopted = if status.total == size as i64 && status.offset == size as i64 && size > 0 {
            let commit = WriteContentRequest {
                action: WriteAction::Commit as i32,
                r#ref: r#ref.clone(),
                total: size as i64,
                expected: digest.to_string(),
                offset: size as i64,
                labels: labels.clone(),
                ..Default::default()
            };
            let sent = tx.send(commit).await.is_ok();
            match stream.next().await {
                Some(Ok(_)) => sent,
                Some(Err(s)) if s.code() == Code::AlreadyExists => true,
                Some(Err(s)) => return Err(err(context())(s)),
                None => false,
            }
        } else {
            false
        };
        drop(tx);
        if !adopted {
            let _ = ContentClient::new(self.channel.clone()).abort(self.req(AbortRequest { r#ref })).await;
        } else {
            crate::metrics::record_adopted(size);
        }
        Ok(adopted)
    }

    /// Opens a streamed write of `digest` (`size` bytes). Feed it with `ContentWriter::write`
    /// and finish with `commit`; dropping it without commit aborts the ingest.
    pub fn writer(&self, digest: &str, size: u64) -> ContentWriter {
        let r#ref = format!("pullgate-{}", uuid::Uuid::new_v4());
        let (tx, rx) = tokio::sync::mpsc::channel::<WriteContentRequest>(1);
        let client = ContentClient::new(self.channel.clone());
        let req = self.req(tokio_stream::wrappers::ReceiverStream::new(rx));
        let digest_s = digest.to_string();
        let task = tokio::spawn(async move {
            let mut c = client;
            let mut stream = c.write(req).await.map_err(err(format!("write content {digest_s}")))?.into_inner();
            // Responses are drained as they come so the server never blocks on them.
            while let Some(m) = stream.next().await {
                m.map_err(err(format!("write content {digest_s}")))?;
            }
            Ok(())
        });
        ContentWriter { tx: Some(tx), task: Some(task), r#ref, digest: digest.to_string(), size, offset: 0, buf: Vec::new(), channel: self.channel.clone(), namespace: self.namespace.clone(), lease: self.lease.clone() }
    }

    /// Writes a small blob held in memory.
    pub async fn write_bytes(&self, digest: &str, bytes: &[u8], labels: HashMap<String, String>) -> Result<()> {
        if self.has_content(digest).await? {
            return self.label_content(digest, &labels).await;
        }
        let mut w = self.writer(digest, bytes.len() as u64);
        w.write(bytes).await?;
        w.commit(labels).await
    }

    /// Creates or updates image record `name` pointing at `target`, with `labels` set (other
    /// labels of an existing record are kept).
    /// A record that already points at `target` with `labels` is left as it is (no write), as
    /// containerd's CRI leaves it.
    pub async fn put_image(&self, name: &str, target: Descriptor, labels: HashMap<String, String>) -> Result<()> {
        if let Some(old) = self.image_record(name).await? {
            if old.target.as_ref() == Some(&target) && labels.iter().all(|(k, v)| old.labels.get(k) == Some(v)) {
                return Ok(());
            }
        }
        let mut paths = vec!["target".to_string()];
        paths.extend(labels.keys().map(|k| format!("labels.{k}")));
        let image = Image { name: name.to_string(), target: Some(target), labels, ..Default::default() };
        let mut images = ImagesClient::new(self.channel.clone());
        match images.create(self.req(CreateImageRequest { image: Some(image.clone()), source_date_epoch: None })).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::AlreadyExists => {
                let mask = prost_types::FieldMask { paths };
                images
                    .update(self.req(UpdateImageRequest { image: Some(image), update_mask: Some(mask), source_date_epoch: None }))
                    .await
                    .map_err(err(format!("update image {name}")))?;
                Ok(())
            }
            Err(s) => Err(err(format!("create image {name}"))(s)),
        }
    }

    /// The namespace's image records that pass `filters` (containerd's filter syntax): name
    /// and target, oldest first, read from one answer of at most `max_message` bytes.
    pub async fn images_filtered(&self, filters: &[&str], max_message: usize) -> Result<Vec<(String, Descriptor)>> {
        let req = containerd_client::services::v1::ListImagesRequest { filters: filters.iter().map(|f| f.to_string()).collect() };
        let list = ImagesClient::new(self.channel.clone()).max_decoding_message_size(max_message).list(self.req(req)).await.map_err(err("list images".to_string()))?;
        let mut images = list.into_inner().images;
        images.sort_by_key(|i| i.created_at.as_ref().map(|t| (t.seconds, t.nanos)));
        Ok(images.into_iter().filter_map(|i| i.target.map(|t| (i.name, t))).collect())
    }

    /// What image record `name` points at (None: no such record).
    pub async fn image_target(&self, name: &str) -> Result<Option<Descriptor>> {
        Ok(self.image_record(name).await?.and_then(|i| i.target))
    }

    /// Image record `name` (None: no such record).
    async fn image_record(&self, name: &str) -> Result<Option<Image>> {
        let req = containerd_client::services::v1::GetImageRequest { name: name.to_string() };
        match ImagesClient::new(self.channel.clone()).get(self.req(req)).await {
            Ok(r) => Ok(r.into_inner().image),
            Err(s) if s.code() == Code::NotFound => Ok(None),
            Err(s) => Err(err(format!("get image {name}"))(s)),
        }
    }

    fn snapshots(&self) -> SnapshotsClient<Channel> {
        SnapshotsClient::new(self.channel.clone())
    }

    pub async fn snapshot_exists(&self, snapshotter: &str, key: &str) -> Result<bool> {
        match self.snapshots().stat(self.req(snap::StatSnapshotRequest { snapshotter: snapshotter.into(), key: key.into() })).await {
            Ok(_) => Ok(true),
            Err(s) if s.code() == Code::NotFound => Ok(false),
            Err(s) => Err(err(format!("stat snapshot {key}"))(s)),
        }
    }

    /// Prepares an unpack snapshot; None when containerd adopted an existing chain instead.
    pub async fn prepare(&self, snapshotter: &str, key: &str, parent: &str, labels: HashMap<String, String>) -> Result<Option<Vec<Mount>>> {
        let r = snap::PrepareSnapshotRequest { snapshotter: snapshotter.into(), key: key.into(), parent: parent.into(), labels };
        match self.snapshots().prepare(self.req(r)).await {
            Ok(m) => Ok(Some(m.into_inner().mounts)),
            Err(s) if s.code() == Code::AlreadyExists => Ok(None),
            Err(s) => Err(err(format!("prepare snapshot {key}"))(s)),
        }
    }

    pub async fn commit(&self, snapshotter: &str, name: &str, key: &str, labels: HashMap<String, String>) -> Result<()> {
        let r = snap::CommitSnapshotRequest { snapshotter: snapshotter.into(), name: name.into(), key: key.into(), labels };
        self.snapshots().commit(self.req(r)).await.map_err(err(format!("commit snapshot {name}")))?;
        Ok(())
    }

    pub async fn remove_snapshot(&self, snapshotter: &str, key: &str) {
        let r = snap::RemoveSnapshotRequest { snapshotter: snapshotter.into(), key: key.into() };
        if let Err(s) = self.snapshots().remove(self.req(r)).await {
            tracing::warn!(key, error = %s.message(), "cannot remove unpack snapshot");
        }
    }

    /// Applies a layer blob to mounts; returns the applied (uncompressed) digest.
    pub async fn apply(&self, layer: Descriptor, mounts: Vec<Mount>) -> Result<String> {
        let d = layer.digest.clone();
        let r = ApplyRequest { diff: Some(layer), mounts, payloads: HashMap::new(), sync_fs: false };
        let resp = DiffClient::new(self.channel.clone()).apply(self.req(r)).await.map_err(err(format!("apply layer {d}")))?;
        Ok(resp.into_inner().applied.map(|a| a.digest).unwrap_or_default())
    }
}

/// The blob's file in containerd's local content store (`blobs`), opened, when the digest is a
/// sha256 one and the file has the blob's size; None otherwise (the copy then reads through
/// containerd). The file's bytes are no claim: containerd hashes what is written and refuses a
/// commit that does not match.
fn open_blob_file(blobs: &Path, digest: &str, size: u64) -> Option<std::fs::File> {
    let hex = digest.strip_prefix("sha256:").filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))?;
    let path = blobs.join("sha256").join(hex);
    let file = std::fs::File::open(&path).map_err(|e| tracing::debug!(path = %path.display(), error = %e, "cannot open the blob's file; reading it through containerd")).ok()?;
    (file.metadata().ok()?.len() == size).then_some(file)
}

/// A blob's bytes, from its file or through containerd (`Containerd::blob_bytes`).
pub enum BlobReader {
    File { file: Option<std::fs::File>, left: u64, digest: String },
    Containerd(Box<ContentReader>),
}

impl BlobReader {
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let (file, left, digest) = match self {
            BlobReader::Containerd(r) => return r.next_chunk().await,
            BlobReader::File { file, left, digest } => (file, left, digest),
        };
        let n = READ_CHUNK.min(*left as usize);
        let failed = |e: String| ContainerdError { context: format!("read the file of blob {digest}"), status: e, code: Code::Unavailable };
        if n == 0 {
            return Ok(None);
        }
        let Some(mut f) = file.take() else { return Err(failed("read after an error".into())) };
        // On the blocking pool: the runtime's workers serve containerd's snapshot requests.
        let (f, chunk) = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut buf = vec![0u8; n];
            f.read_exact(&mut buf).map(|()| (f, buf))
        })
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| failed(e.to_string()))?;
        *file = Some(f);
        *left -= n as u64;
        Ok(Some(chunk))
    }
}

/// A blob being read from the content store.
pub struct ContentReader {
    stream: tonic::Streaming<containerd_client::services::v1::ReadContentResponse>,
    digest: String,
}

impl ContentReader {
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        match self.stream.next().await {
            Some(c) => Ok(Some(c.map_err(err(format!("read content {}", self.digest)))?.data)),
            None => Ok(None),
        }
    }
}

/// A streamed content write in progress.
pub struct ContentWriter {
    tx: Option<tokio::sync::mpsc::Sender<WriteContentRequest>>,
    task: Option<tokio::task::JoinHandle<Result<()>>>,
    r#ref: String,
    digest: String,
    size: u64,
    offset: u64,
    buf: Vec<u8>,
    channel: Channel,
    namespace: String,
    lease: Option<String>,
}

impl ContentWriter {
    async fn send(&mut self, m: WriteContentRequest) -> Result<()> {
        let closed = || ContainerdError { context: format!("write content {}", "stream"), status: "stream closed".into(), code: Code::Aborted };
        match &self.tx {
            Some(tx) => tx.send(m).await.map_err(|_| closed()),
            None => Err(closed()),
        }
    }

    /// A request at the current offset (containerd truncates an ingest when told offset 0).
    /// The expected digest goes with the commit alone, where containerd checks the bytes
    /// against it: named when the ingest opens, it would make containerd look through every
    /// namespace for a shareable one holding the blob (under an isolated store), and named with
    /// each chunk, look the blob up again per chunk.
    fn message(&self, action: WriteAction, data: Vec<u8>, labels: HashMap<String, String>) -> WriteContentRequest {
        WriteContentRequest {
            action: action as i32,
            r#ref: self.r#ref.clone(),
            total: self.size as i64,
            expected: if action == WriteAction::Commit { self.digest.clone() } else { String::new() },
            offset: self.offset as i64,
            data,
            labels,
        }
    }

    async fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.buf);
        let n = data.len() as u64;
        let m = self.message(WriteAction::Write, data, HashMap::new());
        self.send(m).await?;
        self.offset += n;
        Ok(())
    }

    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        if self.buf.is_empty() {
            // Room for one message at once: growing the buffer would copy it again.
            self.buf.reserve(WRITE_CHUNK.min(self.size.saturating_sub(self.offset) as usize).max(data.len()));
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= WRITE_CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes bytes the caller gives up: a chunk large enough is sent as it is when nothing is
    /// buffered (not copied into the buffer first).
    pub async fn write_owned(&mut self, data: Vec<u8>) -> Result<()> {
        if self.buf.is_empty() && data.len() >= WRITE_CHUNK / 8 {
            self.buf = data;
            return self.flush().await;
        }
        self.write(&data).await
    }

    /// Commits with `labels`; containerd checks size and digest again. A blob the namespace
    /// already had (a concurrent writer committed first) gets the labels by an update.
    pub async fn commit(mut self, labels: HashMap<String, String>) -> Result<()> {
        self.flush().await?;
        let m = self.message(WriteAction::Commit, Vec::new(), labels.clone());
        self.send(m).await?;
        self.tx = None;
        let task = self.task.take();
        match task {
            Some(t) => match t.await {
                Ok(r) => match r {
                    // Committed meanwhile by another writer in the namespace: containerd said so
                    // at the commit without putting it under this lease, so it is held here (as
                    // the pull's own would be) before it is labelled; gone by then, it fails.
                    Err(e) if e.code == Code::AlreadyExists => {
                        let c = Containerd { channel: self.channel.clone(), namespace: self.namespace.clone(), lease: self.lease.clone(), blobs: None };
                        c.hold_content(&[self.digest.as_str()]).await?;
                        if labels.is_empty() {
                            return c.has_content(&self.digest).await?.then_some(()).ok_or_else(|| ContainerdError {
                                context: format!("write content {}", self.digest),
                                status: "committed by another writer, then gone".into(),
                                code: Code::NotFound,
                            });
                        }
                        c.label_content(&self.digest, &labels).await
                    }
                    other => other,
                },
                Err(e) => Err(ContainerdError { context: "write content".into(), status: e.to_string(), code: Code::Internal }),
            },
            None => Ok(()),
        }
    }
}

impl Drop for ContentWriter {
    fn drop(&mut self) {
        // Not committed: close the stream and abort the ingest so nothing half-written stays.
        if self.tx.take().is_some() {
            let r#ref = self.r#ref.clone();
            let channel = self.channel.clone();
            let (ns, lease) = (self.namespace.clone(), self.lease.clone());
            tokio::spawn(async move {
                let c = Containerd { channel, namespace: ns, lease, blobs: None };
                let _ = ContentClient::new(c.channel.clone()).abort(c.req(AbortRequest { r#ref })).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shareable_namespaces_from_1_7() {
        for (v, yes) in [("1.6.20~ds1", false), ("v1.6.38", false), ("1.7.24~ds1", true), ("v2.1.4", true), ("2.4.2", true), ("", false), ("garbage", false)] {
            assert_eq!(honours_shareable(v), yes, "{v}");
        }
    }

    #[test]
    fn https_first_as_each_version_reads_it() {
        use crate::registry::hosts::HttpWithTls::*;
        for (v, r) in [
            ("1.5.18", BeforeLoopback),
            ("v1.6.8", BeforeLoopback),
            ("1.6.9", AsWritten),
            ("1.6.20~ds1", AsWritten),
            ("v1.6.24", AsWritten),
            ("1.6.25", PortNot80),
            ("1.6.36", PortNot80),
            ("1.7.0", AsWritten),
            ("1.7.6", AsWritten),
            ("1.7.7", Always),
            ("1.7.8", PortNot80),
            ("1.7.23", PortNot80),
            ("1.7.24~ds1", UnlessPort80),
            ("v2.0.0", UnlessPort80),
            ("2.1.9+unknown", UnlessPort80),
            ("", UnlessPort80),
            ("garbage", UnlessPort80),
        ] {
            assert_eq!(http_with_tls(v), r, "{v}");
        }
    }

    #[test]
    fn a_blob_file_is_opened_only_for_a_sha256_digest_of_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let hex = "a".repeat(64);
        std::fs::create_dir_all(dir.path().join("sha256")).unwrap();
        std::fs::write(dir.path().join("sha256").join(&hex), b"four").unwrap();
        std::fs::write(dir.path().join("outside"), b"four").unwrap();
        assert!(open_blob_file(dir.path(), &format!("sha256:{hex}"), 4).is_some());
        // Another size: not the blob the copy expects.
        assert!(open_blob_file(dir.path(), &format!("sha256:{hex}"), 5).is_none());
        // Digests that are not a sha256 hex name the path of nothing in the store.
        for d in ["sha256:../outside", &format!("sha256:{}", "A".repeat(64)), &format!("sha512:{hex}"), &format!("sha256:{hex}/"), "sha256:", &hex] {
            assert!(open_blob_file(dir.path(), d, 4).is_none(), "{d}");
        }
        assert!(open_blob_file(dir.path(), &format!("sha256:{}", "b".repeat(64)), 4).is_none());
    }
}

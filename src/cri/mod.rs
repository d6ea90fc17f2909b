//! cri: pullgate's CRI front, kubelet's `containerRuntimeEndpoint` and `imageServiceEndpoint`
//! (`[cri] socket`), in front of containerd's own CRI. It owns three calls:
//! - `PullImage`: pullgate's pull in namespace `k8s.io` with the pod's pull-secret credential,
//!   recording the grant for the pod's principal, then the image records containerd's CRI makes
//!   (image ID, `repo:tag`, `repo@digest`, labelled `io.cri-containerd.image=managed`);
//! - `CreateContainer`: decided here, for the principal of the pod as containerd recorded it,
//!   before forwarding; an admission then tells the snapshotter (in this process) which principal
//!   the container's rootfs Prepare is for;
//! - `RunPodSandbox` and `CreateContainer` lose every annotation a pod author could use to
//!   speak to pullgate's snapshotter (`containerd.io/snapshot.ref`,
//!   `containerd.io/snapshot/pullgate*`) before they are forwarded.
//!
//! `ImageStatus` is forwarded unchanged, and containerd's answer kept for a second: the
//! CreateContainer kubelet sends next takes the image's names from it (`Statuses`).
//!
//! Every other call, streams and methods this build does not know included, is forwarded as
//! raw bytes, unchanged.
pub mod names;
pub mod wire;

use crate::config::CriPrincipal;
use crate::credential::{Credential, TokenForm};
use crate::pull::{self, Puller};
use crate::reference::Reference;
use crate::snapshotter::{AdmissionFor, Snapshotter, SnapshotterError};
use base64::Engine;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use k8s_cri::v1 as cri;
use prost::Message;
use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status, Streaming};
use wire::RawCodec;

pub use crate::config::CRI_NAMESPACE;

/// Which image of a container a decision is for (named in the admission's log line).
#[derive(Clone, Copy)]
enum Part {
    Rootfs,
    ImageVolume,
}

impl Part {
    fn as_str(self) -> &'static str {
        match self {
            Part::Rootfs => "rootfs",
            Part::ImageVolume => "image-volume",
        }
    }
}

/// The principal of a PullImage that names no pod (no `sandbox_config`, as `crictl pull`
/// sends): the node's own pull. Its grant lets the node unpack the image and no pod run it,
/// whatever `require_principal` says: `@` is in no Kubernetes namespace or pod name, so no
/// pod's principal is ever this one.
pub const NODE_PRINCIPAL: &str = "@node";
/// The label containerd's CRI puts on the image records it makes.
const MANAGED_LABEL: (&str, &str) = ("io.cri-containerd.image", "managed");
/// kubelet's and containerd's CRI message size limit.
const MAX_MESSAGE: usize = 16 << 20;

const PULL_IMAGE: &str = "/runtime.v1.ImageService/PullImage";
const CREATE_CONTAINER: &str = "/runtime.v1.RuntimeService/CreateContainer";
const RUN_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RunPodSandbox";
const REMOVE_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RemovePodSandbox";
const IMAGE_STATUS: &str = "/runtime.v1.ImageService/ImageStatus";

/// Annotations a pod author could use to speak to pullgate's snapshotter: containerd passes
/// `containerd.io/snapshot/*` annotations (1.6: a container's; all versions: a pod's, to its
/// sandbox) and `containerd.io/snapshot.ref` to a Prepare as labels.
fn is_snapshotter_annotation(key: &str) -> bool {
    key == crate::snapshotter::SNAPSHOT_REF_LABEL || key.starts_with("containerd.io/snapshot/pullgate")
}

type MessageStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

/// Each name's lock and how many hold or wait for it.
type LockMap = Arc<std::sync::Mutex<HashMap<String, (Arc<tokio::sync::Mutex<()>>, usize)>>>;

/// Locks by name, each entry kept only while someone holds or waits for it (so the map does not
/// grow with every image the node ever ran).
#[derive(Default)]
struct ChainLocks(LockMap);

/// A held (or awaited) lock of [`ChainLocks`]; dropped, it releases the lock and forgets the
/// entry when nobody else holds or waits for it.
struct ChainGuard {
    map: LockMap,
    name: String,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl ChainLocks {
    async fn lock(&self, name: &str) -> ChainGuard {
        let mutex = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let entry = map.entry(name.to_string()).or_default();
            entry.1 += 1;
            entry.0.clone()
        };
        // Counted before waiting: a waiter whose call is dropped still counts itself out.
        let mut g = ChainGuard { map: self.0.clone(), name: name.to_string(), held: None };
        g.held = Some(mutex.lock_owned().await);
        g
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for ChainGuard {
    fn drop(&mut self) {
        self.held.take();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&self.name) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(&self.name);
            }
        }
    }
}

pub struct Front {
    /// One lock per layer chain, held from a CreateContainer's admission until its rootfs is
    /// prepared: the rootfs admission on offer for a chain is always the one the Prepare in
    /// flight was decided with (with several on offer, concurrent containers would consume each
    /// other's and the post-check would undo them).
    chain_locks: ChainLocks,
    upstream: Channel,
    upstream_address: PathBuf,
    puller: Arc<Puller>,
    snap: Arc<Snapshotter>,
    principal: CriPrincipal,
    platform: String,
    /// containerd's answers to kubelet's ImageStatus calls of the last `STATUS_REUSE`.
    statuses: Statuses,
}

/// containerd's answers to the ImageStatus calls the front forwarded lately, by image ID (at
/// most `STATUS_KEPT`, each for `STATUS_REUSE`). kubelet asks for an image's status just
/// before it creates a container of it: CreateContainer's first reading of the image's names
/// is that answer, not another call (containerd lists every name of an image in it, which
/// takes it tens of milliseconds at thousands of names). The names are containerd's answer,
/// not a tenant's claim; the name containerd builds the container from, a name in the request
/// and the image ID are still looked up anew, and a reading that does not hold is done again
/// with a fresh call.
#[derive(Default)]
struct Statuses(std::sync::Mutex<std::collections::VecDeque<(std::time::Instant, Arc<cri::Image>)>>);

/// How long an ImageStatus answer serves CreateContainer; how many answers are kept, and how
/// many names they hold together at most (an answer of more is not kept).
const STATUS_REUSE: std::time::Duration = std::time::Duration::from_secs(1);
const STATUS_KEPT: usize = 16;
const STATUS_NAMES_KEPT: usize = 50_000;

fn names_in(i: &cri::Image) -> usize {
    i.repo_tags.len() + i.repo_digests.len()
}

impl Statuses {
    fn keep(&self, image: cri::Image) {
        if names_in(&image) > STATUS_NAMES_KEPT {
            return;
        }
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        q.retain(|(at, i)| i.id != image.id && at.elapsed() < STATUS_REUSE);
        while q.len() >= STATUS_KEPT || q.iter().map(|(_, i)| names_in(i)).sum::<usize>() + names_in(&image) > STATUS_NAMES_KEPT {
            q.pop_front();
        }
        q.push_back((std::time::Instant::now(), Arc::new(image)));
    }

    /// The image of ID `id` as containerd answered lately, if it did (answers past their time
    /// are dropped).
    fn of(&self, id: &str) -> Option<Arc<cri::Image>> {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        q.retain(|(at, _)| at.elapsed() < STATUS_REUSE);
        q.iter().rev().find(|(_, i)| i.id == id).map(|(_, i)| i.clone())
    }
}

use crate::registry::host_platform;

/// The principal of a pod: its Kubernetes namespace, or `<namespace>/<pod name>/<pod UID>`.
fn principal_of(mode: CriPrincipal, meta: Option<&cri::PodSandboxMetadata>) -> Result<String, Status> {
    let Some(m) = meta.filter(|m| !m.namespace.is_empty()) else {
        return Ok(String::new());
    };
    let p = match mode {
        CriPrincipal::Namespace => m.namespace.clone(),
        // The pod's UID too: a later pod of the same name (a StatefulSet's, recreated) is
        // another pod, and holds none of this one's grants. Pods without one (kubelet always
        // sets it; other CRI clients may not) could not be told apart: refused.
        CriPrincipal::Pod if m.uid.is_empty() => {
            return Err(Status::invalid_argument(format!(
                "pullgate: pod {:?} in namespace {:?} has no UID: under [cri] principal = \"pod\" a pod is its namespace, name and UID, so that a later pod of the same name holds none of its grants; give the pod a UID",
                m.name, m.namespace
            )));
        }
        CriPrincipal::Pod => format!("{}/{}/{}", m.namespace, m.name, m.uid),
    };
    if !crate::snapshotter::principal_is_valid(&p) {
        return Err(Status::invalid_argument(format!("pullgate: pod {:?} in namespace {:?} makes no valid principal", m.name, m.namespace)));
    }
    Ok(p)
}

/// How many times CreateContainer reads an image's names (ImageStatus) when the name containerd
/// builds the container from moved meanwhile, and the wait before each further read (times the
/// reads so far).
const FRESH_READS: u32 = 3;
const FRESH_READ_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Whether a principal has the form `[cri] principal = "pod"` gives a pod
/// (`namespace/name/uid`, each part non-empty).
fn is_pod_principal(p: &str) -> bool {
    let parts: Vec<&str> = p.split('/').collect();
    parts.len() == 3 && parts.iter().all(|x| !x.is_empty())
}

/// The credential of a PullImage: an identity token (the refresh token of the registry's token
/// service), a registry token (a bearer token), user name and password, or docker's base64
/// `auth`. A token wins over a user name, as docker's does: a secret made from the config.json
/// of a token login carries a placeholder user name beside it.
fn credential_of(auth: Option<&cri::AuthConfig>) -> Result<Option<Credential>, Status> {
    let Some(a) = auth else { return Ok(None) };
    let bad = |why: &str| Status::invalid_argument(format!("pullgate: the pull secret's credential is unusable: {why}"));
    let token = |form, t: &str| Credential::token(form, t.to_string()).map(Some).map_err(|e| bad(&e.to_string()));
    let pair = match (a.identity_token.is_empty(), a.registry_token.is_empty()) {
        (false, false) => return Err(bad("it holds both an identity token and a registry token; give one")),
        (false, true) => return token(TokenForm::Identity, &a.identity_token),
        (true, false) => return token(TokenForm::Registry, &a.registry_token),
        // The fields as kubelet sent them (a colon in the user name stays in the user name).
        (true, true) if !a.username.is_empty() || !a.password.is_empty() => {
            return Credential::password(&a.username, &a.password).map(Some).map_err(|_| bad("expected a user name and a password"));
        }
        (true, true) if !a.auth.is_empty() => {
            let raw = base64::engine::general_purpose::STANDARD.decode(a.auth.trim()).map_err(|_| bad("auth is not base64"))?;
            String::from_utf8(raw).map_err(|_| bad("auth is not USER:PASSWORD"))?
        }
        (true, true) => return Ok(None),
    };
    // Never the credential itself in the message.
    Credential::parse(&pair).map(Some).map_err(|_| bad("expected a user name and a password"))
}

fn decode<M: Message + Default>(what: &str, body: &Bytes) -> Result<M, Status> {
    M::decode(body.as_ref()).map_err(|e| Status::invalid_argument(format!("pullgate: malformed {what} request: {e}")))
}

impl Front {
    pub fn new(upstream_address: PathBuf, puller: Arc<Puller>, snap: Arc<Snapshotter>, principal: CriPrincipal) -> Front {
        Front {
            chain_locks: Default::default(),
            upstream: crate::pull::containerd::lazy_channel(upstream_address.clone()),
            upstream_address,
            puller,
            snap,
            principal,
            platform: host_platform(),
            statuses: Default::default(),
        }
    }

    fn upstream(&self) -> tonic::client::Grpc<Channel> {
        tonic::client::Grpc::new(self.upstream.clone()).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE)
    }

    fn path(p: &str) -> Result<http::uri::PathAndQuery, Status> {
        p.parse().map_err(|_| Status::unimplemented(format!("pullgate: malformed method path {p:?}")))
    }

    async fn ready(&self, grpc: &mut tonic::client::Grpc<Channel>) -> Result<(), Status> {
        grpc.ready().await.map_err(|e| Status::unavailable(format!("pullgate: containerd's CRI at {} is unreachable: {e}", self.upstream_address.display())))
    }

    /// Forwards a call of any kind to containerd's CRI as raw messages.
    async fn forward(&self, path: &str, req: Request<Streaming<Bytes>>) -> Result<Response<MessageStream>, Status> {
        let mut grpc = self.upstream();
        self.ready(&mut grpc).await?;
        let (meta, _, incoming) = req.into_parts();
        // The client's messages until its stream ends (or breaks, which ends the call).
        let outgoing = incoming.take_while(|m| std::future::ready(m.is_ok())).filter_map(|m| std::future::ready(m.ok()));
        let resp = grpc.streaming(Request::from_parts(meta, Default::default(), outgoing), Self::path(path)?, RawCodec).await?;
        Ok(resp.map(|s| Box::pin(s) as MessageStream))
    }

    /// Calls a unary method of containerd's CRI with a typed message.
    async fn call<Req: Message, Resp: Message + Default>(&self, path: &str, msg: Req) -> Result<Resp, Status> {
        let resp = self.forward_unary(path, Default::default(), Bytes::from(msg.encode_to_vec())).await?;
        decode(path, resp.get_ref())
    }

    /// Forwards one message of a unary call.
    async fn forward_unary(&self, path: &str, meta: tonic::metadata::MetadataMap, body: Bytes) -> Result<Response<Bytes>, Status> {
        let mut grpc = self.upstream();
        self.ready(&mut grpc).await?;
        grpc.unary(Request::from_parts(meta, Default::default(), body), Self::path(path)?, RawCodec).await
    }

    async fn dispatch(self: Arc<Self>, path: String, req: Request<Streaming<Bytes>>) -> Result<Response<MessageStream>, Status> {
        let pruning = self.principal == CriPrincipal::Pod && path == REMOVE_POD_SANDBOX;
        if ![PULL_IMAGE, CREATE_CONTAINER, RUN_POD_SANDBOX, IMAGE_STATUS].contains(&path.as_str()) && !pruning {
            return self.forward(&path, req).await;
        }
        let (meta, _, mut incoming) = req.into_parts();
        let body = incoming.next().await.ok_or_else(|| Status::invalid_argument("pullgate: the request has no message"))??;
        let resp = match path.as_str() {
            PULL_IMAGE => {
                // The client's deadline (gRPC's grpc-timeout): a pull still going when it passes
                // is abandoned, and one that failed after it answers DeadlineExceeded, as the
                // client (and containerd's own CRI) would report it.
                let deadline = grpc_deadline(&meta);
                let pulled = match deadline {
                    Some(d) => tokio::time::timeout_at(d, self.pull_image(body)).await.unwrap_or_else(|_| Err(deadline_passed())),
                    None => self.pull_image(body).await,
                };
                match pulled {
                    Err(_) if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) => Err(deadline_passed()),
                    other => other,
                }
                .map(Response::new)?
            }
            CREATE_CONTAINER => self.create_container(meta, body).await?,
            IMAGE_STATUS => self.image_status(meta, body).await?,
            REMOVE_POD_SANDBOX => self.remove_pod_sandbox(meta, body).await?,
            _ => self.run_pod_sandbox(meta, body).await?,
        };
        let (meta, body, ext) = resp.into_parts();
        let one: MessageStream = Box::pin(futures_util::stream::once(std::future::ready(Ok(body))));
        Ok(Response::from_parts(meta, one, ext))
    }

    /// Forwards an ImageStatus call and keeps containerd's answer for the CreateContainer that
    /// follows it (`Statuses`). The answer goes back as containerd gave it.
    async fn image_status(&self, meta: tonic::metadata::MetadataMap, body: Bytes) -> Result<Response<Bytes>, Status> {
        let resp = self.forward_unary(IMAGE_STATUS, meta, body).await?;
        if let Ok(st) = cri::ImageStatusResponse::decode(resp.get_ref().clone()) {
            if let Some(image) = st.image.filter(|i| crate::reference::is_digest(&i.id)) {
                self.statuses.keep(image);
            }
        }
        Ok(resp)
    }

    /// Pulls with the pod's credential for the pod's principal, then makes the image records
    /// containerd's CRI would. The registry decides: without a credential it accepts, nothing
    /// is recorded and the pull fails with the registry's answer.
    async fn pull_image(&self, body: Bytes) -> Result<Bytes, Status> {
        let req: cri::PullImageRequest = decode("PullImage", &body)?;
        let image = req.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        // Named as containerd's CRI names it: its image store lists an image's names in that
        // form, and containerd builds a container from the first of them (a record under
        // another spelling would leave that name without a record, and every container of the
        // image failing).
        let reference = match as_cri_names(&image) {
            Some(r) => r,
            None => return Err(Status::invalid_argument(format!("pullgate: {}", Reference::parse(&image).err().map(|e| e.to_string()).unwrap_or_else(|| format!("image {image} is not a name"))))),
        };
        let principal = match principal_of(self.principal, req.sandbox_config.as_ref().and_then(|c| c.metadata.as_ref()))? {
            p if p.is_empty() => NODE_PRINCIPAL.to_string(),
            p => p,
        };
        let cred = credential_of(req.auth.as_ref())?;
        let mut extra_names = vec!["{config}".to_string(), format!("{}@{{digest}}", reference.origin())];
        if reference.digest.is_some() {
            // A digest reference has no tag record in CRI: the pull's own record is the
            // repo@digest one.
            extra_names.pop();
        }
        let preq = pull::Request {
            reference,
            namespace: CRI_NAMESPACE.to_string(),
            principal: principal.clone(),
            cred,
            plain_http: false,
            server: None,
            platform: self.platform.clone(),
            image_labels: HashMap::from([(MANAGED_LABEL.0.to_string(), MANAGED_LABEL.1.to_string())]),
            extra_names,
            for_pods: true,
            progress: None,
        };
        let out = self.puller.pull(&preq).await.map_err(|e| {
            let s = Status::from(crate::api::ApiError::Pull(e));
            Status::new(s.code(), format!("pullgate: pull of {image} for {}: {}", who(&principal), s.message()))
        })?;
        tracing::info!(image = %image, principal = %principal, downloaded = out.downloaded.len(), extracted = out.extracted, adopted = out.adopted, "CRI PullImage");
        Ok(Bytes::from(cri::PullImageResponse { image_ref: out.config }.encode_to_vec()))
    }

    /// Decides a container before containerd creates it: the pod (as containerd recorded it),
    /// its principal, and every image the container's creation prepares a snapshot of (its
    /// image, and its image volumes); then forwards with an admission for each of those
    /// Prepares, bound to it (the rootfs to a container ID's key on its chain, each volume to
    /// its pod's image-volume key), withdrawn when the call returns. Afterwards every admission
    /// is checked: a container whose Prepares did not happen as decided is removed again. What
    /// pullgate cannot decide is refused.
    async fn create_container(&self, meta: tonic::metadata::MetadataMap, body: Bytes) -> Result<Response<Bytes>, Status> {
        let req: cri::CreateContainerRequest = decode("CreateContainer", &body)?;
        let stripped = strip(&body, &[&[2, 10], &[3, 7]])?;
        // The pod as containerd recorded it at RunPodSandbox, not as this request describes it.
        let status: cri::PodSandboxStatusResponse =
            self.call("/runtime.v1.RuntimeService/PodSandboxStatus", cri::PodSandboxStatusRequest { pod_sandbox_id: req.pod_sandbox_id.clone(), verbose: false }).await?;
        let pod = status.status.and_then(|s| s.metadata);
        let principal = principal_of(self.principal, pod.as_ref())?;
        let pod_name = pod.as_ref().map(|m| format!("{}/{}", m.namespace, m.name)).unwrap_or_else(|| req.pod_sandbox_id.clone());
        let sandbox = req.pod_sandbox_id.clone();
        let config = req.config.unwrap_or_default();
        let named = |i: &cri::ImageSpec| !i.image.is_empty() || !i.user_specified_image.is_empty();
        let rootfs_chain = match config.image.filter(named) {
            Some(spec) => Some(self.decide(spec, &principal, &pod_name, Part::Rootfs).await?),
            None => None,
        };
        let mut volume_chains = Vec::new();
        for spec in config.mounts.into_iter().filter_map(|m| m.image).filter(named) {
            volume_chains.push(self.decide(spec, &principal, &pod_name, Part::ImageVolume).await?);
        }
        if !volume_chains.is_empty() && (sandbox.is_empty() || sandbox.contains('/')) {
            return Err(Status::invalid_argument(format!("pullgate: pod sandbox id {:?} cannot name an image volume", crate::reference::excerpt(&sandbox))));
        }
        // One rootfs admission per chain on offer at a time: the next container of the chain
        // waits until this one's rootfs is prepared (not for the rest of its creation).
        let rootfs = match &rootfs_chain {
            Some(c) => {
                let locked = self.chain_locks.lock(c).await;
                Some(self.snap.admit(CRI_NAMESPACE, c, &principal, AdmissionFor::Rootfs, Some(Box::new(locked))))
            }
            None => None,
        };
        let volumes: Vec<_> = volume_chains
            .iter()
            .map(|c| (c, self.snap.admit(CRI_NAMESPACE, c, &principal, AdmissionFor::Volume { sandbox: sandbox.clone() }, None)))
            .collect();
        let forwarded = self.forward_unary(CREATE_CONTAINER, meta, stripped).await;
        let created_id = match &forwarded {
            Ok(resp) => Some(decode::<cri::CreateContainerResponse>("CreateContainer response", resp.get_ref())?.container_id),
            Err(_) => None,
        };
        // A rootfs admission consumed by a Prepare that is not this container's (a client of
        // containerd's own socket racing the front): that snapshot loses the principal it took,
        // so its container cannot start on it (Mounts decides again without one).
        let stolen = rootfs.as_ref().and_then(|a| a.consumer()).filter(|k| Some(crate::snapshotter::name_of_key(k)) != created_id.as_deref());
        if let Some(k) = &stolen {
            tracing::warn!(pod = %pod_name, snapshot = %k, "CRI CreateContainer: another Prepare took this container's rootfs admission; withdrawing its principal");
            let snap = self.snap.clone();
            let key = k.clone();
            tokio::task::spawn_blocking(move || snap.withdraw_admitted(&key))
                .await
                .map_err(|e| Status::internal(format!("pullgate: withdrawing an admission failed: {e}")))?
                .map_err(|e| refusal(e, &pod_name, "(rootfs)", &principal))?;
        }
        let resp = forwarded?;
        crate::crashpoint::stall("cri.created").await;
        let created = cri::CreateContainerResponse { container_id: created_id.unwrap_or_default() };
        let mut undone = Vec::new();
        if let Some(a) = &rootfs {
            let consumer = a.consumer();
            if consumer.as_deref().map(crate::snapshotter::name_of_key) != Some(created.container_id.as_str()) {
                tracing::warn!(pod = %pod_name, container = %created.container_id, consumed_by = ?consumer, "CRI CreateContainer: the rootfs was not prepared on the admitted image");
                undone.push("its rootfs was not prepared on the admission pullgate made for its image (the image changed meanwhile, or another Prepare took it)".to_string());
            }
        }
        for (chain, a) in &volumes {
            // Unconsumed: containerd reused the pod's mounted volume, which must then have been
            // prepared under an admission for this pod's principal.
            if a.consumer().is_none() && !self.volume_admitted(&sandbox, chain, &principal, &pod_name).await? {
                tracing::warn!(pod = %pod_name, container = %created.container_id, %chain, "CRI CreateContainer: an image volume was not prepared on its admission");
                undone.push(format!("its image volume of layer chain {chain} was not prepared on the admission pullgate made for it"));
            }
        }
        if undone.is_empty() {
            // Checked to the end: the Prepares that consumed the admissions keep their principals,
            // also across a restart (recorded first: should that fail, the guards withdraw them).
            let guards: Vec<_> = rootfs.iter().chain(volumes.iter().map(|(_, a)| a)).collect();
            let keys: Vec<String> = guards.iter().filter_map(|a| a.consumer()).collect();
            let snap = self.snap.clone();
            let recorded = tokio::task::spawn_blocking(move || snap.admissions_checked(&keys).map_err(|e| e.to_string())).await;
            match recorded.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(()) => guards.iter().for_each(|a| a.settle()),
                Err(e) => undone.push(format!("pullgate could not record its check of the creation ({e})")),
            }
        }
        if !undone.is_empty() {
            let removed = self.call::<_, cri::RemoveContainerResponse>("/runtime.v1.RuntimeService/RemoveContainer", cri::RemoveContainerRequest { container_id: created.container_id.clone() }).await;
            return Err(Status::aborted(format!(
                "pullgate: containerd created the container of pod {pod_name} otherwise than pullgate decided: {}{}; retry",
                undone.join("; "),
                if removed.is_ok() { ", so pullgate removed it" } else { "; removing it failed" }
            )));
        }
        Ok(resp)
    }

    /// The decision for one image of a container (its rootfs or an image volume): the layer
    /// chain containerd will prepare the snapshot on, or the refusal.
    ///
    /// An image the pod holds no grant for is admitted when it is public at its own origin: one
    /// of its names (pinned to the manifest its record points at) verifies there without a
    /// credential ([`Puller::public_at_own_origin`]). A private repository that serves the same
    /// bytes under another name (kubelet's KEP-2535 falls into this) then takes nothing from
    /// the pods running the public image, whichever was on the node first.
    async fn decide(&self, spec: cri::ImageSpec, principal: &str, pod_name: &str, part: Part) -> Result<String, Status> {
        let shown = if spec.user_specified_image.is_empty() { spec.image.clone() } else { spec.user_specified_image.clone() };
        // kubelet sends the image's ID in `image` and the pod's own name in
        // `user_specified_image` (possibly short, as Docker reads it: `nginx:1.25`).
        let asked = [&spec.user_specified_image, &spec.image].into_iter().find_map(|n| parse_as_docker(n).map(|r| r.origin()));
        let (diff_ids, mut names) = self.claimed_layers(spec, &shown, asked.as_deref()).await?;
        // The name the pod asked for is asked first: other names of the image (other tenants'
        // repositories, pulled through the front) come after it.
        names.sort_by_key(|(n, _)| Reference::parse(n).ok().map(|r| r.origin()) != asked);
        let mut decided = self.decide_blocking(principal, &diff_ids).await?;
        let mut public_at = None;
        // Said only of the repository the pod asked for: that other names of the image could
        // not be reached is no business of this pod's.
        let mut unreachable = false;
        if let Err(SnapshotterError::Gate(crate::gate::GateError::Denied(d))) = &decided {
            use crate::gate::DenyReason::*;
            if matches!(d.kind, NoGrant | StaleGrant | UnknownLayer) {
                let check = self.puller.public_at_own_origin(CRI_NAMESPACE, principal, &names, true).await;
                unreachable = asked.as_ref().is_some_and(|a| check.unreachable.contains(a));
                if let Some(name) = check.verified {
                    decided = self.decide_blocking(principal, &diff_ids).await?;
                    public_at = Some(name);
                }
            }
        }
        crate::metrics::record_gate(crate::metrics::Verb::create_container, crate::snapshotter::gated(&decided));
        let chain = decided.map_err(|e| match unreachable {
            true => unreachable_refusal(e, pod_name, &shown, principal),
            false => refusal(e, pod_name, &shown, principal),
        })?;
        match public_at {
            Some(name) => tracing::info!(pod = %pod_name, principal = %principal, image = %shown, chain = %chain, part = part.as_str(), public_at = %name,
                "CRI CreateContainer admitted: the image is public at its own origin (it verified there without a credential)"),
            None => tracing::info!(pod = %pod_name, principal = %principal, image = %shown, chain = %chain, part = part.as_str(), "CRI CreateContainer admitted"),
        }
        Ok(chain)
    }

    /// The gate's decision for `principal`'s container on the chain of `diff_ids`.
    async fn decide_blocking(&self, principal: &str, diff_ids: &[String]) -> Result<Result<String, SnapshotterError>, Status> {
        let (snap, p, ids) = (self.snap.clone(), principal.to_string(), diff_ids.to_vec());
        tokio::task::spawn_blocking(move || snap.decide_container(CRI_NAMESPACE, &p, &ids))
            .await
            .map_err(|e| Status::internal(format!("pullgate: the decision failed: {e}")))
    }

    /// Whether pod `sandbox` holds an image volume on `chain` prepared under an admission for
    /// `principal`.
    async fn volume_admitted(&self, sandbox: &str, chain: &str, principal: &str, pod_name: &str) -> Result<bool, Status> {
        let snap = self.snap.clone();
        let (sb, ch, p) = (sandbox.to_string(), chain.to_string(), principal.to_string());
        tokio::task::spawn_blocking(move || snap.volume_admitted(CRI_NAMESPACE, &sb, &ch, &p))
            .await
            .map_err(|e| Status::internal(format!("pullgate: the check failed: {e}")))?
            .map_err(|e| refusal(e, pod_name, "(image volume)", principal))
    }

    /// The layers an image on the node claims (containerd prepares a container's rootfs on
    /// their chain): CRI's image ID is its config's digest, read from `k8s.io`'s content.
    /// Refused: an image CRI does not find (containerd 2.x takes a path to a checkpoint archive
    /// for one), and a checkpoint image (containerd 2.x restores it onto another image, which it
    /// pulls itself): pullgate could not decide what the container would run.
    /// Also the record's names (tags and repo digests) with the digest each points at.
    async fn claimed_layers(&self, spec: cri::ImageSpec, shown: &str, asked: Option<&str>) -> Result<(Vec<String>, Vec<(String, String)>), Status> {
        // containerd 2.1 looks for a file of that name before it looks for an image: a
        // checkpoint archive to restore from (relative paths from its working directory, "/"
        // as a service; pullgate's own too, to be sure), whatever image the name also is.
        let named = std::path::Path::new(&spec.image);
        if !spec.image.is_empty() && (named.exists() || std::path::Path::new("/").join(named).exists()) {
            return Err(undecidable(shown, "it names a file on the node, which containerd restores from as a checkpoint archive; not supported through pullgate"));
        }
        let requested = as_cri_names(&spec.image).map(|r| r.image_name());
        // containerd's own API on the connection the front already holds to its socket.
        let cd = pull::containerd::Containerd::on(self.upstream.clone(), CRI_NAMESPACE);
        let counted = Counted::default();
        let read = |d: &str| {
            let d = d.to_string();
            let (cd, counted) = (&cd, &counted);
            async move {
                let bytes = cd.read_content(&d, crate::registry::MAX_MANIFEST).await.map_err(|e| Status::new(e.code, format!("pullgate: image {shown}: {d}: {e}")))?;
                counted.call(bytes.len());
                Ok(bytes)
            }
        };
        // containerd builds the container from the first of the image's names (in its own
        // order) as its record stands then: that name must still be this image (CRI's list of
        // names can lag behind a name re-pointed meanwhile), and not a checkpoint image. Other
        // names (of the pod's repository first) only say where to ask whether the image is
        // public: one that names another image now is left out. A bounded few are looked up,
        // however many names other tenants gave the image.
        // A name in the request (a client other than kubelet, an image volume) is resolved by
        // containerd as given: it must be this image too.
        // A must-name that moved while it was read (a tenant re-pointing a tag of its own that
        // sorts first) is read again from a fresh ImageStatus, a moment later each time, before
        // the container is refused: CRI's list of names lags behind the move until containerd's
        // image event reaches it. The first reading is kubelet's own ImageStatus call of a moment
        // ago when there is one (`Statuses`); if it does not hold, a fresh one follows at once.
        let undecidable = |why: &str| undecidable(shown, why);
        let (mut attempts, mut may_reuse): (u32, bool) = (0, true);
        let (image, mut out, reused) = 'fresh: loop {
            let lately = if std::mem::take(&mut may_reuse) { self.statuses.of(&spec.image) } else { None };
            let reused = lately.is_some();
            let image = match lately {
                Some(i) => Some(i),
                None => {
                    attempts += 1;
                    self.call::<_, cri::ImageStatusResponse>(IMAGE_STATUS, cri::ImageStatusRequest { image: Some(spec.clone()), verbose: false }).await?.image.map(Arc::new)
                }
            };
            // Whether (and after how long) a must-name that did not hold is read again.
            let again = || match (reused, attempts < FRESH_READS) {
                (true, _) => Some(std::time::Duration::ZERO),
                (false, true) => Some(FRESH_READ_WAIT * attempts),
                (false, false) => None,
            };
            let Some(image) = image.filter(|i| crate::reference::is_digest(&i.id)) else {
                return Err(undecidable("it is not an image on the node (pull it first; restoring from a checkpoint archive is not supported through pullgate)"));
            };
            let looked = names::to_look_up(image.repo_tags.iter().chain(&image.repo_digests), asked);
            let must = [looked.first().copied(), requested.as_deref(), Some(image.id.as_str())];
            let mut checked: HashMap<String, bool> = HashMap::new();
            let mut out = Vec::new();
            for name in looked.iter().copied().chain(requested.as_deref()).chain(std::iter::once(image.id.as_str())) {
                counted.call(0);
                let Some(t) = cd.image_target(name).await.map_err(|e| Status::new(e.code, e.to_string()))? else {
                    if must.contains(&Some(name)) {
                        // containerd would not find the image it builds the container from either.
                        tracing::warn!(image = %shown, %name, id = %image.id, attempts, reused, "CRI CreateContainer: a name of the image has no image record");
                        if let Some(wait) = again() {
                            tokio::time::sleep(wait).await;
                            continue 'fresh;
                        }
                        return Err(undecidable("the name containerd builds it from has no image record; retry"));
                    }
                    continue;
                };
                let this_image = match checked.get(&t.digest) {
                    // The names of one image mostly share their target: each is read and checked once.
                    Some(ok) => *ok,
                    None => {
                        let read_as = async {
                            let target = read(&t.digest).await?;
                            Self::refuse_checkpoint(&target, &t.media_type, shown)?;
                            let configs = self.configs_for_platform(&target, &t.media_type, shown, &read).await?;
                            // An index with nothing for this node names no image here (containerd could not run it).
                            Ok::<bool, Status>(!configs.is_empty() && configs.iter().all(|c| *c == image.id))
                        };
                        match read_as.await {
                            Ok(ok) => {
                                checked.insert(t.digest.clone(), ok);
                                ok
                            }
                            Err(e) if must.contains(&Some(name)) => return Err(e),
                            // Another name (perhaps another tenant's) that cannot be read as
                            // this image is left out, as one naming another image is: logged
                            // without its target (and not remembered: a name containerd builds
                            // from, sharing it, is read for itself).
                            Err(e) => {
                                tracing::warn!(image = %shown, %name, id = %image.id, code = ?e.code(), "CRI CreateContainer: a name of the image cannot be read as it; left out");
                                false
                            }
                        }
                    }
                };
                if !this_image {
                    // Other names of the image may be other tenants' repositories: logged only.
                    tracing::warn!(image = %shown, %name, id = %image.id, reused, "CRI CreateContainer: a name of the image now names another image");
                    if must.contains(&Some(name)) {
                        if let Some(wait) = again() {
                            tokio::time::sleep(wait).await;
                            continue 'fresh;
                        }
                        return Err(undecidable("the name containerd builds it from now names another image; retry"));
                    }
                    continue;
                }
                if name != image.id && !out.iter().any(|(n, _)| n == name) {
                    out.push((name.to_string(), t.digest.clone()));
                }
            }
            break (image, out, reused);
        };
        let bytes = read(&image.id).await?;
        let config = crate::document::config(&bytes).map_err(|e| Status::failed_precondition(format!("pullgate: image config {}: {e}", image.id)))?;
        // Pinned names (`repo@digest`) say where to ask whether the image is public without
        // a call each: every one is passed on, as the check skips those refused lately, so
        // that names other tenants added do not keep the image's own from being asked.
        let mut listed: std::collections::HashSet<String> = out.iter().map(|(n, _)| n.clone()).collect();
        for d in &image.repo_digests {
            if let Some((_, digest)) = d.split_once('@') {
                if listed.insert(d.clone()) {
                    out.push((d.clone(), digest.to_string()));
                }
            }
        }
        let (calls, bytes_read) = counted.so_far();
        tracing::debug!(image = %shown, names = names_in(&image), containerd_calls = calls, bytes_read, status_reused = reused, "CRI CreateContainer: the image's names and documents looked up");
        Ok((config.rootfs().diff_ids().to_vec(), out))
    }

    /// The configs an image record's target (`bytes`, of media type `media_type`) gives this
    /// node's platform ([`crate::document::cri_candidates`]; an entry missing from the content
    /// store is an error, as containerd could choose it once it arrives). Every document is read
    /// as containerd reads it, or refused.
    async fn configs_for_platform<F, Fut>(&self, bytes: &[u8], media_type: &str, shown: &str, read: &F) -> Result<Vec<String>, Status>
    where
        F: Fn(&str) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, Status>>,
    {
        use crate::document::Candidates;
        let bad = |e: crate::document::DocumentError| Status::failed_precondition(format!("pullgate: an image record's target is unreadable: {e}"));
        let (os, arch, _) = crate::registry::parse_platform(&self.platform).map_err(|e| Status::internal(format!("pullgate: the node's platform: {e}")))?;
        let entries = match crate::document::cri_candidates(bytes, media_type, &os, &arch).map_err(bad)? {
            Candidates::Config(c) => return Ok(vec![c]),
            Candidates::Entries(e) => e,
        };
        let mut out = Vec::new();
        for (digest, entry_type) in entries {
            let inner = read(&digest).await?;
            Self::refuse_checkpoint(&inner, &entry_type, shown)?;
            out.push(crate::document::manifest(&inner, &entry_type).map_err(bad)?.config().digest().to_string());
        }
        Ok(out)
    }

    /// Refuses a checkpoint image (containerd 2.x restores it onto another image, which it
    /// pulls and names itself: pullgate could not decide what the container would run), read
    /// from the decoded document as containerd reads it.
    fn refuse_checkpoint(bytes: &[u8], media_type: &str, shown: &str) -> Result<(), Status> {
        match crate::document::is_checkpoint(bytes, media_type) {
            Ok(false) => Ok(()),
            Ok(true) => Err(undecidable(shown, "it is a checkpoint image, which containerd restores onto another image; not supported through pullgate")),
            Err(e) => Err(undecidable(shown, format!("an image record's target is unreadable: {e}"))),
        }
    }

    /// With `principal = "pod"`, a pod's grants go with its last sandbox: once containerd has
    /// removed a sandbox and holds no other of the same pod (Kubernetes namespace, name and
    /// UID), the grants of that principal in `k8s.io` are deleted. So are those of every other
    /// pod principal (`namespace/name/uid`) with no sandbox left that were written before the
    /// pods were listed: pods removed while pullgate could not list the rest, or around the
    /// front, lose theirs at the next removal. Pods whose status cannot be read before the
    /// removal, or when the pods left cannot be listed, keep their grants until then (logged):
    /// a later pod is another principal all the same (its UID differs).
    async fn remove_pod_sandbox(&self, meta: tonic::metadata::MetadataMap, body: Bytes) -> Result<Response<Bytes>, Status> {
        let req: cri::RemovePodSandboxRequest = decode("RemovePodSandbox", &body)?;
        let status: Result<cri::PodSandboxStatusResponse, _> =
            self.call("/runtime.v1.RuntimeService/PodSandboxStatus", cri::PodSandboxStatusRequest { pod_sandbox_id: req.pod_sandbox_id.clone(), verbose: false }).await;
        let pod = status.ok().and_then(|s| s.status).and_then(|s| s.metadata);
        let resp = self.forward_unary(REMOVE_POD_SANDBOX, meta, body).await?;
        let removed = pod.filter(|m| !m.namespace.is_empty()).and_then(|m| principal_of(self.principal, Some(&m)).ok());
        let listed_at = crate::gate::now_nanos();
        let left: cri::ListPodSandboxResponse = match self.call("/runtime.v1.RuntimeService/ListPodSandbox", cri::ListPodSandboxRequest { filter: None }).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(principal = removed.as_deref().unwrap_or(""), error = %e, "cannot list the pods left; the grants of removed pods stay until the next removal");
                return Ok(resp);
            }
        };
        let live: std::collections::HashSet<String> =
            left.items.iter().filter_map(|p| p.metadata.as_ref()).map(|m| format!("{}/{}/{}", m.namespace, m.name, m.uid)).collect();
        let pruned = std::sync::Mutex::new(std::collections::BTreeSet::new());
        let store = self.snap.store_arc().clone();
        let own = removed.clone();
        let swept = tokio::task::spawn_blocking(move || {
            store.write(|tx| {
                crate::ledger::revoke_where(tx, CRI_NAMESPACE, &|g| {
                    let p = g.principal();
                    let gone = is_pod_principal(p) && !live.contains(p) && (own.as_deref() == Some(p) || g.grant.verified_at < listed_at);
                    if gone {
                        pruned.lock().unwrap_or_else(|e| e.into_inner()).insert(p.to_string());
                    }
                    gone
                })
            })
            .map(|n| (n, pruned.into_inner().unwrap_or_else(|e| e.into_inner())))
        })
        .await;
        match swept {
            Ok(Ok((n, principals))) if n > 0 => {
                for p in principals {
                    match removed.as_deref() == Some(p.as_str()) {
                        true => tracing::info!(principal = %p, "pruned the grants of a pod whose last sandbox was removed"),
                        false => tracing::info!(principal = %p, "pruned the grants of a pod with no sandbox left, removed earlier"),
                    }
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(principal = removed.as_deref().unwrap_or(""), error = %e, "cannot prune the grants of removed pods"),
            Err(e) => tracing::warn!(principal = removed.as_deref().unwrap_or(""), error = %e, "cannot prune the grants of removed pods"),
        }
        Ok(resp)
    }

    /// Forwards a pod's start with its snapshotter annotations removed and the sandbox label
    /// added: containerd passes it to the sandbox's Prepare, which then never takes the
    /// admission of a container on the same image (a pod whose container runs the sandbox
    /// image, started while another pod's sandbox starts).
    async fn run_pod_sandbox(&self, meta: tonic::metadata::MetadataMap, body: Bytes) -> Result<Response<Bytes>, Status> {
        let stripped = strip(&body, &[&[1, 7]])?;
        let marked = wire::append_map_entry(&stripped, &[1, 7], crate::snapshotter::SANDBOX_LABEL, "true");
        self.forward_unary(RUN_POD_SANDBOX, meta, Bytes::from(marked)).await
    }
}

/// An image name as containerd's CRI normalizes it (Docker's short forms: `nginx`,
/// `library/nginx:1` and `team/app` are Docker Hub's); None for an image ID or a name that does
/// not parse.
fn parse_as_docker(name: &str) -> Option<Reference> {
    if name.is_empty() || name.starts_with("sha256:") {
        return None;
    }
    let first = name.split('/').next().unwrap_or_default();
    let has_host = name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = match (has_host, name.contains('/')) {
        (true, _) => name.to_string(),
        (false, true) => format!("docker.io/{name}"),
        (false, false) => format!("docker.io/library/{name}"),
    };
    // Docker Hub's names as containerd writes them: `index.docker.io` is `docker.io`, and a
    // repository there without a path is under `library/`.
    let full = match full.split_once('/') {
        Some(("docker.io" | "index.docker.io", rest)) if !rest.split(['@', ':']).next().unwrap_or_default().contains('/') => format!("docker.io/library/{rest}"),
        Some(("index.docker.io", rest)) => format!("docker.io/{rest}"),
        _ => full,
    };
    Reference::parse(&full).ok()
}

/// The calls to containerd (and document bytes read) one CreateContainer's decision made,
/// counted when it ends (`pullgate_containerd_calls_total{purpose="create_container"}`). The
/// image's status is the first.
struct Counted {
    calls: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
}

impl Default for Counted {
    fn default() -> Self {
        Counted { calls: 1.into(), bytes: 0.into() }
    }
}

impl Counted {
    /// (calls, bytes) so far.
    fn so_far(&self) -> (u64, u64) {
        (self.calls.load(std::sync::atomic::Ordering::Relaxed), self.bytes.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn call(&self, bytes: usize) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        crate::metrics::record_containerd_reads("create_container", *self.calls.get_mut(), *self.bytes.get_mut());
    }
}

/// An image name as containerd's CRI pulls and records it (`docker.ParseDockerRef`): Docker's
/// normal form ([`parse_as_docker`]), without the tag when a digest is given, `latest` when
/// neither is (by [`Reference::image_name`]).
fn as_cri_names(name: &str) -> Option<Reference> {
    let r = parse_as_docker(name)?;
    Some(match r.digest {
        Some(_) => Reference { tag: None, ..r },
        None => r,
    })
}

/// A container the front cannot decide (of image `shown`), and why: refused.
fn undecidable(shown: &str, why: impl std::fmt::Display) -> Status {
    Status::failed_precondition(format!("pullgate cannot decide a container of image {shown}: {why}"))
}

/// The instant the client's `grpc-timeout` (gRPC's "<digits><H|M|S|m|u|n>") gives the call.
fn grpc_deadline(meta: &tonic::metadata::MetadataMap) -> Option<tokio::time::Instant> {
    let v = meta.get("grpc-timeout")?.to_str().ok()?;
    let (n, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = n.parse().ok()?;
    let d = match unit {
        "H" => std::time::Duration::from_secs(n.saturating_mul(3600)),
        "M" => std::time::Duration::from_secs(n.saturating_mul(60)),
        "S" => std::time::Duration::from_secs(n),
        "m" => std::time::Duration::from_millis(n),
        "u" => std::time::Duration::from_micros(n),
        "n" => std::time::Duration::from_nanos(n),
        _ => return None,
    };
    tokio::time::Instant::now().checked_add(d)
}

fn deadline_passed() -> Status {
    Status::deadline_exceeded("pullgate: the client's deadline passed before the pull finished")
}

fn who(principal: &str) -> String {
    if principal.is_empty() { "no principal".to_string() } else { format!("principal {principal:?}") }
}

/// Removes pullgate's snapshotter annotations from the maps at `paths`.
fn strip(body: &Bytes, paths: &[&[u64]]) -> Result<Bytes, Status> {
    let mut msg = body.to_vec();
    for p in paths {
        let (out, removed) = wire::strip_map_entries(&msg, p, &is_snapshotter_annotation).map_err(|e| Status::invalid_argument(format!("pullgate: {e}")))?;
        if removed > 0 {
            tracing::info!(removed, "removed snapshotter annotations from a pod or container");
        }
        msg = out;
    }
    Ok(Bytes::from(msg))
}

/// What kubelet shows as the container's CreateContainerError.
fn refusal(e: SnapshotterError, pod: &str, image: &str, principal: &str) -> Status {
    match e {
        SnapshotterError::Gate(crate::gate::GateError::Denied(d)) => {
            // The layer goes to pullgate's log only: the pod learns nothing of an image it may
            // not use beyond the name it gave.
            tracing::info!(%pod, %image, %principal, subject = %d.subject, reason = %d.reason, "CRI CreateContainer refused");
            Status::permission_denied(format!(
                "pullgate refused pod {pod} ({}) the image {image}: {}; to fix: let kubelet pull the image with the pod's imagePullSecrets \
                 (imagePullPolicy: Always, or kubelet's KubeletEnsureSecretPulledImages feature), so that the registry accepts a credential of this pod's",
                who(principal),
                d.reason
            ))
        }
        other => {
            let s = Status::from(other);
            let code = if s.code() == Code::Ok { Code::Internal } else { s.code() };
            Status::new(code, format!("pullgate cannot decide pod {pod} (failing closed): {}", s.message()))
        }
    }
}

/// A refusal of a container without a grant whose image's registry could not be reached to
/// check whether the image is public there (down, too slow, rate-limiting): `Unavailable`, and
/// the reason says so first (kubelet retries the container).
fn unreachable_refusal(e: SnapshotterError, pod: &str, image: &str, principal: &str) -> Status {
    match e {
        SnapshotterError::Gate(crate::gate::GateError::Denied(d)) => {
            tracing::info!(%pod, %image, %principal, subject = %d.subject, reason = %d.reason, "CRI CreateContainer refused: the image's registry could not be reached");
            Status::unavailable(format!(
                "pullgate refused pod {pod} ({}) the image {image} for now: its registry could not be reached to check whether the image is \
                 public there, and {}; to fix: wait for the registry (kubelet retries), or let kubelet pull the image with the pod's imagePullSecrets",
                who(principal),
                d.reason
            ))
        }
        other => refusal(other, pod, image, principal),
    }
}

/// One of the two CRI services, served by the same front (`NamedService` wants one type each).
#[derive(Clone)]
pub struct Svc<const IMAGES: bool>(Arc<Front>);

impl<const IMAGES: bool> tonic::server::NamedService for Svc<IMAGES> {
    const NAME: &'static str = if IMAGES { "runtime.v1.ImageService" } else { "runtime.v1.RuntimeService" };
}

struct Handler {
    front: Arc<Front>,
    path: String,
}

impl tonic::server::StreamingService<Bytes> for Handler {
    type Response = Bytes;
    type ResponseStream = MessageStream;
    type Future = BoxFuture<Response<MessageStream>, Status>;
    fn call(&mut self, req: Request<Streaming<Bytes>>) -> Self::Future {
        Box::pin(self.front.clone().dispatch(self.path.clone(), req))
    }
}

impl<const IMAGES: bool, B> Service<http::Request<B>> for Svc<IMAGES>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let h = Handler { front: self.0.clone(), path: req.uri().path().to_string() };
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawCodec).apply_max_message_size_config(Some(MAX_MESSAGE), Some(MAX_MESSAGE));
            Ok(grpc.streaming(h, req).await)
        })
    }
}

/// The two services of the front, for a tonic server.
pub fn services(front: Front) -> (Svc<false>, Svc<true>) {
    let f = Arc::new(front);
    (Svc(f.clone()), Svc(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_answers_are_kept_briefly_and_bounded() {
        let image = |id: &str, names: usize| cri::Image { id: id.to_string(), repo_tags: (0..names).map(|i| format!("reg/n{i}:v1")).collect(), ..Default::default() };
        let st = Statuses::default();
        st.keep(image("sha256:a", 10));
        assert_eq!(st.of("sha256:a").map(|i| i.repo_tags.len()), Some(10));
        assert!(st.of("sha256:b").is_none());
        // A newer answer for the same image replaces the older one.
        st.keep(image("sha256:a", 3));
        assert_eq!(st.of("sha256:a").map(|i| i.repo_tags.len()), Some(3));
        // At most STATUS_KEPT answers: the oldest goes.
        for i in 0..STATUS_KEPT {
            st.keep(image(&format!("sha256:x{i}"), 1));
        }
        assert!(st.of("sha256:a").is_none());
        // At most STATUS_NAMES_KEPT names together; an answer of more is not kept at all.
        st.keep(image("sha256:big", STATUS_NAMES_KEPT + 1));
        assert!(st.of("sha256:big").is_none());
        st.keep(image("sha256:half1", STATUS_NAMES_KEPT / 2));
        st.keep(image("sha256:half2", STATUS_NAMES_KEPT / 2));
        assert!(st.of("sha256:x15").is_none(), "older answers make room for the names");
        assert!(st.of("sha256:half1").is_some() && st.of("sha256:half2").is_some());
        let q = st.0.lock().unwrap();
        assert!(q.iter().map(|(_, i)| names_in(i)).sum::<usize>() <= STATUS_NAMES_KEPT);
    }

    #[test]
    fn grpc_deadlines() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut m = tonic::metadata::MetadataMap::new();
            assert!(grpc_deadline(&m).is_none());
            for (v, ms) in [("1m", 1u64), ("2S", 2000), ("500u", 0), ("3M", 180_000)] {
                m.insert("grpc-timeout", v.parse().unwrap());
                let d = grpc_deadline(&m).unwrap() - tokio::time::Instant::now();
                assert!(d <= std::time::Duration::from_millis(ms.max(1)), "{v}: {d:?}");
            }
            for bad in ["", "m", "1x", "-1m", "99999999999999999999H"] {
                m.insert("grpc-timeout", bad.parse().unwrap());
                assert!(grpc_deadline(&m).is_none(), "{bad}");
            }
        });
    }

    #[test]
    fn chain_locks_are_forgotten_when_free() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let locks = ChainLocks::default();
            let a = locks.lock("c1").await;
            let _b = locks.lock("c2").await;
            // A waiter that gives up counts itself out.
            let waited = tokio::time::timeout(std::time::Duration::from_millis(20), locks.lock("c1")).await;
            assert!(waited.is_err() && locks.len() == 2);
            let next = tokio::spawn({
                let map = locks.0.clone();
                async move { ChainLocks(map).lock("c1").await }
            });
            tokio::task::yield_now().await;
            drop(a);
            let held = next.await.unwrap();
            assert_eq!(locks.len(), 2, "c1 is held again");
            drop(held);
            assert_eq!(locks.len(), 1, "only c2 is left");
        });
    }

    #[test]
    fn principals_and_credentials() {
        let m = cri::PodSandboxMetadata { name: "web-0".into(), uid: "u".into(), namespace: "team-a".into(), attempt: 0 };
        assert_eq!(principal_of(CriPrincipal::Namespace, Some(&m)).unwrap(), "team-a");
        assert_eq!(principal_of(CriPrincipal::Pod, Some(&m)).unwrap(), "team-a/web-0/u");
        let no_uid = cri::PodSandboxMetadata { uid: String::new(), ..m.clone() };
        // The pod's own name, as kubelet sends it (short forms are Docker Hub's).
        let origin = |n: &str| parse_as_docker(n).map(|r| r.origin());
        assert_eq!(origin("nginx:1.25").as_deref(), Some("docker.io/library/nginx"));
        assert_eq!(origin("team/app").as_deref(), Some("docker.io/team/app"));
        assert_eq!(origin("reg.io:5000/team/app:v1").as_deref(), Some("reg.io:5000/team/app"));
        assert_eq!(origin("localhost/app").as_deref(), Some("localhost/app"));
        assert_eq!(origin("docker.io/nginx:1.25").as_deref(), Some("docker.io/library/nginx"));
        assert_eq!(origin("index.docker.io/nginx").as_deref(), Some("docker.io/library/nginx"));
        assert_eq!(origin("index.docker.io/team/app:v1").as_deref(), Some("docker.io/team/app"));
        assert_eq!(origin("docker.io/team/app@sha256:0000000000000000000000000000000000000000000000000000000000000000").as_deref(), Some("docker.io/team/app"));
        assert_eq!(origin("sha256:0123"), None);
        // The names PullImage records, as containerd's CRI records them.
        let recorded = |n: &str| as_cri_names(n).map(|r| r.image_name());
        let d = format!("sha256:{}", "0".repeat(64));
        assert_eq!(recorded("nginx").as_deref(), Some("docker.io/library/nginx:latest"));
        assert_eq!(recorded("docker.io/nginx:1.25").as_deref(), Some("docker.io/library/nginx:1.25"));
        assert_eq!(recorded(&format!("index.docker.io/library/nginx:zzz@{d}")), Some(format!("docker.io/library/nginx@{d}")));
        assert_eq!(recorded(&format!("reg.io:5000/team/app:v1@{d}")), Some(format!("reg.io:5000/team/app@{d}")));
        assert_eq!(recorded("reg.io:5000/team/app:v1").as_deref(), Some("reg.io:5000/team/app:v1"));
        assert_eq!(recorded("reg.io:5000/Team/app"), None);
        assert!(is_pod_principal("team-a/web-0/u") && !is_pod_principal("team-a") && !is_pod_principal("team-a//u") && !is_pod_principal("@node"));
        let e = principal_of(CriPrincipal::Pod, Some(&no_uid)).unwrap_err();
        assert!(e.code() == tonic::Code::InvalidArgument && e.message().contains("has no UID"), "{e:?}");
        assert_eq!(principal_of(CriPrincipal::Namespace, Some(&no_uid)).unwrap(), "team-a");
        assert_eq!(principal_of(CriPrincipal::Pod, None).unwrap(), "");
        let user_of = |a: &cri::AuthConfig| match credential_of(Some(a)) {
            Ok(Some(Credential::Password { user, .. })) => user,
            other => panic!("{other:?}"),
        };
        let user = cri::AuthConfig { username: "alice".into(), password: "s3cret".into(), ..Default::default() };
        assert_eq!(user_of(&user), "alice");
        // The fields as sent: a colon in the user name stays there (it was split off before,
        // and the registry was asked for user "ci" with password "bot:s3cret").
        let colon = cri::AuthConfig { username: "ci:bot".into(), password: "s3cret".into(), ..Default::default() };
        assert_eq!(user_of(&colon), "ci:bot");
        assert_eq!(credential_of(Some(&colon)).unwrap().map(|c| c.secret().expose().to_string()), Some("s3cret".to_string()));
        let b64 = cri::AuthConfig { auth: base64::engine::general_purpose::STANDARD.encode("bob:pw"), ..Default::default() };
        assert_eq!(user_of(&b64), "bob");
        assert!(credential_of(Some(&cri::AuthConfig::default())).unwrap().is_none());
        // Tokens, beside the placeholder user name of a token login's config.json.
        let guid = "00000000-0000-0000-0000-000000000000";
        let it = cri::AuthConfig { username: guid.into(), identity_token: "s3cret-id".into(), ..Default::default() };
        assert_eq!(credential_of(Some(&it)).unwrap(), Some(Credential::token(TokenForm::Identity, "s3cret-id".into()).unwrap()));
        let rt = cri::AuthConfig { registry_token: "s3cret-rt".into(), ..Default::default() };
        assert_eq!(credential_of(Some(&rt)).unwrap(), Some(Credential::token(TokenForm::Registry, "s3cret-rt".into()).unwrap()));
        for bad in [
            cri::AuthConfig { auth: "!!".into(), ..Default::default() },
            cri::AuthConfig { identity_token: "s3cret t".into(), ..Default::default() },
            cri::AuthConfig { identity_token: "s3cret".into(), registry_token: "s3cret".into(), ..Default::default() },
            cri::AuthConfig { username: String::new(), password: "s3cret".into(), ..Default::default() },
        ] {
            let e = credential_of(Some(&bad)).unwrap_err();
            assert!(!e.message().contains("s3cret") && e.code() == Code::InvalidArgument, "{e:?}");
        }
        assert!(is_snapshotter_annotation("containerd.io/snapshot.ref") && is_snapshotter_annotation("containerd.io/snapshot/pullgate.principal"));
        assert!(!is_snapshotter_annotation("containerd.io/snapshot/stargz") && !is_snapshotter_annotation("app"));
    }
}

//! pull: `pullgate pull` and `pullgate verify`. Both resolve the reference at its origin with
//! the caller's credentials (the registry decides), make sure the origin itself served every
//! blob (downloading what it never served, or — on the same registry host — asking with an
//! authenticated HEAD), and record blob origins, the manifest, its layers and chains, and the
//! grant in one ledger transaction. `pull` also fetches the blobs the content store lacks
//! under a lease, labels them, creates the image record and unpacks into pullgate with
//! `containerd.io/snapshot.ref`, so an authorised namespace adopts a chain already unpacked.
pub mod containerd;

use crate::credential::{short, Credential, IdentityKey, ANONYMOUS};
use crate::ledger::{self, ManifestRec};
use crate::metastore::StoreError;
use crate::reference::Reference;
use crate::registry::{self, Options, RegistryError, Session, MAX_MANIFEST};
use crate::snapshotter::{Snapshotter, SNAPSHOT_REF_LABEL};
use containerd::{Containerd, ContainerdError};
use containerd_client::types::Descriptor;
use futures_util::StreamExt;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

/// Content label prefix: `pullgate.io/origin.<host/repo>` = the credential identity (short
/// form) that fetched or verified the blob there, one label per origin.
pub const ORIGIN_LABEL_PREFIX: &str = "pullgate.io/origin.";

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Containerd(#[from] ContainerdError),
    #[error("ledger: {0}")]
    Ledger(#[from] StoreError),
    #[error("image {image}: {reason}")]
    BadImage { image: String, reason: String },
}

type Result<T> = std::result::Result<T, PullError>;

#[derive(Debug, Clone)]
pub struct Request {
    pub reference: Reference,
    pub namespace: String,
    pub principal: String,
    pub cred: Option<Credential>,
    pub plain_http: bool,
    pub hosts_dir: Option<PathBuf>,
    pub platform: String,
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub manifest: String,
    pub identity: String,
    /// Blobs downloaded from the registry.
    pub downloaded: Vec<String>,
    /// Layers unpacked (extracted) by this pull, and adopted from an existing chain.
    pub extracted: usize,
    pub adopted: usize,
}

pub struct Puller {
    pub containerd: PathBuf,
    pub snapshotter_name: String,
    pub snap: Arc<Snapshotter>,
    pub key: Arc<IdentityKey>,
    pub probe_anonymous: bool,
    pub hosts_dir: Option<PathBuf>,
    /// Registry timeout ([registry] timeout; None: the registry client's default).
    pub timeout: Option<std::time::Duration>,
    /// Set once the leases of a previous (killed) pullgate process have been deleted.
    pub stale_leases_gone: tokio::sync::OnceCell<()>,
}

/// Blobs downloaded at once.
const FETCH_CONCURRENCY: usize = 4;

fn now_nanos() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

#[derive(Clone)]
struct Blob {
    digest: String,
    size: u64,
    media_type: String,
}

impl Puller {
    pub async fn verify(&self, req: &Request) -> Result<Outcome> {
        self.run(req, false).await
    }

    pub async fn pull(&self, req: &Request) -> Result<Outcome> {
        self.run(req, true).await
    }

    async fn run(&self, req: &Request, full: bool) -> Result<Outcome> {
        self.stale_leases_gone
            .get_or_try_init(|| async {
                let n = Containerd::delete_stale_leases(&self.containerd).await?;
                if n > 0 {
                    tracing::info!(deleted = n, "deleted leases left by a previous pullgate process");
                }
                Ok::<(), PullError>(())
            })
            .await?;
        let opts = Options { plain_http: req.plain_http, hosts_dir: req.hosts_dir.as_deref().or(self.hosts_dir.as_deref()), timeout: self.timeout };
        let mut sess = Session::new(&req.reference, req.cred.clone(), &opts)?;
        let resolved = sess.resolve(&req.reference, &req.platform).await?;
        let mut cd = Containerd::connect(&self.containerd, &req.namespace).await?;
        let out = self.run_with(req, full, &mut sess, &resolved, &mut cd).await;
        cd.end_lease().await;
        out
    }

    async fn run_with(
        &self,
        req: &Request,
        full: bool,
        sess: &mut Session,
        resolved: &registry::Resolved,
        cd: &mut Containerd,
    ) -> Result<Outcome> {
        let r = &req.reference;
        let origin = r.origin();
        let identity = self.key.identity(&r.host, req.cred.as_ref());
        let m = &resolved.parsed;
        let bad = |reason: String| PullError::BadImage { image: r.to_string(), reason };
        let config = Blob { digest: m.config().digest().to_string(), size: m.config().size(), media_type: m.config().media_type().to_string() };
        let layers: Vec<Blob> = m
            .layers()
            .iter()
            .map(|l| Blob { digest: l.digest().to_string(), size: l.size(), media_type: l.media_type().to_string() })
            .collect();
        if layers.is_empty() {
            return Err(bad("manifest has no layers".into()));
        }
        let all: Vec<&Blob> = std::iter::once(&config).chain(&layers).collect();
        if let Some(b) = all.iter().find(|b| !crate::reference::is_digest(&b.digest)) {
            return Err(bad(format!("unsupported digest {}", b.digest)));
        }

        // 1. Every blob must have been served by this origin; the content must be here for a pull.
        let mut out = Outcome { manifest: resolved.manifest.digest.clone(), identity: identity.clone(), ..Default::default() };
        let known = self.snap.store().read(|tx| ledger::manifest(tx, &out.manifest))?.filter(|m| m.diff_ids.len() == layers.len());
        let mut served = Vec::with_capacity(all.len());
        for b in &all {
            served.push(self.snap.store().read(|tx| ledger::blob_origin(tx, &b.digest, &origin))?.is_some());
        }
        // A verify of a manifest whose blobs this origin all served before touches no content.
        let needs_content = full || known.is_none() || served.iter().any(|s| !s);
        let digests: Vec<&str> = all.iter().map(|b| b.digest.as_str()).collect();
        let mut present = std::collections::HashSet::new();
        if needs_content {
            cd.begin_lease().await?;
            // Held first, then looked for: what is found present stays present.
            let mut held = digests.clone();
            held.push(&resolved.manifest.digest);
            held.extend(resolved.index.as_ref().map(|i| i.digest.as_str()));
            cd.hold_content(&held).await?;
            present = cd.present(&digests).await?;
        }
        let cd = &*cd;
        let mut newly_served = Vec::new();
        // (blob, keep): bytes to fetch from the origin; kept in the content store, or only
        // compared because containerd already holds them.
        let mut fetch: Vec<(Blob, bool)> = Vec::new();
        for (b, served_here) in all.iter().zip(served) {
            let in_ns = present.contains(&b.digest);
            let need_content = full || (b.digest == config.digest && known.is_none());
            // This origin served the bytes before, or — on the same registry host — an
            // authenticated HEAD at this repository stands in for a download.
            let vouched = served_here || (self.same_host_served(&b.digest, &r.host)? && sess.blob_exists(&b.digest).await?);
            if vouched {
                if need_content && !in_ns {
                    if cd.adopt_content(&b.digest, b.size).await? {
                        present.insert(b.digest.clone());
                    } else {
                        fetch.push(((*b).clone(), true));
                    }
                }
            } else if in_ns || cd.adopt_content(&b.digest, b.size).await? {
                // containerd holds the bytes, but this origin never served them: fetch them from
                // it and compare, rather than trust a manifest that merely names them.
                present.insert(b.digest.clone());
                fetch.push(((*b).clone(), false));
            } else {
                fetch.push(((*b).clone(), true));
            }
            if !served_here {
                newly_served.push(b.digest.clone());
            }
        }
        let fetched: Vec<Result<(String, bool)>> = futures_util::stream::iter(fetch)
            .map(|(b, keep)| {
                let mut s = sess.clone();
                async move { Self::fetch(&mut s, cd, &b, keep).await.map(|()| (b.digest, keep)) }
            })
            .buffer_unordered(FETCH_CONCURRENCY)
            .collect()
            .await;
        for f in fetched {
            let (d, keep) = f?;
            if keep {
                present.insert(d.clone());
            }
            out.downloaded.push(d);
        }

        crate::crashpoint::hit("pull.fetched");
        // 2. diffIDs: from the ledger when the manifest is known, else from the config.
        let diff_ids: Vec<String> = match known {
            Some(m) => m.diff_ids,
            None => {
                let cfg_bytes = cd.read_content(&config.digest, MAX_MANIFEST).await?;
                if registry::sha256_digest(&cfg_bytes) != config.digest {
                    return Err(bad(format!("config {} in the content store does not match its digest", config.digest)));
                }
                let image_cfg =
                    oci_spec::image::ImageConfiguration::from_reader(cfg_bytes.as_slice()).map_err(|e| bad(format!("config: {e}")))?;
                image_cfg.rootfs().diff_ids().to_vec()
            }
        };
        if diff_ids.len() != layers.len() || !diff_ids.iter().all(|d| crate::reference::is_digest(d)) {
            return Err(bad(format!("config lists {} diffIDs for {} layers", diff_ids.len(), layers.len())));
        }

        // 3. Which layers an anonymous client can read (public), when asked to probe.
        let mut public = Vec::new();
        if self.probe_anonymous && identity != ANONYMOUS {
            for (b, d) in layers.iter().zip(&diff_ids) {
                if sess.anonymous_can_read(&b.digest).await {
                    public.push(d.clone());
                }
            }
        }

        // 4. One ledger transaction: origins, manifest, layers, chains, grant.
        let now = now_nanos();
        let rec = ManifestRec {
            config: config.digest.clone(),
            layers: layers.iter().map(|b| b.digest.clone()).collect(),
            diff_ids: diff_ids.clone(),
            origins: BTreeSet::from([origin.clone()]),
            names: BTreeSet::from([r.image_name()]),
        };
        self.snap.store().write(|tx| -> std::result::Result<(), StoreError> {
            for d in &newly_served {
                ledger::record_blob(tx, d, &origin, &identity, now)?;
            }
            ledger::record_manifest(tx, &out.manifest, &rec)?;
            for d in &public {
                ledger::mark_public(tx, d)?;
            }
            ledger::put_grant(tx, &req.namespace, &req.principal, &origin, &out.manifest, &identity, now)?;
            crate::crashpoint::hit("ledger.grant-staged");
            Ok(())
        })?;
        crate::crashpoint::hit("pull.granted");
        tracing::info!(namespace = %req.namespace, principal = %req.principal, origin = %origin, manifest = %out.manifest,
            identity = %short(&identity), downloaded = out.downloaded.len(), "grant recorded");

        // 5. Labels in the namespace's content store: where the blobs came from, and for whom.
        let who = HashMap::from([(format!("{ORIGIN_LABEL_PREFIX}{origin}"), short(&identity))]);
        if !needs_content {
            present = cd.present(&digests).await?;
        }
        for b in &all {
            if present.contains(&b.digest) {
                match cd.label_content(&b.digest, &who).await {
                    // A verify holds no lease: containerd's GC may have just taken a blob no
                    // image referenced. The labels only describe; the grant stands.
                    Err(e) if !needs_content && e.code == tonic::Code::NotFound => {
                        tracing::debug!(digest = %b.digest, "blob collected before it could be labelled");
                    }
                    r => r?,
                }
            }
        }
        if !full {
            return Ok(out);
        }

        // 6. Manifest (and index) content with containerd's GC references, then the image.
        let chains = ledger::chain_ids(&diff_ids);
        let top = chains.last().cloned().unwrap_or_default();
        let mut mlabels = who.clone();
        mlabels.insert("containerd.io/gc.ref.content.config".into(), config.digest.clone());
        for (i, b) in layers.iter().enumerate() {
            mlabels.insert(format!("containerd.io/gc.ref.content.l.{i}"), b.digest.clone());
        }
        cd.write_bytes(&resolved.manifest.digest, &resolved.manifest.bytes, mlabels).await?;
        let mut target = Descriptor {
            media_type: resolved.manifest.media_type.clone(),
            digest: resolved.manifest.digest.clone(),
            size: resolved.manifest.bytes.len() as i64,
            annotations: HashMap::new(),
        };
        if let Some(idx) = &resolved.index {
            let mut ilabels = who.clone();
            ilabels.insert("containerd.io/gc.ref.content.m.0".into(), resolved.manifest.digest.clone());
            cd.write_bytes(&idx.digest, &idx.bytes, ilabels).await?;
            target = Descriptor { media_type: idx.media_type.clone(), digest: idx.digest.clone(), size: idx.bytes.len() as i64, annotations: HashMap::new() };
        }
        let mut clabels = who.clone();
        clabels.insert(format!("containerd.io/gc.ref.snapshot.{}", self.snapshotter_name), top.clone());
        cd.label_content(&config.digest, &clabels).await?;

        crate::crashpoint::hit("pull.labelled");
        // 7. Unpack into pullgate through containerd (the gate sees these Prepares).
        let sn = &self.snapshotter_name;
        for (i, b) in layers.iter().enumerate() {
            let chain = &chains[i];
            // Held first, then looked for: a chain found here stays until the image holds it.
            cd.hold_snapshot(sn, chain).await?;
            if cd.snapshot_exists(sn, chain).await? {
                continue;
            }
            let parent = if i == 0 { "" } else { chains[i - 1].as_str() };
            let labels = HashMap::from([(SNAPSHOT_REF_LABEL.to_string(), chain.clone())]);
            let key = format!("extract-{} {chain}", uuid::Uuid::new_v4().simple());
            let Some(mounts) = cd.prepare(sn, &key, parent, labels.clone()).await? else {
                out.adopted += 1;
                continue;
            };
            let desc = Descriptor { media_type: b.media_type.clone(), digest: b.digest.clone(), size: b.size as i64, annotations: HashMap::new() };
            let applied = match cd.apply(desc, mounts).await {
                Ok(a) => a,
                Err(e) => {
                    cd.remove_snapshot(sn, &key).await;
                    return Err(e.into());
                }
            };
            if applied != diff_ids[i] {
                cd.remove_snapshot(sn, &key).await;
                return Err(bad(format!("layer {} unpacks to {applied}, but the config says {}", b.digest, diff_ids[i])));
            }
            match cd.commit(sn, chain, &key, labels).await {
                Ok(()) => {
                    out.extracted += 1;
                    crate::crashpoint::hit("pull.layer-committed");
                }
                // A concurrent unpack of the same chain in this namespace committed first: its
                // snapshot is the same layer, so ours is dropped, as containerd's unpacker does.
                Err(e) if e.code == tonic::Code::AlreadyExists => cd.remove_snapshot(sn, &key).await,
                Err(e) => {
                    cd.remove_snapshot(sn, &key).await;
                    return Err(e.into());
                }
            }
        }
        cd.put_image(&r.image_name(), target).await?;
        Ok(out)
    }

    /// Whether another repository on registry `host` served the blob's bytes.
    fn same_host_served(&self, digest: &str, host: &str) -> Result<bool> {
        let origins = self.snap.store().read(|tx| ledger::blob_origins(tx, digest))?;
        Ok(origins.iter().any(|(o, _)| o.split('/').next() == Some(host)))
    }

    /// Streams one blob from the origin (checked against its digest) into the content store,
    /// or, when `keep` is false, only reads and checks it.
    async fn fetch(sess: &mut Session, cd: &Containerd, b: &Blob, keep: bool) -> Result<()> {
        let mut reader = sess.open_blob(&b.digest, b.size).await?;
        if !keep {
            while reader.next_chunk().await?.is_some() {}
            return Ok(());
        }
        let mut w = cd.writer(&b.digest, b.size);
        while let Some(chunk) = reader.next_chunk().await? {
            w.write(&chunk).await?;
        }
        w.commit(HashMap::new()).await?;
        Ok(())
    }
}

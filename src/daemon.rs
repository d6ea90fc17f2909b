//! daemon: `pullgate serve`. Prepares the root, picks the storage driver, opens the
//! snapshotter and serves containerd's Snapshots service on `snapshotter_socket` (0600) until
//! SIGTERM or SIGINT.
use crate::config::{Config, DriverChoice};
use crate::snapshotter::{probe_overlay, service, Driver, Snapshotter, SnapshotterError};
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The name containerd knows pullgate by (`[proxy_plugins.pullgate]`); pull unpacks into it.
pub const SNAPSHOTTER_NAME: &str = "pullgate";

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{context} {path}: {source}")]
    Io { context: &'static str, path: PathBuf, source: io::Error },
    #[error("overlayfs was configured ([daemon] driver = \"overlay\") but cannot be used: {0}")]
    NoOverlay(String),
    #[error(transparent)]
    Snapshotter(#[from] SnapshotterError),
    #[error(transparent)]
    Credential(#[from] crate::credential::CredentialError),
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
}

fn io_at(context: &'static str, path: &Path) -> impl FnOnce(io::Error) -> DaemonError {
    let path = path.to_path_buf();
    move |source| DaemonError::Io { context, path, source }
}

fn choose_driver(cfg: &Config) -> Result<Driver, DaemonError> {
    let root = &cfg.daemon.root;
    match cfg.daemon.driver {
        DriverChoice::Copy => Ok(Driver::Copy),
        DriverChoice::Overlay => probe_overlay(root).map_err(DaemonError::NoOverlay),
        DriverChoice::Auto => Ok(probe_overlay(root).unwrap_or_else(|why| {
            tracing::warn!(reason = %why, "overlayfs unavailable, using the copying driver");
            Driver::Copy
        })),
    }
}

/// Binds a unix socket readable and writable by root only, replacing a stale socket file, and
/// with `replace_link` a symbolic link: a node's bootstrap makes the CRI socket's path a link to
/// containerd's socket, at every boot, for kubelet to reach containerd until pullgate runs
/// (docs/cluster.md). The link is removed, never what it points to; any other file is refused.
pub fn bind_socket(path: &Path, replace_link: bool) -> Result<tokio::net::UnixListener, DaemonError> {
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(io_at("create socket directory", dir))?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_at("chmod", dir))?;
        }
    }
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => fs::remove_file(path).map_err(io_at("remove stale socket", path))?,
        Ok(m) if replace_link && m.file_type().is_symlink() => {
            let target = fs::read_link(path).map_err(io_at("read link", path))?;
            fs::remove_file(path).map_err(io_at("remove link", path))?;
            tracing::info!(path = %path.display(), target = %target.display(), "replaced the link at the socket's path (a node's bootstrap link) with the socket");
        }
        Ok(_) => {
            return Err(DaemonError::Io {
                context: "refusing to replace non-socket file at",
                path: path.to_path_buf(),
                source: io::Error::from(io::ErrorKind::AlreadyExists),
            })
        }
        Err(_) => {}
    }
    // serve() set umask 077, so the socket is never reachable by others, even briefly.
    let l = tokio::net::UnixListener::bind(path).map_err(io_at("bind", path))?;
    chmod_socket(path)?;
    Ok(l)
}

/// Makes the socket at `path` mode 0600 without following a link put there after the bind:
/// the path is opened without following links, must still be a socket, and is changed through
/// that open file (a chmod by path would follow a link swapped in meanwhile to any file).
fn chmod_socket(path: &Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_NOFOLLOW).open(path).map_err(io_at("open the socket", path))?;
    if !f.metadata().map_err(io_at("stat the socket", path))?.file_type().is_socket() {
        return Err(DaemonError::Io {
            context: "the socket was replaced after its bind by something else at",
            path: path.to_path_buf(),
            source: io::Error::from(io::ErrorKind::AlreadyExists),
        });
    }
    let through = Path::new("/proc/self/fd").join(std::os::fd::AsRawFd::as_raw_fd(&f).to_string());
    fs::set_permissions(&through, fs::Permissions::from_mode(0o600)).map_err(io_at("chmod", path))
}

/// Tells systemd that pullgate serves (`Type=notify`): `READY=1` to `$NOTIFY_SOCKET`, when set
/// (a path, or `@name` in the abstract namespace). Written by hand: one datagram, as
/// sd_notify(3) describes it, needs no crate.
fn notify_ready() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(target) = std::env::var_os("NOTIFY_SOCKET").filter(|t| !t.is_empty()) else { return };
    let sent = UnixDatagram::unbound().and_then(|sock| {
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name)?,
            None => SocketAddr::from_pathname(Path::new(&target))?,
        };
        sock.send_to_addr(b"READY=1", &addr)
    });
    match sent {
        Ok(_) => tracing::debug!("told systemd pullgate is ready"),
        Err(e) => tracing::warn!(error = %e, "cannot tell systemd pullgate is ready (NOTIFY_SOCKET)"),
    }
}

/// Installs the SIGTERM and SIGINT handlers now (before any socket exists: a service manager
/// that sees a socket may stop pullgate at once, and the default action would kill it without
/// removing its sockets); the returned future sends the shutdown once one arrives.
fn shutdown_signal(tx: tokio::sync::watch::Sender<bool>) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot install signal handlers; stop pullgate with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        let _ = tx.send(true);
    }
}

async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Logs, once containerd answers (it may start after pullgate), the namespaces labelled
/// `containerd.io/namespace.shareable=true`: containerd 1.7+ lets every namespace read their
/// blobs whatever the content sharing policy, and pullgate cannot stop a client from setting
/// the label. `pullgate pull` and `verify` warn again for their namespace.
async fn report_shareable(address: std::path::PathBuf, public_namespace: String) {
    for _ in 0..60 {
        let listed = match crate::pull::containerd::Containerd::connect(&address, "").await {
            Ok(cd) => tokio::time::timeout(std::time::Duration::from_secs(5), cd.shareable_namespaces()).await.ok().and_then(Result::ok),
            Err(_) => None,
        };
        if let Some(list) = listed {
            let (own, list): (Vec<String>, Vec<String>) = list.into_iter().partition(|ns| *ns == public_namespace);
            for ns in &own {
                tracing::info!(namespace = %ns, "pullgate's public namespace, labelled shareable: each pull or verify of an image with a blob pullgate knows as public (isolated store) first checks that everything it holds is public, and takes the label away otherwise");
            }
            for ns in &list {
                tracing::warn!(namespace = %ns, label = crate::pull::containerd::SHAREABLE_LABEL,
                    "namespace shares its blobs with every namespace (containerd 1.7+), private images' included");
            }
            if list.is_empty() {
                tracing::info!("no namespace is labelled {}", crate::pull::containerd::SHAREABLE_LABEL);
            }
            return;
        }
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    }
    tracing::warn!(containerd = %address.display(), "containerd did not answer for 5 minutes: cannot tell which namespaces share their blobs");
}

pub async fn serve(cfg: Config) -> Result<(), DaemonError> {
    // Everything pullgate creates is root-only unless it sets a mode on purpose (snapshot
    // roots are 0755, as containerd expects).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let root = &cfg.daemon.root;
    fs::create_dir_all(root).map_err(io_at("create root", root))?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o700)).map_err(io_at("chmod", root))?;
    let driver = choose_driver(&cfg)?;
    let gate = Arc::new(crate::gate::Gate::new(cfg.gate()));
    let snap = {
        let root = root.clone();
        let gate = gate.clone();
        // redb panics on some kinds of damage: report it and refuse to serve (fail closed).
        let admission_only = cfg.cri.enable.then(|| crate::cri::CRI_NAMESPACE.to_string());
        tokio::task::spawn_blocking(move || Snapshotter::open(&root, driver, gate).map(|s| s.with_admission_only(admission_only))).await.map_err(|e| DaemonError::Io {
            context: "the metadata database is damaged (opening it panicked); refusing to serve:",
            path: cfg.daemon.root.join("metadata.redb"),
            source: io::Error::other(e),
        })??
    };
    let snap = Arc::new(snap);
    let key = Arc::new(crate::credential::IdentityKey::load_or_create(&root.join("identity.key"))?);
    let puller = Arc::new(crate::pull::Puller {
        containerd: cfg.daemon.containerd_address.clone(),
        snapshotter_name: SNAPSHOTTER_NAME.to_string(),
        snap: snap.clone(),
        key,
        probe_anonymous: cfg.policy.probe_anonymous,
        hosts_dir: cfg.registry.hosts_dir.clone(),
        timeout: cfg.registry.timeout(),
        stale_leases_gone: tokio::sync::OnceCell::new(),
        channel: crate::pull::containerd::lazy_channel(cfg.daemon.containerd_address.clone()),
        node: Default::default(),
        public_namespace: Some(cfg.daemon.public_namespace.clone()).filter(|n| !n.is_empty()),
        public_checked: Default::default(),
        holders: Default::default(),
        not_public: Default::default(),
        no_public_names: Default::default(),
        on_node: Default::default(),
        unreachable: Default::default(),
    });
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(shutdown_signal(tx));
    let sock = &cfg.daemon.snapshotter_socket;
    let listener = bind_socket(sock, false)?;
    let api_sock = &cfg.daemon.api_socket;
    let api_listener = bind_socket(api_sock, false)?;
    tracing::info!(root = %root.display(), socket = %sock.display(), api = %api_sock.display(), driver = ?driver,
        policy = ?cfg.policy.verification, "pullgate serving");
    let (cri_puller, snap_cri, rx_cri) = (puller.clone(), snap.clone(), rx.clone());
    let (metrics_snap, rx_metrics) = (snap.clone(), rx.clone());
    // On SIGTERM the API and the CRI front finish the pulls they are serving, and each such
    // pull unpacks through containerd, which calls the snapshotter: the snapshotter stops only
    // once both have drained (a pull drained while it refused containerd failed at its unpack).
    let (api_drained_tx, api_drained) = tokio::sync::watch::channel(false);
    let (cri_drained_tx, cri_drained) = tokio::sync::watch::channel(false);
    let snapshots_stop = {
        let rx = rx.clone();
        async move {
            stopped(rx).await;
            stopped(api_drained).await;
            stopped(cri_drained).await;
        }
    };
    let snapshots = tonic::transport::Server::builder()
        .add_service(service::server(snap, Some(puller.clone())))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), snapshots_stop);
    let api = tonic::transport::Server::builder()
        .add_service(crate::api::server(crate::api::Api { puller, gate }))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(api_listener), stopped(rx));
    let cri_sock = cfg.cri.enable.then(|| cfg.cri.socket.clone());
    let cri_listener = match &cri_sock {
        Some(p) => Some(bind_socket(p, true)?),
        None => None,
    };
    if let Some(addr) = cfg.metrics.socket_addr() {
        let listener = crate::metrics::bind(addr).await?;
        tracing::info!(address = %addr, "metrics serving (GET /metrics)");
        tokio::spawn(crate::metrics::serve(listener, metrics_snap, root.clone(), stopped(rx_metrics)));
    }
    // Every socket is bound and listening (connections queue until the servers poll them).
    notify_ready();
    tokio::spawn(report_shareable(cfg.daemon.containerd_address.clone(), cfg.daemon.public_namespace.clone()));
    let cri = async {
        let (Some(path), Some(listener)) = (&cri_sock, cri_listener) else { return Ok(()) };
        let upstream = cfg.cri.containerd_address.clone().unwrap_or_else(|| cfg.daemon.containerd_address.clone());
        let (runtime, images) = crate::cri::services(crate::cri::Front::new(upstream.clone(), cri_puller, snap_cri, cfg.cri.principal));
        tracing::info!(socket = %path.display(), containerd = %upstream.display(), principal = ?cfg.cri.principal, "CRI front serving");
        tonic::transport::Server::builder()
            .add_service(runtime)
            .add_service(images)
            .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), stopped(rx_cri))
            .await
            .map_err(DaemonError::from)
    };
    let api = async {
        let served = api.await.map_err(DaemonError::from);
        let _ = api_drained_tx.send(true);
        served
    };
    let cri = async {
        let served = cri.await;
        let _ = cri_drained_tx.send(true);
        served
    };
    let result = tokio::try_join!(async { snapshots.await.map_err(DaemonError::from) }, api, cri);
    let _ = fs::remove_file(sock);
    let _ = fs::remove_file(api_sock);
    if let Some(p) = &cri_sock {
        let _ = fs::remove_file(p);
    }
    result?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bind_socket_replaces_a_stale_socket_and_a_link_where_asked_but_no_other_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("containerd.sock");
        let _other = std::os::unix::net::UnixListener::bind(&target).expect("bind the link's target");
        let link = dir.path().join("cri.sock");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        assert!(bind_socket(&link, false).is_err(), "a link is refused where not asked");
        assert!(fs::symlink_metadata(&link).expect("stat").file_type().is_symlink(), "and left alone");
        let l = bind_socket(&link, true).expect("a link at the path is replaced");
        assert!(fs::symlink_metadata(&link).expect("stat").file_type().is_socket());
        assert!(fs::symlink_metadata(&target).expect("stat").file_type().is_socket(), "the link's target is left alone");
        assert_eq!(fs::metadata(&link).expect("stat").permissions().mode() & 0o777, 0o600);
        drop(l);
        bind_socket(&link, false).expect("a stale socket is replaced");
        let file = dir.path().join("file.sock");
        fs::write(&file, b"not a socket").expect("write");
        assert!(bind_socket(&file, true).is_err(), "a regular file is refused");
        assert_eq!(fs::read(&file).expect("read"), b"not a socket");
        // A link swapped in at the socket's path between the bind and its chmod: the chmod
        // refuses, and the file the link names keeps its mode.
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        let swapped = dir.path().join("swapped.sock");
        std::os::unix::fs::symlink(&file, &swapped).expect("symlink");
        assert!(chmod_socket(&swapped).is_err(), "a link at the path is not followed");
        assert_eq!(fs::metadata(&file).expect("stat").permissions().mode() & 0o777, 0o644);
    }
}

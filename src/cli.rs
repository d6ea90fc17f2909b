//! cli: the command line (clap structs only; their `///` docs are the `--help` text) and the
//! dispatch from a subcommand to one call (the daemon, or one RPC on pullgate's API), with
//! exit codes. The commands: serve, pull, verify, check, grants, revoke, preload, inspect,
//! doctor, containerd-config; every client command takes `--address` and `-n` (default `default`), as ctr does.
use crate::api::proto::{self, pullgate_client::PullgateClient};
use crate::config::Config;
use crate::credential::Credential;
use clap::{Args, Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use tonic::Code;

/// Exit code for a bad command line, configuration or argument.
pub const EXIT_USAGE: i32 = 2;
/// Exit code for any other failure.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code when the registry or the gate refused (bad credential, no access, denied).
pub const EXIT_DENIED: i32 = 3;
/// Exit code when the image, manifest or record does not exist.
pub const EXIT_NOT_FOUND: i32 = 4;
/// Exit code when the registry, containerd or pullgate is unreachable.
pub const EXIT_UNAVAILABLE: i32 = 5;
/// pullgate's API socket when `--address` is not given.
const DEFAULT_API_ADDRESS: &str = "/run/pullgate/api.sock";

/// pullgate: a containerd snapshotter that refuses to unpack or run a cached private image
/// for a namespace or pod that has not itself authenticated to the registry for it.
#[derive(Debug, Parser)]
#[command(name = "pullgate", version)]
pub struct Cli {
    /// pullgate's API socket (before or after the subcommand, as with ctr).
    #[arg(long, short = 'a', global = true, env = "PULLGATE_ADDRESS", default_value = DEFAULT_API_ADDRESS)]
    pub address: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Target {
    /// containerd namespace.
    #[arg(long = "namespace", short = 'n', env = "CONTAINERD_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Output format: text, or json (one JSON value on standard output; field names are stable).
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Principal (pod) inside the namespace the grant is for; empty for namespace-wide.
    #[arg(long, default_value = "")]
    pub principal: String,
    /// Registry credentials, USER[:PASSWORD] (the password is asked for on a terminal when
    /// omitted). Without --user: the credential docker keeps for the registry
    /// ($DOCKER_CONFIG/config.json or ~/.docker/config.json, credential helpers included).
    #[arg(long, short = 'u')]
    pub user: Option<String>,
    /// Read the password of --user USER from standard input.
    #[arg(long, requires = "user")]
    pub password_stdin: bool,
    /// Read an identity token (the OAuth2 refresh token a token login gives, docker's
    /// `identitytoken`) from standard input, instead of --user.
    #[arg(long, conflicts_with_all = ["user", "registry_token_stdin"])]
    pub identity_token_stdin: bool,
    /// Read a registry token (a bearer token, sent to the registry as it is) from standard
    /// input, instead of --user.
    #[arg(long, conflicts_with = "user")]
    pub registry_token_stdin: bool,
    /// Talk to the registry's own server over plain http (as ctr: a server a hosts.toml names
    /// keeps the scheme it names).
    #[arg(long)]
    pub plain_http: bool,
    /// containerd-style hosts directory (DIR/<host>/hosts.toml), read by this command: only
    /// its `server` is used (TLS settings come from the daemon's [registry] hosts_dir).
    #[arg(long)]
    pub hosts_dir: Option<PathBuf>,
    /// Platform to select from an index (default: this machine's).
    #[arg(long, default_value_t = crate::registry::host_platform())]
    pub platform: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: containerd's Snapshots service and pullgate's API.
    Serve {
        /// Configuration file (see config.toml.example).
        #[arg(long, short = 'c', default_value = "/etc/pullgate/config.toml")]
        config: PathBuf,
    },
    /// Pull an image through pullgate: verify at the registry, fetch missing blobs, unpack.
    /// Prints the manifest digest.
    Pull {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        registry: RegistryArgs,
        /// No progress display (it is shown only when standard output is a terminal and the
        /// output is text).
        #[arg(long, short = 'q')]
        quiet: bool,
        /// Image reference, e.g. registry.example.com:5000/team/app:v1.
        reference: String,
    },
    /// Prove access at the registry and record the grant, downloading nothing the origin
    /// served before. Prints the manifest digest.
    Verify {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        registry: RegistryArgs,
        reference: String,
    },
    /// Print `allowed` or `denied: <reason>` for running the image; changes nothing.
    Check {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "")]
        principal: String,
        reference: String,
    },
    /// List grants (of one namespace with -n; of all with --all).
    Grants {
        #[command(flatten)]
        target: Target,
        /// Every namespace.
        #[arg(long)]
        all: bool,
    },
    /// Remove grants of a namespace: one principal's (--principal), or all of them; only at the
    /// reference's origin when one is given.
    Revoke {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        principal: Option<String>,
        reference: Option<String>,
    },
    /// Pull an image for the node and mark it preloaded in the namespace: under the policy
    /// NeverVerifyPreloadedImages its layers run there without a grant, whoever pulls the same
    /// bytes since (an image every pod may run, such as a sandbox image that needs a login).
    /// With --list, the namespace's marks (every namespace's with --all); with --remove, the
    /// mark goes (the image and its grants stay).
    Preload {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        registry: RegistryArgs,
        /// List the images marked preloaded.
        #[arg(long, conflicts_with_all = ["remove", "reference"])]
        list: bool,
        /// With --list: every namespace.
        #[arg(long, requires = "list")]
        all: bool,
        /// Remove the mark of the reference (or manifest digest) given.
        #[arg(long, requires = "reference")]
        remove: bool,
        /// Image reference (required unless --list).
        #[arg(required_unless_present = "list")]
        reference: Option<String>,
    },
    /// Show what pullgate recorded about an image reference or a digest.
    Inspect {
        /// Output format: text, or json (one JSON value on standard output; field names are stable).
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Output,
        target: String,
    },
    /// Check this node: pullgate registered in containerd and serving, no other snapshotter
    /// loaded, CRI and the transfer service unpacking into pullgate, the content sharing
    /// policy, namespace labels, permissions of pullgate's sockets and files, its ledger.
    /// Prints ok / warning / problem per check with the fix; exit 1 when a problem is found.
    Doctor(DoctorArgs),
    /// Merge pullgate's containerd settings (plugin/containerd-1.x.toml or -2.x.toml, with this
    /// node's platform and pullgate's socket and root) into containerd's config.toml, keeping
    /// its other settings, comments and layout. Prints the change as a unified diff, saves the
    /// file's previous bytes as FILE.pullgate-backup, and refuses, writing nothing, when the file
    /// pins something else where pullgate must be (another snapshotter for CRI or the transfer
    /// service, a proxy plugin named pullgate elsewhere, pullgate disabled). A file that already
    /// has the settings is left as it is.
    ContainerdConfig(ContainerdConfigArgs),
}

#[derive(Debug, Args)]
pub struct ContainerdConfigArgs {
    /// containerd's configuration file.
    #[arg(long, default_value = "/etc/containerd/config.toml")]
    pub file: PathBuf,
    /// pullgate's configuration file (its [daemon] snapshotter_socket and root; the defaults
    /// when it does not exist).
    #[arg(long, short = 'c', default_value = "/etc/pullgate/config.toml")]
    pub config: PathBuf,
    /// The containerd the file is for: 1.x (1.6, 1.7: config version 2) or 2.x (version 3, or 4
    /// as 2.4 writes it). Needed to create a file that does not exist; else checked against the
    /// file's version.
    #[arg(long, value_enum)]
    pub containerd: Option<ContainerdSeries>,
    /// containerd's content_sharing_policy: isolated (replaces an explicit "shared") or shared
    /// (the policy is left as the file has it). Without it, "isolated" is set where the file sets
    /// no policy, and an explicit "shared" (which `containerd config default` writes) is refused.
    #[arg(long, value_enum)]
    pub content_sharing: Option<ContentSharing>,
    /// The platform the transfer service unpacks into pullgate (default: this machine's, as
    /// containerd names it: linux/amd64, linux/arm64, linux/arm/v7, ...).
    #[arg(long)]
    pub platform: Option<String>,
    /// Print the change as a unified diff and write nothing.
    #[arg(long, conflicts_with = "undo")]
    pub dry_run: bool,
    /// Put back the file as it was before the merge (from FILE.pullgate-backup, byte for byte)
    /// and remove the backup. Refused when the file changed since the merge.
    #[arg(long, conflicts_with_all = ["containerd", "content_sharing", "platform"])]
    pub undo: bool,
    /// With --undo: restore the backup even though the file changed since the merge.
    #[arg(long, requires = "undo")]
    pub force: bool,
    /// The node's containerd binary, which checks the merged file before it is written
    /// (`containerd --config FILE config dump`: what containerd itself reads, imports included).
    #[arg(long, default_value = "containerd")]
    pub containerd_bin: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContainerdSeries {
    #[value(name = "1.x")]
    V1,
    #[value(name = "2.x")]
    V2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContentSharing {
    Isolated,
    Shared,
}

/// The exit code of a `containerd-config` error: a file or setting it refuses is a usage error
/// (as a bad configuration is), a missing file or backup is not found.
pub fn containerd_config_exit_code(e: &crate::containerd_config::ContainerdConfigError) -> i32 {
    use crate::containerd_config::ContainerdConfigError as E;
    match e {
        E::Parse { .. } | E::Version { .. } | E::Conflict { .. } | E::Shape { .. } | E::Platform(_) | E::Unverified { .. } => EXIT_USAGE,
        E::Missing { .. } | E::NoBackup { .. } => EXIT_NOT_FOUND,
        E::Read { .. } | E::Write { .. } | E::BackupExists { .. } | E::Edited { .. } | E::Unchecked { .. } => EXIT_FAILURE,
    }
}

/// Runs `pullgate containerd-config`; its exit code.
fn containerd_config(a: ContainerdConfigArgs) -> i32 {
    use crate::containerd_config as cc;
    let fail = |e: cc::ContainerdConfigError| {
        eprintln!("pullgate: {e}");
        containerd_config_exit_code(&e)
    };
    if a.undo {
        return match cc::undo(&a.file, a.force) {
            Ok(cc::Undone::Restored { file, backup }) => {
                println!("restored {} from {} (backup removed); restart containerd to load it", file.display(), backup.display());
                0
            }
            Ok(cc::Undone::Removed { file }) => {
                println!("removed {} (pullgate had created it); restart containerd", file.display());
                0
            }
            Err(e) => fail(e),
        };
    }
    let pg = match Config::load(&a.config) {
        Ok(c) => c,
        Err(crate::config::ConfigError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Config::default(),
        Err(e) => return usage(e),
    };
    let platform = match a.platform.map(Ok).unwrap_or_else(cc::node_platform) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let mut opts = cc::Options::new(a.file, &pg, platform);
    opts.series = a.containerd.map(|s| match s {
        ContainerdSeries::V1 => cc::Series::V1,
        ContainerdSeries::V2 => cc::Series::V2,
    });
    opts.sharing = a.content_sharing.map(|s| match s {
        ContentSharing::Isolated => cc::Sharing::Isolated,
        ContentSharing::Shared => cc::Sharing::Shared,
    });
    let plan = match cc::plan(&opts) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    if let Err(e) = cc::verify(&plan, &opts, &a.containerd_bin) {
        if plan.changes() {
            print!("{}", plan.diff());
        }
        return fail(e);
    }
    if !plan.changes() {
        println!("{} already has pullgate's settings: nothing to change", plan.file.display());
        return 0;
    }
    print!("{}", plan.diff());
    if a.dry_run {
        println!("dry run: {} not written", plan.file.display());
        return 0;
    }
    match cc::apply(&plan) {
        Ok(()) => {
            println!("wrote {} (its previous bytes are in {}); restart containerd to load it", plan.file.display(), plan.backup().display());
            0
        }
        Err(e) => fail(e),
    }
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// pullgate's configuration file (its root, sockets and containerd address; the defaults
    /// are checked when it does not exist). `--address`, when given, names the API socket.
    #[arg(long, short = 'c', default_value = "/etc/pullgate/config.toml")]
    pub config: PathBuf,
    /// containerd's configuration file.
    #[arg(long, default_value = "/etc/containerd/config.toml")]
    pub containerd_config: PathBuf,
    /// containerd's socket (default: `[daemon] containerd_address` of pullgate's config,
    /// /run/containerd/containerd.sock).
    #[arg(long)]
    pub containerd_address: Option<PathBuf>,
    /// Also try each registry of pullgate's `[registry] hosts_dir` (GET /v2/).
    #[arg(long)]
    pub registries: bool,
    /// Output format: text, or json (`{"checks": [{"name", "status", "message", "fix"}], "ok", "warnings", "problems"}`).
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Output,
}

/// Runs `pullgate doctor`; its exit code (`doctor::EXIT_PROBLEM` when a check found a problem).
async fn doctor(address: &std::path::Path, a: DoctorArgs) -> i32 {
    let opts = crate::doctor::Options {
        pullgate_config: a.config,
        // The API socket named on the command line (or PULLGATE_ADDRESS), else the config's.
        api_address: (address != std::path::Path::new(DEFAULT_API_ADDRESS)).then(|| address.to_path_buf()),
        containerd_address: a.containerd_address,
        containerd_config: a.containerd_config,
        registries: a.registries,
    };
    let checks = crate::doctor::run(&opts).await;
    match a.output {
        Output::Json => println!("{}", crate::doctor::render_json(&checks)),
        Output::Text => print!("{}", crate::doctor::render_text(&checks)),
    }
    crate::doctor::exit_code(&checks)
}

/// A bare level ("debug") applies to pullgate's own events; the libraries underneath (h2,
/// tonic) stay at warn. Anything else is a full EnvFilter directive.
fn log_filter(level: &str) -> String {
    match level {
        "error" | "warn" | "info" | "debug" | "trace" => format!("warn,pullgate={level}"),
        other => other.to_string(),
    }
}

fn init_logging(level: &str, format: crate::config::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false);
    match format {
        crate::config::LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).init(),
        // One JSON object per line: timestamp, level, fields (message included), spans.
        crate::config::LogFormat::Json => fmt.json().with_ansi(false).init(),
    }
}

/// The daemon's runtime has a worker per core; a client command (one request at a time) runs
/// on the calling thread alone: no worker threads to start and join, which is most of a short
/// command's own time.
fn runtime(serve: bool) -> Result<tokio::runtime::Runtime, i32> {
    let mut b = if serve { tokio::runtime::Builder::new_multi_thread() } else { tokio::runtime::Builder::new_current_thread() };
    b.enable_all().build().map_err(|e| {
        eprintln!("pullgate: cannot start runtime: {e}");
        EXIT_FAILURE
    })
}

/// Maps an API status to the one-line message and exit code.
fn fail(s: tonic::Status) -> i32 {
    let msg = s.message().replace('\n', " ");
    eprintln!("pullgate: {}", if msg.is_empty() { s.code().description().to_string() } else { msg });
    match s.code() {
        Code::InvalidArgument => EXIT_USAGE,
        Code::PermissionDenied | Code::Unauthenticated => EXIT_DENIED,
        Code::NotFound => EXIT_NOT_FOUND,
        Code::Unavailable => EXIT_UNAVAILABLE,
        _ => EXIT_FAILURE,
    }
}

/// Reports a usage error (a bad argument, file or configuration); its exit code.
fn usage(e: impl std::fmt::Display) -> i32 {
    eprintln!("pullgate: {e}");
    EXIT_USAGE
}

async fn client(address: &std::path::Path) -> Result<PullgateClient<tonic::transport::Channel>, i32> {
    match crate::pull::containerd::channel(address).await {
        Ok(ch) => Ok(PullgateClient::new(ch)),
        Err(e) => {
            eprintln!("pullgate: cannot reach pullgate at {}: {} (is `pullgate serve` running?)", address.display(), crate::doctor::causes(&e));
            Err(EXIT_UNAVAILABLE)
        }
    }
}

/// The credential of a pull or verify, as the request carries it.
#[derive(Default)]
struct RequestCredential {
    user: String,
    password: String,
    identity_token: String,
    registry_token: String,
}

/// The credential of a pull or verify: `--user` (the password from it, standard input or a
/// prompt), a token from standard input, else what docker keeps for the reference's registry,
/// else none.
fn credentials(r: &RegistryArgs, reference: &str) -> Result<RequestCredential, i32> {
    let read_line = || {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line.trim_end_matches(['\n', '\r']).to_string())
    };
    let read_token = || read_line().map_err(|e| usage(format!("cannot read the token: {e}")));
    if r.identity_token_stdin {
        return Ok(RequestCredential { identity_token: read_token()?, ..Default::default() });
    }
    if r.registry_token_stdin {
        return Ok(RequestCredential { registry_token: read_token()?, ..Default::default() });
    }
    let Some(u) = r.user.clone() else {
        let host = crate::reference::Reference::parse(reference).map_err(usage)?.host;
        return Ok(match crate::dockerconfig::lookup(&host).map_err(usage)? {
            Some(Credential::Password { user, secret }) => RequestCredential { user, password: secret.expose().into(), ..Default::default() },
            Some(Credential::IdentityToken(t)) => RequestCredential { identity_token: t.expose().into(), ..Default::default() },
            Some(Credential::RegistryToken(t)) => RequestCredential { registry_token: t.expose().into(), ..Default::default() },
            None => RequestCredential::default(),
        });
    };
    let pw = if r.password_stdin {
        if u.contains(':') {
            return Err(usage("--password-stdin takes the user name alone in --user"));
        }
        read_line()
    } else if let Some((user, pw)) = u.split_once(':') {
        return Ok(RequestCredential { user: user.to_string(), password: pw.to_string(), ..Default::default() });
    } else if std::io::stdin().is_terminal() {
        rpassword::prompt_password("Password: ")
    } else {
        read_line()
    };
    pw.map(|password| RequestCredential { user: u, password, ..Default::default() }).map_err(|e| usage(format!("cannot read the password: {e}")))
}

/// The server a `--hosts-dir` names for the reference's registry, read here, in the caller's
/// process (the daemon reads no path a request names).
fn request_server(hosts_dir: Option<&std::path::Path>, reference: &str) -> Result<String, i32> {
    let Some(dir) = hosts_dir else { return Ok(String::new()) };
    let host = crate::reference::Reference::parse(reference).map_err(usage)?.host;
    // The host's directory as containerd finds it; without a hosts.toml there is no server
    // to take (certificate files there are TLS settings, the daemon's business).
    let Some(hdir) = crate::registry::hosts::host_dir(dir, &host).map_err(usage)? else { return Ok(String::new()) };
    let path = hdir.join("hosts.toml");
    let Some(text) = crate::registry::hosts::read_hosts_file(&path).map_err(usage)? else { return Ok(String::new()) };
    let server = crate::registry::hosts::request_server(&text, &host).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    Ok(server.unwrap_or_default())
}

fn pull_request(t: &Target, r: &RegistryArgs, reference: String) -> Result<proto::PullRequest, i32> {
    let server = request_server(r.hosts_dir.as_deref(), &reference)?;
    let RequestCredential { user, password, identity_token, registry_token } = credentials(r, &reference)?;
    Ok(proto::PullRequest {
        reference,
        namespace: t.namespace.clone(),
        principal: r.principal.clone(),
        user,
        password,
        identity_token,
        registry_token,
        plain_http: r.plain_http,
        hosts_dir: String::new(),
        platform: r.platform.clone(),
        server,
    })
}

fn report(out: proto::PullResponse, output: Output) -> i32 {
    if output == Output::Json {
        let v = serde_json::json!({
            "manifest": out.manifest,
            "identity": out.identity,
            "downloaded": out.downloaded,
            "copied": out.copied,
            "public": out.public,
            "extracted": out.extracted,
            "adopted": out.adopted,
            "held_until": (!out.held_until.is_empty()).then_some(&out.held_until),
            "warnings": out.warnings,
        });
        println!("{v}");
        return 0;
    }
    println!("{}", out.manifest);
    let mut said = format!(
        "identity {}, {} blob(s) downloaded, {} copied from the node,{} {} layer(s) extracted, {} adopted\n",
        out.identity,
        out.downloaded.len(),
        out.copied.len(),
        match out.public.len() {
            0 => String::new(),
            n => format!(" {n} taken from pullgate's public namespace,"),
        },
        out.extracted,
        out.adopted
    );
    if !out.held_until.is_empty() {
        said += &format!("the image's blobs are held in the namespace until {}; after that, only an image record keeps them\n", out.held_until);
    }
    for w in &out.warnings {
        said += &format!("warning: {w}\n");
    }
    // One write (stderr is unbuffered): the lines arrive together, and cost one system call.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), said.as_bytes());
    0
}

fn unix_rfc3339(secs: i64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64)).to_string()
}

fn grant_json(g: &proto::Grant) -> serde_json::Value {
    serde_json::json!({ "namespace": g.namespace, "principal": g.principal, "origin": g.origin,
        "manifest": g.manifest, "identity": g.identity, "verified_at": unix_rfc3339(g.verified_at_unix) })
}

fn served_by_json(s: &[proto::BlobOrigin]) -> serde_json::Value {
    s.iter().map(|o| serde_json::json!({ "origin": o.origin, "identities": o.identities })).collect()
}

fn blob_json(b: &proto::InspectedBlob) -> serde_json::Value {
    serde_json::json!({ "digest": b.digest, "served_by": served_by_json(&b.served_by) })
}

/// `inspect -o json`: `{"manifests": [...], "layer": {...} or null, "blob": {...} or null}`.
fn inspection_json(r: &proto::InspectResponse) -> serde_json::Value {
    let manifests: Vec<_> = r
        .manifests
        .iter()
        .map(|m| {
            serde_json::json!({
                "digest": m.digest,
                "names": m.names.iter().map(|n| serde_json::json!({ "name": n.name, "origin": n.origin })).collect::<Vec<_>>(),
                "origins": m.origins,
                "config": m.config.as_ref().map(blob_json),
                "layers": m.layers.iter().map(|l| serde_json::json!({ "blob": l.blob, "diff_id": l.diff_id, "public": l.public,
                    "served_by": served_by_json(&l.served_by) })).collect::<Vec<_>>(),
                "grants": m.grants.iter().map(grant_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "manifests": manifests,
        "layer": r.layer.as_ref().map(|l| serde_json::json!({ "diff_id": l.diff_id, "public": l.public, "manifests": l.manifests,
            "blobs": l.blobs.iter().map(blob_json).collect::<Vec<_>>() })),
        "blob": r.blob.as_ref().map(blob_json),
    })
}

/// Sizes as `ctr images pull` shows them.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (n as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// One blob's progress line: `sha256:0123456789ab: downloading |+++++---| 1.5 MiB/3.0 MiB`.
fn progress_line(b: &proto::BlobProgress) -> String {
    const WIDTH: u64 = 40;
    let short: String = b.digest.chars().take("sha256:".len() + 12).collect();
    // An empty blob is all or nothing.
    let filled = b.offset.min(b.total).saturating_mul(WIDTH).checked_div(b.total).unwrap_or(if b.state == "waiting" { 0 } else { WIDTH });
    let bar: String = (0..WIDTH).map(|i| if i < filled { '+' } else { '-' }).collect();
    format!("{short}: {:<12}|{bar}| {}/{}", b.state, human_bytes(b.offset), human_bytes(b.total))
}

/// Redraws the progress of a pull in place on the terminal (as `ctr images pull` does).
struct ProgressView {
    lines: usize,
    started: std::time::Instant,
}

impl ProgressView {
    fn draw(&mut self, blobs: &[proto::BlobProgress]) {
        use std::io::Write;
        let mut s = String::new();
        if self.lines > 0 {
            s.push_str(&format!("\x1b[{}A", self.lines));
        }
        for b in blobs {
            s.push_str("\r\x1b[2K");
            s.push_str(&progress_line(b));
            s.push('\n');
        }
        let secs = self.started.elapsed().as_secs_f64();
        let fetched: u64 = blobs.iter().filter(|b| b.state == "downloading" || b.state == "done").map(|b| b.offset).sum();
        s.push_str(&format!("\r\x1b[2Kelapsed: {secs:.1} s    downloaded: {} ({}/s)\n", human_bytes(fetched), human_bytes((fetched as f64 / secs.max(0.001)) as u64)));
        self.lines = blobs.len() + 1;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(s.as_bytes());
        let _ = out.flush();
    }
}

/// `pullgate pull` on a terminal: the daemon's progress events drawn as they come, then the
/// usual result.
async fn pull_with_progress(c: &mut PullgateClient<tonic::transport::Channel>, req: proto::PullRequest) -> i32 {
    let mut stream = match c.pull_with_progress(req).await {
        Ok(s) => s.into_inner(),
        Err(s) => return fail(s),
    };
    let mut view = ProgressView { lines: 0, started: std::time::Instant::now() };
    loop {
        match stream.message().await {
            Ok(Some(proto::PullEvent { event: Some(proto::pull_event::Event::Progress(p)) })) => view.draw(&p.blobs),
            Ok(Some(proto::PullEvent { event: Some(proto::pull_event::Event::Done(out)) })) => return report(out, Output::Text),
            Ok(Some(proto::PullEvent { event: None })) => {}
            Ok(None) => {
                eprintln!("pullgate: the pull's progress stream ended without a result");
                return EXIT_FAILURE;
            }
            Err(s) => return fail(s),
        }
    }
}

/// A reference the command was given, checked here so that a malformed one is a usage error
/// (exit 2) whether or not the daemon is up.
fn check_reference(reference: &str) -> Result<(), i32> {
    crate::reference::Reference::parse(reference).map(|_| ()).map_err(usage)
}

async fn run_client(address: &std::path::Path, cmd: Command) -> i32 {
    // Everything that can be refused locally is, before the daemon is contacted (and before a
    // password is asked for).
    let local = match &cmd {
        Command::Pull { reference, .. } | Command::Verify { reference, .. } | Command::Check { reference, .. } => check_reference(reference),
        Command::Revoke { reference: Some(r), .. } => check_reference(r),
        Command::Preload { reference: Some(r), registry, .. } if !crate::reference::is_digest(r) => {
            if registry.principal.is_empty() { check_reference(r) } else { Err(usage("an image is preloaded for the whole namespace (the node's): give no --principal")) }
        }
        _ => Ok(()),
    };
    if let Err(code) = local {
        return code;
    }
    let pull = match &cmd {
        Command::Preload { target, registry, reference: Some(reference), list: false, remove: false, .. }
        | Command::Pull { target, registry, reference, .. }
        | Command::Verify { target, registry, reference } => match pull_request(target, registry, reference.clone()) {
            Ok(r) => Some(r),
            Err(code) => return code,
        },
        _ => None,
    };
    let mut c = match client(address).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match cmd {
        Command::Serve { .. } | Command::Doctor(_) | Command::ContainerdConfig(_) => EXIT_USAGE,
        Command::Pull { .. } | Command::Verify { .. } => {
            let Some(req) = pull else { return EXIT_FAILURE };
            if let Command::Pull { target, quiet: false, .. } = &cmd {
                if target.output == Output::Text && std::io::stdout().is_terminal() {
                    return pull_with_progress(&mut c, req).await;
                }
            }
            let out = if matches!(cmd, Command::Verify { .. }) { c.verify(req).await } else { c.pull(req).await };
            let output = match &cmd {
                Command::Pull { target, .. } | Command::Verify { target, .. } => target.output,
                _ => Output::Text,
            };
            out.map(|r| report(r.into_inner(), output)).unwrap_or_else(fail)
        }
        Command::Check { target, principal, reference } => {
            let req = proto::CheckRequest { reference, namespace: target.namespace, principal };
            match c.check(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    match (target.output, r.allowed) {
                        (Output::Json, _) => println!("{}", serde_json::json!({ "allowed": r.allowed, "reason": r.reason })),
                        (Output::Text, true) => println!("allowed"),
                        (Output::Text, false) => println!("denied: {}", r.reason),
                    }
                    if r.allowed { 0 } else { EXIT_DENIED }
                }
                Err(s) => fail(s),
            }
        }
        Command::Grants { target, all } => {
            let ns = if all { String::new() } else { target.namespace };
            match c.grants(proto::GrantsRequest { namespace: ns }).await {
                Ok(r) => {
                    let when = |g: &proto::Grant| humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(g.verified_at_unix.max(0) as u64));
                    if target.output == Output::Json {
                        let all: Vec<_> = r
                            .into_inner()
                            .grants
                            .iter()
                            .map(grant_json)
                            .collect();
                        println!("{}", serde_json::Value::Array(all));
                        return 0;
                    }
                    println!("{:<16} {:<16} {:<40} {:<20} {:<20} VERIFIED", "NAMESPACE", "PRINCIPAL", "ORIGIN", "MANIFEST", "IDENTITY");
                    for g in r.into_inner().grants {
                        let manifest: String = g.manifest.chars().take(19).collect();
                        let principal = if g.principal.is_empty() { "-" } else { g.principal.as_str() };
                        println!(
                            "{:<16} {:<16} {:<40} {:<20} {:<20} {}",
                            g.namespace,
                            principal,
                            g.origin,
                            manifest,
                            g.identity,
                            when(&g)
                        );
                    }
                    0
                }
                Err(s) => fail(s),
            }
        }
        Command::Revoke { target, principal, reference } => {
            let req = proto::RevokeRequest {
                namespace: target.namespace,
                all_principals: principal.is_none(),
                principal: principal.unwrap_or_default(),
                reference: reference.unwrap_or_default(),
            };
            match c.revoke(req).await {
                Ok(r) => {
                    let n = r.into_inner().revoked;
                    match target.output {
                        Output::Json => println!("{}", serde_json::json!({ "revoked": n })),
                        Output::Text => println!("revoked {n} grant(s)"),
                    }
                    0
                }
                Err(s) => fail(s),
            }
        }
        Command::Preload { target, list: true, all, .. } => {
            let ns = if all { String::new() } else { target.namespace };
            match c.preloads(proto::PreloadsRequest { namespace: ns }).await {
                Ok(r) => {
                    print_preloads(&r.into_inner().preloaded, target.output);
                    0
                }
                Err(s) => fail(s),
            }
        }
        Command::Preload { target, remove: true, reference, .. } => {
            match c.unpreload(proto::UnpreloadRequest { namespace: target.namespace, reference: reference.unwrap_or_default() }).await {
                Ok(r) => {
                    let n = r.into_inner().removed;
                    match target.output {
                        Output::Json => println!("{}", serde_json::json!({ "removed": n })),
                        Output::Text => println!("removed {n} preload mark(s)"),
                    }
                    if n == 0 { EXIT_NOT_FOUND } else { 0 }
                }
                Err(s) => fail(s),
            }
        }
        Command::Preload { target, .. } => {
            let Some(req) = pull else { return EXIT_FAILURE };
            c.preload(req).await.map(|r| report(r.into_inner(), target.output)).unwrap_or_else(fail)
        }
        Command::Inspect { target, output } => match c.inspect(proto::InspectRequest { target }).await {
            Ok(r) => {
                let r = r.into_inner();
                match output {
                    Output::Json => println!("{}", inspection_json(&r)),
                    Output::Text => print!("{}", r.text),
                }
                0
            }
            Err(s) => fail(s),
        },
    }
}

/// `pullgate preload --list`: a table, or one JSON array.
fn print_preloads(marks: &[proto::Preloaded], output: Output) {
    if output == Output::Json {
        let all: Vec<_> = marks
            .iter()
            .map(|p| serde_json::json!({ "namespace": p.namespace, "reference": p.reference, "manifest": p.manifest, "diff_ids": p.diff_ids, "marked_at": unix_rfc3339(p.marked_at_unix) }))
            .collect();
        println!("{}", serde_json::Value::Array(all));
        return;
    }
    println!("{:<16} {:<48} {:<20} {:<7} MARKED", "NAMESPACE", "REFERENCE", "MANIFEST", "LAYERS");
    for p in marks {
        let manifest: String = p.manifest.chars().take(19).collect();
        println!("{:<16} {:<48} {:<20} {:<7} {}", p.namespace, p.reference, manifest, p.diff_ids.len(), unix_rfc3339(p.marked_at_unix));
    }
}

/// The binary that runs `serve` and `doctor`, installed beside `pullgate`.
pub const DAEMON_BINARY: &str = "pullgated";

/// `pullgate`'s entry: runs a client command (one call on pullgate's API) and returns its exit
/// code; for `serve`, `doctor` and `containerd-config`, which the `pullgate` binary does not link, this process
/// becomes `pullgated` beside it (exec: same process, same arguments), and returns only if
/// that fails. Two binaries because a client command's own time is mostly loading its binary:
/// one without the daemon's code is a third of the size, with a quarter of the relocations
/// (docs/benchmarks.md).
pub fn run_client_or_exec(cli: Cli) -> i32 {
    if !matches!(cli.command, Command::Serve { .. } | Command::Doctor(_) | Command::ContainerdConfig(_)) {
        return match runtime(false) {
            Ok(rt) => rt.block_on(run_client(&cli.address, cli.command)),
            Err(code) => code,
        };
    }
    // Set by a `pullgate` that exec'd: seen here, the file beside pullgate is pullgate itself.
    if std::env::var_os(EXEC_MARK).is_some() {
        eprintln!("pullgate: the {DAEMON_BINARY} beside pullgate is pullgate itself (install target/release/{DAEMON_BINARY} there)");
        return EXIT_CANNOT_EXEC;
    }
    use std::os::unix::process::CommandExt;
    let daemon = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(DAEMON_BINARY),
        Err(e) => {
            eprintln!("pullgate: cannot tell where pullgate is installed (to run {DAEMON_BINARY} beside it): {e}");
            return EXIT_CANNOT_EXEC;
        }
    };
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new(&daemon);
    if let Some(arg0) = args.next() {
        cmd.arg0(arg0);
    }
    let e = cmd.args(args).env(EXEC_MARK, env!("CARGO_PKG_VERSION")).exec();
    eprintln!("pullgate: cannot run {}: {e} (`serve` and `doctor` are run by {DAEMON_BINARY}, installed beside pullgate)", daemon.display());
    if e.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_INSTALLED
    } else {
        EXIT_CANNOT_EXEC
    }
}

/// Exit code when `pullgated` is not installed beside `pullgate` (as a shell's 127).
pub const EXIT_NOT_INSTALLED: i32 = 127;
/// Exit code when `pullgated` cannot be run, or is not the one of this `pullgate` (as a shell's 126).
pub const EXIT_CANNOT_EXEC: i32 = 126;
/// Environment variable `pullgate` sets when it becomes `pullgated`: its version.
const EXEC_MARK: &str = "PULLGATE_EXEC_VERSION";

/// In `pullgated`: refuses to run for a `pullgate` of another version (an upgrade that replaced
/// one binary of the two); the mark is not passed on. Returns the exit code when refusing.
fn check_exec_mark() -> Option<i32> {
    let mark = std::env::var_os(EXEC_MARK)?;
    // (At start, before the runtime or any other thread exists.)
    std::env::remove_var(EXEC_MARK);
    (mark != env!("CARGO_PKG_VERSION")).then(|| {
        eprintln!("pullgate: pullgate {} ran {DAEMON_BINARY} {}: install both binaries of one build", mark.to_string_lossy(), env!("CARGO_PKG_VERSION"));
        EXIT_CANNOT_EXEC
    })
}

/// `pullgated`'s entry: runs the parsed command, any of them; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    if let Some(code) = check_exec_mark() {
        return code;
    }
    let rt = match runtime(matches!(cli.command, Command::Serve { .. })) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match cli.command {
        Command::Serve { config } => {
            let cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("pullgate: {e}");
                    return EXIT_USAGE;
                }
            };
            init_logging(&cfg.daemon.log_level, cfg.daemon.log_format);
            match rt.block_on(crate::daemon::serve(cfg)) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!(error = %e, "pullgate stopped");
                    eprintln!("pullgate: {e}");
                    EXIT_FAILURE
                }
            }
        }
        Command::Doctor(a) => rt.block_on(doctor(&cli.address, a)),
        Command::ContainerdConfig(a) => containerd_config(a),
        other => rt.block_on(run_client(&cli.address, other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_levels_scope_to_pullgate() {
        assert_eq!(log_filter("debug"), "warn,pullgate=debug");
        assert_eq!(log_filter("info,h2=trace"), "info,h2=trace");
    }

    #[test]
    fn progress_lines() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        let b = proto::BlobProgress { digest: format!("sha256:{}", "ab".repeat(32)), state: "downloading".into(), offset: 1024 * 1024, total: 4 * 1024 * 1024 };
        assert_eq!(progress_line(&b), format!("sha256:abababababab: downloading |{}{}| 1.0 MiB/4.0 MiB", "+".repeat(10), "-".repeat(30)));
    }

    #[test]
    fn contract_parses() {
        let c = Cli::try_parse_from(["pullgate", "pull", "-n", "b", "--principal", "p", "--user", "u:p", "--plain-http", "--hosts-dir", "/d", "--platform", "linux/arm64", "--address", "/s", "reg.io/a:v1"]).unwrap();
        assert!(matches!(c.command, Command::Pull { .. }));
        assert_eq!(c.address, PathBuf::from("/s"));
        // ctr's habit: the address before the subcommand.
        let c = Cli::try_parse_from(["pullgate", "-a", "/t", "grants", "-n", "x"]).unwrap();
        assert_eq!(c.address, PathBuf::from("/t"));
        // One credential: a token from standard input excludes --user and the other token.
        for ok in [["pullgate", "pull", "--identity-token-stdin", "reg.io/a"], ["pullgate", "verify", "--registry-token-stdin", "reg.io/a"]] {
            assert!(Cli::try_parse_from(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            vec!["pullgate", "pull", "--identity-token-stdin", "--user", "u:p", "reg.io/a"],
            vec!["pullgate", "pull", "--registry-token-stdin", "--user", "u", "reg.io/a"],
            vec!["pullgate", "verify", "--identity-token-stdin", "--registry-token-stdin", "reg.io/a"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
        for args in [
            vec!["pullgate", "verify", "reg.io/a"],
            vec!["pullgate", "check", "-n", "x", "--principal", "p", "reg.io/a"],
            vec!["pullgate", "grants", "-n", "x"],
            vec!["pullgate", "grants", "-n", "x", "-o", "json"],
            vec!["pullgate", "check", "--output", "json", "reg.io/a"],
            vec!["pullgate", "revoke", "-n", "x", "--principal", "p", "reg.io/a"],
            vec!["pullgate", "revoke", "-n", "x"],
            vec!["pullgate", "inspect", "reg.io/a:v1"],
            vec!["pullgate", "inspect", "-o", "json", "reg.io/a:v1"],
            vec!["pullgate", "pull", "-q", "reg.io/a:v1"],
            vec!["pullgate", "pull", "--quiet", "reg.io/a:v1"],
            vec!["pullgate", "serve", "--config", "/etc/x.toml"],
            vec!["pullgate", "doctor"],
            vec!["pullgate", "-a", "/a.sock", "doctor", "--config", "/p.toml", "--containerd-config", "/c.toml", "--containerd-address", "/c.sock", "--registries", "-o", "json"],
            vec!["pullgate", "containerd-config"],
            vec!["pullgate", "containerd-config", "--file", "/c.toml", "-c", "/p.toml", "--containerd", "2.x", "--content-sharing", "isolated", "--platform", "linux/arm64", "--dry-run"],
            vec!["pullgate", "containerd-config", "--file", "/c.toml", "--undo", "--force"],
        ] {
            Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
        assert!(Cli::try_parse_from(["pullgate", "grants", "-o", "yaml"]).is_err());
        for bad in [
            vec!["pullgate", "containerd-config", "--containerd", "3.x"],
            vec!["pullgate", "containerd-config", "--undo", "--dry-run"],
            vec!["pullgate", "containerd-config", "--force"],
            vec!["pullgate", "containerd-config", "--undo", "--content-sharing", "shared"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn containerd_config_exit_codes() {
        use crate::containerd_config::ContainerdConfigError as E;
        let p = PathBuf::from("/c.toml");
        let io = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        for (e, code) in [
            (E::Conflict { path: p.clone(), conflicts: vec![] }, EXIT_USAGE),
            (E::Version { path: p.clone(), reason: String::new() }, EXIT_USAGE),
            (E::Shape { path: p.clone(), key: String::new(), reason: String::new() }, EXIT_USAGE),
            (E::Platform(String::new()), EXIT_USAGE),
            (E::Missing { path: p.clone() }, EXIT_NOT_FOUND),
            (E::NoBackup { path: p.clone(), mark: p.clone() }, EXIT_NOT_FOUND),
            (E::Edited { path: p.clone(), backup: p.clone() }, EXIT_FAILURE),
            (E::BackupExists { backup: p.clone(), mark: p.clone() }, EXIT_FAILURE),
            (E::Read { path: p.clone(), source: io() }, EXIT_FAILURE),
            (E::Write { path: p.clone(), source: io() }, EXIT_FAILURE),
        ] {
            assert_eq!(containerd_config_exit_code(&e), code, "{e}");
        }
        let parse = "[".parse::<toml_edit::DocumentMut>().unwrap_err();
        assert_eq!(containerd_config_exit_code(&E::Parse { path: p, source: Box::new(parse) }), EXIT_USAGE);
    }
}

//! cri: a small CRI v1 client for pullgate's tests. A TEST TOOL, not part of pullgate.
//!
//! It plays kubelet's part against containerd's CRI plugin, one call at a time, where a test
//! needs a request crictl and kubelet would not send as it is written. Every request is written as JSON in k8s-cri's serde
//! field names (snake_case, enums as integers); fields the JSON omits take their protobuf
//! defaults, at any depth.
//!
//!   cri --socket SOCK [--timeout SECS] METHOD [JSON|-]
//!       One unary call of runtime.v1.RuntimeService or runtime.v1.ImageService, e.g. Version,
//!       RunPodSandbox, CreateContainer, ExecSync, PullImage, ImageFsInfo. JSON defaults to {}
//!       (`-`: read it from stdin). Prints the response as one line of JSON (ExecSync's stdout
//!       and stderr as UTF-8 strings, lossily, instead of arrays of bytes); exit 0.
//!   cri --socket SOCK events --count N [--fresh] [JSON]
//!       GetContainerEvents (containerd 1.7+; 1.6 answers Unimplemented): prints N events as
//!       JSON lines, then exit 0. containerd queues events from its start for whoever
//!       subscribes first, so the first events are old ones: --fresh skips events whose
//!       created_at is before this command started.
//!   cri --socket SOCK raw /full.Service/Method
//!       Sends an empty message to any method path; prints `bytes=N` (the response's size).
//!   --pod NAME:NAMESPACE:UID [--log-dir DIR]
//!       For RunPodSandbox (`config`), CreateContainer and PullImage (`sandbox_config`): the
//!       pod sandbox config kubelet builds for a hostNetwork pod (log directory DIR, default
//!       /tmp/cri-logs/UID, created as kubelet does); the JSON is merged on top of it.
//!
//! A gRPC error prints `code=<Code> message=<message>` on stderr and exits 1, as do a failed
//! connection (code=Unavailable) and the --timeout (default 120 s, over the whole command;
//! code=DeadlineExceeded). Bad arguments or JSON exit 2.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};
use pullgate::cri::wire::RawCodec;
use tonic::transport::Channel;
use tonic::{Code, Status};

#[derive(Parser)]
#[command(name = "cri", about = "CRI v1 test client (pullgate tests)")]
struct Args {
    /// containerd's (CRI's) unix socket
    #[arg(long)]
    socket: String,
    /// seconds the whole command may take
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// NAME:NAMESPACE:UID: fill the pod sandbox config as kubelet does for a hostNetwork pod
    #[arg(long)]
    pod: Option<String>,
    /// the pod's log directory (with --pod); default /tmp/cri-logs/UID
    #[arg(long)]
    log_dir: Option<String>,
    /// events: how many events to print
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// events: skip events created before this command started (containerd's backlog)
    #[arg(long)]
    fresh: bool,
    /// a CRI v1 method name (Version, RunPodSandbox, ...), `events` or `raw`
    method: String,
    /// the request as JSON (`-`: stdin; default {}), or raw's method path
    arg: Option<String>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let secs = args.timeout;
    let code = match tokio::time::timeout(Duration::from_secs(secs), run(args)).await {
        Ok(Ok(())) => 0,
        Ok(Err(Failure::Usage(m))) => {
            eprintln!("cri: {m}");
            2
        }
        Ok(Err(Failure::Grpc(s))) => {
            eprintln!("code={:?} message={}", s.code(), s.message());
            1
        }
        Err(_) => {
            eprintln!("code=DeadlineExceeded message=cri: no answer within {secs} s");
            1
        }
    };
    std::process::exit(code);
}

enum Failure {
    Usage(String),
    Grpc(Status),
}
impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure::Grpc(s)
    }
}

async fn run(args: Args) -> Result<(), Failure> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    let channel = containerd_client::connect(&args.socket)
        .await
        .map_err(|e| Status::unavailable(format!("cannot connect to {}: {e:?}", args.socket)))?;
    match args.method.as_str() {
        "raw" => {
            let path = args.arg.as_deref().ok_or_else(|| Failure::Usage("raw needs a method path".into()))?;
            let n = raw_call(channel, path).await?;
            println!("bytes={n}");
            return Ok(());
        }
        "events" | "GetContainerEvents" => {
            let req: GetEventsRequest = request(&args, None)?;
            let mut rt = RuntimeServiceClient::new(channel);
            let mut stream = rt.get_container_events(req).await?.into_inner();
            let mut printed = 0;
            while printed < args.count {
                match stream.message().await? {
                    Some(ev) if args.fresh && ev.created_at < started => {}
                    Some(ev) => {
                        println!("{}", serde_json::to_string(&ev).unwrap());
                        printed += 1;
                    }
                    None => return Err(Status::aborted("event stream ended early").into()),
                }
            }
            return Ok(());
        }
        _ => {}
    }

    let mut rt = RuntimeServiceClient::new(channel.clone());
    let mut im = ImageServiceClient::new(channel);
    // unary!(client, "Method" => method_fn(RequestType) [fills the pod config into "field"])
    macro_rules! unary {
        ($($client:ident, $name:literal => $call:ident($req:ty) $(pod $field:literal)?;)*) => {
            match args.method.as_str() {
                $($name => {
                    #[allow(unused_mut, unused_assignments)]
                    let mut pod_field: Option<&str> = None;
                    $(pod_field = Some($field);)?
                    let req: $req = request(&args, pod_field)?;
                    serde_json::to_value($client.$call(req).await?.into_inner()).unwrap()
                })*
                other => return Err(Failure::Usage(format!("unknown method {other}"))),
            }
        };
    }
    let mut out = unary! {
        rt, "Version" => version(VersionRequest);
        rt, "RunPodSandbox" => run_pod_sandbox(RunPodSandboxRequest) pod "config";
        rt, "StopPodSandbox" => stop_pod_sandbox(StopPodSandboxRequest);
        rt, "RemovePodSandbox" => remove_pod_sandbox(RemovePodSandboxRequest);
        rt, "PodSandboxStatus" => pod_sandbox_status(PodSandboxStatusRequest);
        rt, "ListPodSandbox" => list_pod_sandbox(ListPodSandboxRequest);
        rt, "CreateContainer" => create_container(CreateContainerRequest) pod "sandbox_config";
        rt, "StartContainer" => start_container(StartContainerRequest);
        rt, "StopContainer" => stop_container(StopContainerRequest);
        rt, "RemoveContainer" => remove_container(RemoveContainerRequest);
        rt, "ListContainers" => list_containers(ListContainersRequest);
        rt, "ContainerStatus" => container_status(ContainerStatusRequest);
        rt, "UpdateContainerResources" => update_container_resources(UpdateContainerResourcesRequest);
        rt, "ReopenContainerLog" => reopen_container_log(ReopenContainerLogRequest);
        rt, "ExecSync" => exec_sync(ExecSyncRequest);
        rt, "Exec" => exec(ExecRequest);
        rt, "Attach" => attach(AttachRequest);
        rt, "PortForward" => port_forward(PortForwardRequest);
        rt, "ContainerStats" => container_stats(ContainerStatsRequest);
        rt, "ListContainerStats" => list_container_stats(ListContainerStatsRequest);
        rt, "PodSandboxStats" => pod_sandbox_stats(PodSandboxStatsRequest);
        rt, "ListPodSandboxStats" => list_pod_sandbox_stats(ListPodSandboxStatsRequest);
        rt, "UpdateRuntimeConfig" => update_runtime_config(UpdateRuntimeConfigRequest);
        rt, "Status" => status(StatusRequest);
        rt, "CheckpointContainer" => checkpoint_container(CheckpointContainerRequest);
        rt, "ListMetricDescriptors" => list_metric_descriptors(ListMetricDescriptorsRequest);
        rt, "ListPodSandboxMetrics" => list_pod_sandbox_metrics(ListPodSandboxMetricsRequest);
        rt, "RuntimeConfig" => runtime_config(RuntimeConfigRequest);
        im, "ListImages" => list_images(ListImagesRequest);
        im, "ImageStatus" => image_status(ImageStatusRequest);
        im, "PullImage" => pull_image(PullImageRequest) pod "sandbox_config";
        im, "RemoveImage" => remove_image(RemoveImageRequest);
        im, "ImageFsInfo" => image_fs_info(ImageFsInfoRequest);
    };
    if args.method == "ExecSync" {
        for k in ["stdout", "stderr"] {
            if let Some(Value::Array(a)) = out.get(k) {
                let b: Vec<u8> = a.iter().map(|x| x.as_u64().unwrap_or(0) as u8).collect();
                out[k] = Value::String(String::from_utf8_lossy(&b).into_owned());
            }
        }
    }
    println!("{out}");
    Ok(())
}

/// The request: the pod config (with --pod and a pod field), the user's JSON merged on top,
/// then deserialized with defaults for whatever is left out.
fn request<T: DeserializeOwned>(args: &Args, pod_field: Option<&str>) -> Result<T, Failure> {
    let text = match args.arg.as_deref() {
        None => "{}".to_string(),
        Some("-") => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map_err(|e| Failure::Usage(format!("stdin: {e}")))?;
            s
        }
        Some(s) => s.to_string(),
    };
    let user: Value = serde_json::from_str(&text).map_err(|e| Failure::Usage(format!("request JSON: {e}")))?;
    let mut v = json!({});
    if let Some(pod) = &args.pod {
        let field = pod_field.ok_or_else(|| Failure::Usage(format!("--pod does not apply to {}", args.method)))?;
        v[field] = pod_config(pod, args.log_dir.as_deref())?;
    }
    merge(&mut v, user);
    T::deserialize(Filled(Some(v))).map_err(|e| Failure::Usage(format!("request for {}: {e}", args.method)))
}

/// PodSandboxConfig as kubelet builds it for a hostNetwork pod (generatePodSandboxConfig):
/// no hostname, network NODE, pid CONTAINER, ipc POD, seccomp Unconfined, the pod labels.
fn pod_config(spec: &str, log_dir: Option<&str>) -> Result<Value, Failure> {
    let parts: Vec<&str> = spec.split(':').collect();
    let [name, namespace, uid] = parts[..] else {
        return Err(Failure::Usage(format!("--pod wants NAME:NAMESPACE:UID, got {spec}")));
    };
    let log_dir = log_dir.map(str::to_string).unwrap_or_else(|| format!("/tmp/cri-logs/{uid}"));
    std::fs::create_dir_all(&log_dir).map_err(|e| Failure::Usage(format!("log dir {log_dir}: {e}")))?;
    Ok(json!({
        "metadata": {"name": name, "uid": uid, "namespace": namespace, "attempt": 0},
        "hostname": "",
        "log_directory": log_dir,
        "dns_config": {},
        "labels": {
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.uid": uid,
        },
        "annotations": {},
        "linux": {
            "security_context": {
                "namespace_options": {
                    "network": NamespaceMode::Node as i32,
                    "pid": NamespaceMode::Container as i32,
                    "ipc": NamespaceMode::Pod as i32,
                },
                "seccomp": {"profile_type": security_profile::ProfileType::Unconfined as i32},
            },
        },
    }))
}

/// Deep merge: objects merge key by key, anything else in `top` replaces what `base` has.
fn merge(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, v) in t {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, t) => *b = t,
    }
}

/// A Deserializer over a JSON value that may be missing (None): a missing (or null) value
/// deserializes as its type's default (0, "", false, empty list/map, None, a struct of
/// defaults), at any depth, so partial JSON fills prost messages whose serde derives have no
/// #[serde(default)]. An object key that is not a field of its message is an error (a typo
/// must not silently become a default).
struct Filled(Option<Value>);

macro_rules! scalar {
    ($($method:ident => $visit:ident($val:expr);)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            match self.0 {
                None | Some(Value::Null) => visitor.$visit($val),
                Some(v) => v.$method(visitor),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Filled {
    type Error = serde_json::Error;

    scalar! {
        deserialize_bool => visit_bool(false);
        deserialize_i8 => visit_i64(0); deserialize_i16 => visit_i64(0);
        deserialize_i32 => visit_i64(0); deserialize_i64 => visit_i64(0);
        deserialize_u8 => visit_u64(0); deserialize_u16 => visit_u64(0);
        deserialize_u32 => visit_u64(0); deserialize_u64 => visit_u64(0);
        deserialize_f32 => visit_f64(0.0); deserialize_f64 => visit_f64(0.0);
        deserialize_char => visit_char('\0');
        deserialize_str => visit_str(""); deserialize_string => visit_str("");
        deserialize_bytes => visit_bytes(&[]); deserialize_byte_buf => visit_bytes(&[]);
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            None => visitor.visit_unit(),
            Some(v) => v.deserialize_any(visitor),
        }
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            None | Some(Value::Null) => visitor.visit_none(),
            Some(v) => visitor.visit_some(Filled(Some(v))),
        }
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            None | Some(Value::Null) => visitor.visit_seq(Items(Vec::new().into_iter())),
            Some(Value::Array(a)) => visitor.visit_seq(Items(a.into_iter())),
            Some(v) => v.deserialize_seq(visitor),
        }
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            None | Some(Value::Null) => visitor.visit_map(Entries::new(Vec::new())),
            Some(Value::Object(m)) => visitor.visit_map(Entries::new(m.into_iter().map(|(k, v)| (k, Some(v))).collect())),
            Some(v) => v.deserialize_map(visitor),
        }
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let given = match self.0 {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(v) => return v.deserialize_struct(name, fields, visitor),
        };
        if let Some(k) = given.keys().find(|k| !fields.contains(&k.as_str())) {
            return Err(de::Error::custom(format!("unknown field `{k}` in {name}, expected one of {fields:?}")));
        }
        let mut entries: Vec<(String, Option<Value>)> = given.into_iter().map(|(k, v)| (k, Some(v))).collect();
        for f in fields {
            if !entries.iter().any(|(k, _)| k == f) {
                entries.push((f.to_string(), None));
            }
        }
        visitor.visit_map(Entries::new(entries))
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(self, _n: &'static str, _len: usize, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _n: &'static str, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(self, _n: &'static str, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Some(v) => v.deserialize_enum(name, variants, visitor),
            None => Err(de::Error::custom(format!("{name} needs a value"))),
        }
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_string(visitor)
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }
}

struct Items(std::vec::IntoIter<Value>);
impl<'de> SeqAccess<'de> for Items {
    type Error = serde_json::Error;
    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Self::Error> {
        self.0.next().map(|v| seed.deserialize(Filled(Some(v)))).transpose()
    }
}

struct Entries {
    rest: std::vec::IntoIter<(String, Option<Value>)>,
    value: Option<Option<Value>>,
}
impl Entries {
    fn new(v: Vec<(String, Option<Value>)>) -> Self {
        Entries { rest: v.into_iter(), value: None }
    }
}
impl<'de> MapAccess<'de> for Entries {
    type Error = serde_json::Error;
    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Self::Error> {
        match self.rest.next() {
            None => Ok(None),
            Some((k, v)) => {
                self.value = Some(v);
                seed.deserialize(k.into_deserializer()).map(Some)
            }
        }
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Self::Error> {
        seed.deserialize(Filled(self.value.take().flatten()))
    }
}

/// `raw`: one unary call of any method path with an empty message, through a passthrough codec.
async fn raw_call(channel: Channel, path: &str) -> Result<usize, Failure> {
    let path = tonic::codegen::http::uri::PathAndQuery::try_from(path)
        .map_err(|e| Failure::Usage(format!("method path {path}: {e}")))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| Status::new(Code::Unavailable, format!("not ready: {e}")))?;
    let resp = grpc.unary(tonic::Request::new(Bytes::new()), path, RawCodec).await?;
    Ok(resp.into_inner().len())
}

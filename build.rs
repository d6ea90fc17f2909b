//! Generates the server side of containerd's Snapshots gRPC service over containerd-client's
//! message types (containerd-client ships client stubs only), so no .proto copy is needed.
fn main() {
    const M: &str = "containerd_client::services::v1::snapshots";
    let rpc = |name: &str, route: &str, input: &str, output: &str| {
        let ty = |t: &str| if t == "()" { "crate::snapshotter::rpc::Empty".to_string() } else { format!("{M}::{t}") };
        tonic_build::manual::Method::builder()
            .name(name)
            .route_name(route)
            .input_type(ty(input))
            .output_type(ty(output))
            .codec_path("tonic_prost::ProstCodec")
    };
    let service = tonic_build::manual::Service::builder()
        .name("Snapshots")
        .package("containerd.services.snapshots.v1")
        .method(rpc("prepare", "Prepare", "PrepareSnapshotRequest", "PrepareSnapshotResponse").build())
        .method(rpc("view", "View", "ViewSnapshotRequest", "ViewSnapshotResponse").build())
        .method(rpc("mounts", "Mounts", "MountsRequest", "MountsResponse").build())
        .method(rpc("commit", "Commit", "CommitSnapshotRequest", "()").build())
        .method(rpc("remove", "Remove", "RemoveSnapshotRequest", "()").build())
        .method(rpc("stat", "Stat", "StatSnapshotRequest", "StatSnapshotResponse").build())
        .method(rpc("update", "Update", "UpdateSnapshotRequest", "UpdateSnapshotResponse").build())
        .method(rpc("list", "List", "ListSnapshotsRequest", "ListSnapshotsResponse").server_streaming().build())
        .method(rpc("usage", "Usage", "UsageRequest", "UsageResponse").build())
        .method(rpc("cleanup", "Cleanup", "CleanupRequest", "()").build())
        .build();
    tonic_build::manual::Builder::new()
        .build_client(false)
        .compile(&[service]);

    // pullgate's own API.
    println!("cargo:rerun-if-changed=proto/pullgate.proto");
    if let Err(e) = tonic_prost_build::configure().compile_protos(&["proto/pullgate.proto"], &["proto"]) {
        panic!("compiling proto/pullgate.proto: {e}");
    }
}

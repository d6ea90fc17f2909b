//! snapfill: fills a containerd snapshotter with committed snapshots for pullgate's Walk
//! benchmark (`bench/walk.sh`). A TEST TOOL, not part of pullgate.
//!
//!   snapfill SOCKET SNAPSHOTTER NAMESPACE FROM TO LABELS LABEL_BYTES
//!       Through containerd's Snapshots service at SOCKET (so that containerd's metadata holds
//!       them): for i in FROM..TO, Prepare then Commit of a snapshot with no parent, committed as
//!       `fill-<i>` with the label `containerd.io/gc.root` (containerd's GC keeps it; the
//!       active snapshot before it carries it too) and
//!       LABELS labels `containerd.io/snapshot/fill.<j>` (which reach the snapshotter) of
//!       LABEL_BYTES bytes each. Eight requests at a time. Prints the time taken; exit 1 on
//!       the first error.
use containerd_client::services::v1::snapshots::{snapshots_client::SnapshotsClient, CommitSnapshotRequest, PrepareSnapshotRequest};
use std::collections::HashMap;
use tonic::Request;

const AT_ONCE: usize = 8;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn req<T>(msg: T, ns: &str) -> Result<Request<T>, Error> {
    let mut r = Request::new(msg);
    r.metadata_mut().insert("containerd-namespace", ns.parse()?);
    Ok(r)
}

async fn one(client: &mut SnapshotsClient<tonic::transport::Channel>, sn: &str, ns: &str, i: usize, labels: &HashMap<String, String>) -> Result<(), Error> {
    let key = format!("fill-{i}-active");
    // The active snapshot is a GC root too: containerd's collector removes an unleased one.
    let root = HashMap::from([("containerd.io/gc.root".to_string(), "1".to_string())]);
    client.prepare(req(PrepareSnapshotRequest { snapshotter: sn.into(), key: key.clone(), parent: String::new(), labels: root }, ns)?).await?;
    let mut l = labels.clone();
    l.insert("containerd.io/gc.root".into(), "1".into());
    client.commit(req(CommitSnapshotRequest { snapshotter: sn.into(), name: format!("fill-{i}"), key, labels: l, ..Default::default() }, ns)?).await?;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 8 {
        eprintln!("usage: snapfill SOCKET SNAPSHOTTER NAMESPACE FROM TO LABELS LABEL_BYTES");
        std::process::exit(2);
    }
    let n: Vec<usize> = a[4..].iter().filter_map(|x| x.parse().ok()).collect();
    let [from, count, nlabels, bytes] = n[..] else {
        eprintln!("FROM, TO, LABELS and LABEL_BYTES are numbers");
        std::process::exit(2);
    };
    let labels: HashMap<String, String> = (0..nlabels).map(|j| (format!("containerd.io/snapshot/fill.{j}"), "x".repeat(bytes))).collect();
    let t = std::time::Instant::now();
    let run = async {
        let channel = containerd_client::connect(&a[1]).await?;
        let mut tasks = Vec::new();
        for w in 0..AT_ONCE {
            let mut client = SnapshotsClient::new(channel.clone());
            let (sn, ns, labels) = (a[2].clone(), a[3].clone(), labels.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = from + w;
                while i < count {
                    one(&mut client, &sn, &ns, i, &labels).await?;
                    i += AT_ONCE;
                }
                Ok::<(), Error>(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        Ok::<(), Error>(())
    };
    if let Err(e) = run.await {
        eprintln!("snapfill: {e}");
        std::process::exit(1);
    }
    println!("{} snapshots in {:.1} s", count.saturating_sub(from), t.elapsed().as_secs_f64());
}

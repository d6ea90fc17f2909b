//! progress: what one pull is doing to each of its blobs, for `pullgate pull` on a terminal.
//! A pull request may carry a [`Progress`] handle; the registry session marks a blob
//! downloading when its GET starts, counts its bytes as they stream and marks it done once
//! they all arrived and matched the digest. The API streams snapshots of the table to the CLI,
//! which draws them as `ctr images pull` does. Digests and sizes only: nothing secret.
use std::sync::{Arc, Mutex, MutexGuard};

/// A blob's state, as `ctr images pull` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Listed by the manifest; not (yet) being downloaded.
    Waiting,
    Downloading,
    /// Downloaded and checked against its digest.
    Done,
    /// Not downloaded: already on the node, or vouched for by the registry without a download.
    Exists,
    /// Copied from another namespace's content on the node (an isolated content store).
    Copied,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Downloading => "downloading",
            State::Done => "done",
            State::Exists => "exists",
            State::Copied => "copied",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub digest: String,
    pub total: u64,
    pub offset: u64,
    pub state: State,
}

#[derive(Debug, Default)]
struct Table {
    blobs: Vec<Entry>,
    /// Bumped on every change, so a reader sends only what changed.
    version: u64,
}

/// One pull's blobs, in the manifest's order (config first); shared by the pull and the API.
#[derive(Debug, Default)]
pub struct Progress {
    table: Mutex<Table>,
}

impl Progress {
    pub fn new() -> Arc<Progress> {
        Arc::new(Progress::default())
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, digest: &str, total: u64, f: impl FnOnce(&mut Entry)) {
        let mut t = self.lock();
        let i = match t.blobs.iter().position(|e| e.digest == digest) {
            Some(i) => i,
            None => {
                t.blobs.push(Entry { digest: digest.to_string(), total, offset: 0, state: State::Waiting });
                t.blobs.len() - 1
            }
        };
        f(&mut t.blobs[i]);
        t.version += 1;
    }

    /// The image's blobs (digest, size), all waiting, in order.
    pub fn announce<'a>(&self, blobs: impl IntoIterator<Item = (&'a str, u64)>) {
        for (d, size) in blobs {
            self.update(d, size, |_| {});
        }
    }

    /// A download of the blob starts (again, after a failed try).
    pub fn start(&self, digest: &str, total: u64) {
        self.update(digest, total, |e| {
            e.state = State::Downloading;
            e.offset = 0;
            e.total = total;
        });
    }

    pub fn advance(&self, digest: &str, bytes: u64) {
        self.update(digest, 0, |e| e.offset = e.offset.saturating_add(bytes).min(e.total.max(e.offset)));
    }

    pub fn finish(&self, digest: &str) {
        self.update(digest, 0, |e| {
            e.state = State::Done;
            e.offset = e.total;
        });
    }

    /// The blob was copied into the namespace from another namespace's content on the node.
    pub fn copied(&self, digest: &str) {
        self.update(digest, 0, |e| {
            e.state = State::Copied;
            e.offset = e.total;
        });
    }

    /// The pull finished: what was never downloaded was there already.
    pub fn settle(&self) {
        let mut t = self.lock();
        for e in t.blobs.iter_mut().filter(|e| e.state == State::Waiting) {
            e.state = State::Exists;
            e.offset = e.total;
        }
        t.version += 1;
    }

    /// The table's version and content.
    pub fn snapshot(&self) -> (u64, Vec<Entry>) {
        let t = self.lock();
        (t.version, t.blobs.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_the_pull() {
        let p = Progress::new();
        p.announce([("sha256:c", 10), ("sha256:l1", 100), ("sha256:l2", 50)]);
        p.start("sha256:l1", 100);
        p.advance("sha256:l1", 60);
        let (v1, t) = p.snapshot();
        assert_eq!(t.iter().map(|e| e.state).collect::<Vec<_>>(), [State::Waiting, State::Downloading, State::Waiting]);
        assert_eq!(t[1].offset, 60);
        p.advance("sha256:l1", 1000);
        assert_eq!(p.snapshot().1[1].offset, 100, "never past the size");
        p.finish("sha256:l1");
        p.settle();
        let (v2, t) = p.snapshot();
        assert!(v2 > v1);
        assert_eq!(t.iter().map(|e| e.state).collect::<Vec<_>>(), [State::Exists, State::Done, State::Exists]);
        assert!(t.iter().all(|e| e.offset == e.total));
    }
}

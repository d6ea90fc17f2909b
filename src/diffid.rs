//! diffid: the only place where a layer blob's layer ID (diffID: the sha256 of its
//! uncompressed tar) becomes a fact pullgate believes. A [`Hasher`] is fed the blob's bytes as
//! they stream past (from the origin registry, or read back from containerd's content store),
//! checks them against the blob's own digest, decompresses them as containerd's applier does
//! (gzip or zstd recognised by their magic bytes, anything else taken as a plain tar) and hashes
//! the result. Only a finished `Hasher` makes a [`Verified`] pairing, and only a `Verified`
//! pairing can be written to the ledger: what an image config lists in `rootfs.diff_ids` stays
//! a claim until it matches one.
use sha2::{Digest as _, Sha256};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A layer may expand to at most this many times the compressed bytes that have arrived so far
/// (gzip's best ratio is about 1032:1), or to [`MIN_EXPANSION_LIMIT`], whichever is larger, and
/// never past [`MAX_LAYER_SIZE`]: a decompression bomb is refused after work bounded by what
/// its sender actually sent, whatever size its manifest declares.
pub const MAX_EXPANSION_RATIO: u64 = 1100;
pub const MIN_EXPANSION_LIMIT: u64 = 1 << 30;
/// The largest uncompressed layer pullgate hashes (64 GiB).
pub const MAX_LAYER_SIZE: u64 = 64 << 30;
/// The most a pull's layers may expand to together (1 TiB).
pub const MAX_IMAGE_SIZE: u64 = 1 << 40;

/// What the layers of one pull may expand to together: the same rule over the sum of what
/// arrived for all of them (a floor per layer alone would let an image of many small bombs
/// expand by 1 GiB each), shared by the pull's [`Hasher`]s.
#[derive(Debug, Default)]
pub struct Budget {
    received: AtomicU64,
    written: AtomicU64,
}

/// How far a layer (`cap` [`MAX_LAYER_SIZE`]) or a pull's layers together (`cap`
/// [`MAX_IMAGE_SIZE`]) may have expanded once `received` compressed bytes arrived.
fn expansion_limit(received: u64, cap: u64) -> u64 {
    received.saturating_mul(MAX_EXPANSION_RATIO).clamp(MIN_EXPANSION_LIMIT, cap)
}

#[derive(Debug, thiserror::Error)]
pub enum DiffIdError {
    #[error("blob {blob}: expands to more than {limit} bytes after {received} bytes of it arrived (at most {MAX_EXPANSION_RATIO} times what arrived, 1 GiB at least, {MAX_LAYER_SIZE} bytes in all): refused as a decompression bomb")]
    TooLarge { blob: String, limit: u64, received: u64 },
    #[error("blob {blob}: the image's layers expand to more than {limit} bytes together after {received} bytes of them arrived (at most {MAX_EXPANSION_RATIO} times what arrived, 1 GiB at least, {MAX_IMAGE_SIZE} bytes in all): refused as a decompression bomb")]
    ImageTooLarge { blob: String, limit: u64, received: u64 },
    #[error("blob {blob}: its bytes hash to {actual}, not to its digest")]
    DigestMismatch { blob: String, actual: String },
    #[error("blob {blob}: cannot decompress it as a layer: {reason}")]
    Corrupt { blob: String, reason: String },
}

/// A blob digest and the layer ID pullgate computed from that blob's bytes. Its fields are
/// private: nothing outside this module can make one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    blob: String,
    diff_id: String,
}

impl Verified {
    pub fn blob(&self) -> &str {
        &self.blob
    }
    pub fn diff_id(&self) -> &str {
        &self.diff_id
    }
    /// A pairing for unit tests of the ledger and the gate, which have no blob bytes.
    #[cfg(test)]
    pub fn for_test(blob: &str, diff_id: &str) -> Verified {
        Verified { blob: blob.into(), diff_id: diff_id.into() }
    }
}

/// Sha256 of everything written to it, up to the expansion limit of the compressed bytes
/// received so far (counted by the [`Hasher`] before it feeds them to the decompressor).
struct HashWriter {
    sha: Sha256,
    written: u64,
    received: Arc<AtomicU64>,
    budget: Arc<Budget>,
}

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written += buf.len() as u64;
        if self.written > expansion_limit(self.received.load(Ordering::Relaxed), MAX_LAYER_SIZE) {
            return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, "layer expands past its limit"));
        }
        let together = self.budget.written.fetch_add(buf.len() as u64, Ordering::Relaxed) + buf.len() as u64;
        if together > expansion_limit(self.budget.received.load(Ordering::Relaxed), MAX_IMAGE_SIZE) {
            return Err(std::io::Error::new(std::io::ErrorKind::QuotaExceeded, "the image's layers expand past their limit"));
        }
        self.sha.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Sink {
    /// Fewer than 4 bytes seen: the compression is not known yet.
    Sniffing(Vec<u8>),
    Plain(HashWriter),
    Gzip(Box<flate2::write::MultiGzDecoder<HashWriter>>),
    Zstd(Box<zstd::stream::write::Decoder<'static, HashWriter>>),
}

const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Streams one layer blob into its layer ID.
pub struct Hasher {
    blob: String,
    compressed: Sha256,
    sink: Sink,
    /// Compressed bytes fed so far (shared with the sink's [`HashWriter`]).
    received: Arc<AtomicU64>,
    /// The pull's, shared with its other layers.
    budget: Arc<Budget>,
}

impl Hasher {
    /// For blob `blob`, alone. No size a manifest declares bounds the work: only bytes that arrived.
    pub fn new(blob: &str) -> Hasher {
        Hasher::within(blob, Default::default())
    }

    /// For blob `blob`, one of the layers of a pull whose expansion `budget` bounds together.
    pub fn within(blob: &str, budget: Arc<Budget>) -> Hasher {
        Hasher { blob: blob.to_string(), compressed: Sha256::new(), sink: Sink::Sniffing(Vec::with_capacity(4)), received: Default::default(), budget }
    }

    fn corrupt(&self, e: std::io::Error) -> DiffIdError {
        if e.kind() == std::io::ErrorKind::FileTooLarge {
            let received = self.received.load(Ordering::Relaxed);
            return DiffIdError::TooLarge { blob: self.blob.clone(), limit: expansion_limit(received, MAX_LAYER_SIZE), received };
        }
        if e.kind() == std::io::ErrorKind::QuotaExceeded {
            let received = self.budget.received.load(Ordering::Relaxed);
            return DiffIdError::ImageTooLarge { blob: self.blob.clone(), limit: expansion_limit(received, MAX_IMAGE_SIZE), received };
        }
        DiffIdError::Corrupt { blob: self.blob.clone(), reason: e.to_string() }
    }

    pub fn update(&mut self, chunk: &[u8]) -> Result<(), DiffIdError> {
        self.compressed.update(chunk);
        self.received.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        self.budget.received.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        if let Sink::Sniffing(head) = &mut self.sink {
            head.extend_from_slice(chunk);
            if head.len() < ZSTD_MAGIC.len() {
                return Ok(());
            }
            let head = std::mem::take(head);
            self.start(&head)?;
            return Ok(());
        }
        self.feed(chunk)
    }

    /// Chooses the decompressor from the first bytes (as containerd's DecompressStream does)
    /// and feeds them to it.
    fn start(&mut self, head: &[u8]) -> Result<(), DiffIdError> {
        let out = HashWriter { sha: Sha256::new(), written: 0, received: self.received.clone(), budget: self.budget.clone() };
        self.sink = if head.starts_with(&GZIP_MAGIC) {
            Sink::Gzip(Box::new(flate2::write::MultiGzDecoder::new(out)))
        } else if head.starts_with(&ZSTD_MAGIC) {
            Sink::Zstd(Box::new(zstd::stream::write::Decoder::new(out).map_err(|e| self.corrupt(e))?))
        } else {
            Sink::Plain(out)
        };
        self.feed(head)
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<(), DiffIdError> {
        let r = match &mut self.sink {
            Sink::Sniffing(_) => Ok(()),
            Sink::Plain(w) => w.write_all(chunk),
            Sink::Gzip(d) => d.write_all(chunk),
            Sink::Zstd(d) => d.write_all(chunk),
        };
        r.map_err(|e| self.corrupt(e))
    }

    /// The pairing, once every byte was fed: the bytes must hash to the blob's digest and
    /// decompress completely.
    pub fn finish(mut self) -> Result<Verified, DiffIdError> {
        let actual = format!("sha256:{}", hex::encode(self.compressed.clone().finalize()));
        if actual != self.blob {
            return Err(DiffIdError::DigestMismatch { blob: self.blob, actual });
        }
        if let Sink::Sniffing(head) = &mut self.sink {
            // A blob of fewer than 4 bytes: only a plain tar can be that short.
            let head = std::mem::take(head);
            self.start(&head)?;
        }
        let sink = std::mem::replace(&mut self.sink, Sink::Sniffing(Vec::new()));
        let out = match sink {
            Sink::Sniffing(_) => unreachable!("started above"),
            Sink::Plain(w) => w,
            Sink::Gzip(d) => d.finish().map_err(|e| self.corrupt(e))?,
            Sink::Zstd(mut d) => {
                d.flush().map_err(|e| self.corrupt(e))?;
                d.into_inner()
            }
        };
        Ok(Verified { blob: self.blob, diff_id: format!("sha256:{}", hex::encode(out.sha.finalize())) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(b: &[u8]) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(b)))
    }

    fn hash_in_chunks(blob: &[u8], chunk: usize) -> Result<Verified, DiffIdError> {
        let mut h = Hasher::new(&sha(blob));
        for c in blob.chunks(chunk.max(1)) {
            h.update(c)?;
        }
        h.finish()
    }

    #[test]
    fn gzip_zstd_and_plain_layers_hash_to_their_uncompressed_digest() {
        let tar: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        let gz = gz.finish().unwrap();
        let zst = zstd::stream::encode_all(tar.as_slice(), 3).unwrap();
        for (name, blob) in [("gzip", &gz), ("zstd", &zst), ("plain", &tar)] {
            for chunk in [1, 3, 4, 5, 4096, 1 << 20] {
                let v = hash_in_chunks(blob, chunk).unwrap_or_else(|e| panic!("{name}/{chunk}: {e}"));
                assert_eq!(v.diff_id(), sha(&tar), "{name} in chunks of {chunk}");
                assert_eq!(v.blob(), sha(blob));
            }
        }
        // Two gzip members, as some tools write: the layer is both, concatenated.
        let mut two = gz.clone();
        two.extend_from_slice(&gz);
        let mut both = tar.clone();
        both.extend_from_slice(&tar);
        assert_eq!(hash_in_chunks(&two, 7000).unwrap().diff_id(), sha(&both));
        // Tiny blobs.
        assert_eq!(hash_in_chunks(b"ab", 1).unwrap().diff_id(), sha(b"ab"));
        assert_eq!(hash_in_chunks(b"", 1).unwrap().diff_id(), sha(b""));
    }

    #[test]
    fn wrong_bytes_and_broken_streams_make_no_pairing() {
        let mut h = Hasher::new(&sha(b"other"));
        h.update(b"plain tar bytes").unwrap();
        assert!(matches!(h.finish(), Err(DiffIdError::DigestMismatch { .. })));
        // A gzip stream cut short is not a layer.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&[7u8; 100_000]).unwrap();
        let gz = gz.finish().unwrap();
        let cut = &gz[..gz.len() / 2];
        assert!(matches!(hash_in_chunks(cut, 1000), Err(DiffIdError::Corrupt { .. })));
        // Garbage after the gzip magic.
        let mut bad = GZIP_MAGIC.to_vec();
        bad.extend_from_slice(&[0xff; 64]);
        assert!(matches!(hash_in_chunks(&bad, 10), Err(DiffIdError::Corrupt { .. })));
    }

    #[test]
    fn a_decompression_bomb_is_refused_after_bounded_work() {
        // 1.5 GiB of zeros in a few KB of zstd: past both 1 GiB and 1100 times its size (gzip
        // cannot do better than about 1032:1, so its bombs stay under the ratio anyway).
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 19).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..1536 {
            z.write_all(&zeros).unwrap();
        }
        let bomb = z.finish().unwrap();
        assert!((1536u64 << 20) > bomb.len() as u64 * MAX_EXPANSION_RATIO);
        let e = hash_in_chunks(&bomb, 1 << 16).unwrap_err();
        assert!(matches!(e, DiffIdError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("expands to more than"), "{e}");
    }

    /// Many small bombs in one image: each stays under the 1 GiB a layer may reach alone, and
    /// together they are refused once they pass it.
    #[test]
    fn a_pulls_layers_share_one_expansion_budget() {
        let bomb = |byte: u8| {
            let mut z = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
            let block = vec![byte; 1 << 20];
            for _ in 0..400 {
                z.write_all(&block).unwrap();
            }
            z.finish().unwrap()
        };
        let budget = Arc::new(Budget::default());
        let mut refused = None;
        for (i, b) in (1u8..=4).map(bomb).enumerate() {
            let mut h = Hasher::within(&sha(&b), budget.clone());
            if let Err(e) = b.chunks(1 << 16).try_for_each(|c| h.update(c)).and_then(|()| h.finish().map(|_| ())) {
                refused = Some((i, e));
                break;
            }
        }
        let (i, e) = refused.expect("refused");
        assert_eq!(i, 2, "the third 400 MiB layer passes 1 GiB together: {e}");
        assert!(matches!(e, DiffIdError::ImageTooLarge { .. }), "{e}");
        // Alone, each would have passed.
        assert!(hash_in_chunks(&bomb(9), 1 << 16).is_ok());
    }

    /// The limit grows with the bytes that arrived, not with a size anyone declared: a stream
    /// that keeps expanding past 1100 times what arrived is refused early, however large the
    /// manifest said its layer is.
    #[test]
    fn the_expansion_limit_follows_the_bytes_received() {
        assert_eq!(expansion_limit(0, MAX_LAYER_SIZE), MIN_EXPANSION_LIMIT);
        assert_eq!(expansion_limit(10 << 20, MAX_LAYER_SIZE), (10 << 20) * MAX_EXPANSION_RATIO);
        assert_eq!(expansion_limit(u64::MAX, MAX_LAYER_SIZE), MAX_LAYER_SIZE);
        // Zeros by the GiB in zstd (32768:1): refused soon after 1 GiB of output, long before
        // the stream's end, with how much had arrived.
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 19).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..4096 {
            z.write_all(&zeros).unwrap();
        }
        let bomb = z.finish().unwrap();
        let mut h = Hasher::new(&sha(&bomb));
        let mut fed = 0usize;
        let e = bomb.chunks(4096).find_map(|c| {
            fed += c.len();
            h.update(c).err()
        });
        let e = e.expect("refused before its end");
        assert!(fed < bomb.len(), "refused after {fed} of {} bytes", bomb.len());
        assert!(matches!(e, DiffIdError::TooLarge { received, .. } if received as usize == fed), "{e}");
    }
}

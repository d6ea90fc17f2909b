//! ledger: what pullgate knows about images, kept in the metastore's ledger collections.
//! Blob origins (which origin served a blob's bytes, to which credential identities, or
//! anonymously), manifests (config, layers, diffIDs), layers (their blobs, public flag and the
//! manifests containing them), chains (chainID -> parent chain + diffID) and grants
//! ((namespace, principal, origin, manifest) -> identity, time verified), and the pairings of
//! blob digest -> layer ID that pullgate verified itself ([`crate::diffid::Verified`]). Every
//! logical change is one write transaction made by the caller; reads take any transaction.
//!
//! The ledger enforces the trust rule itself: a manifest is recorded only if every (blob,
//! diffID) pair it lists is a verified pairing, so a layer's blobs, its public flag and which
//! origins served it all rest on bytes pullgate hashed, never on what an image config claims.
use crate::credential::ANONYMOUS;
use crate::diffid::Verified;
use crate::metastore::{key, split_key, Collection, LedgerRead, StoreError, WriteTx};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeSet;

/// A write the ledger refuses because it would rest on a claim instead of a verified fact.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("blob {blob} has no layer ID that pullgate computed itself; the claim that it is layer {claimed} is not recorded")]
    Unverified { blob: String, claimed: String },
    #[error("blob {blob} is layer {recorded} (pullgate hashed it), not {claimed}")]
    Conflict { blob: String, recorded: String, claimed: String },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlobOrigin {
    /// Credential identities that fetched the bytes from this origin ("anonymous" included).
    pub identities: BTreeSet<String>,
    /// Nanoseconds since the epoch of the last fetch.
    pub last: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ManifestRec {
    pub config: String,
    /// Compressed layer blob digests, base first.
    pub layers: Vec<String>,
    /// Uncompressed digests from the config, base first.
    pub diff_ids: Vec<String>,
    /// Up to `MANIFEST_ORIGIN_EXAMPLES` origins the manifest was fetched from (for `inspect`).
    pub origins: BTreeSet<String>,
    /// Up to `MANIFEST_NAME_EXAMPLES` references it was fetched as, each with the origin that
    /// answered: entries made by [`name_entry`] (`<origin> <host/repo:tag>`), read with
    /// [`split_name`]. For messages; look-ups by name read the `Names` table
    /// ([`manifests_named`]), which holds every name and matches the origin too, so a name
    /// fetched from elsewhere (a request's hosts.toml) never stands for the registry of that name.
    pub names: BTreeSet<String>,
}

/// How many manifests containing a layer are kept on its record (for messages and
/// `inspect`). Bounded so that a popular base layer's record stays small: the gate decides
/// membership from the granted manifests themselves.
pub const LAYER_MANIFEST_EXAMPLES: usize = 8;

/// How many names and origins a manifest's own record keeps (for messages and `inspect`).
/// Bounded so that a manifest any tenant can fetch under names of its own (a popular public
/// image, another tenant's image re-hosted) keeps a small record, read and written as often as
/// before: every name is in the `Names` table, one key each.
pub const MANIFEST_NAME_EXAMPLES: usize = 8;
pub const MANIFEST_ORIGIN_EXAMPLES: usize = 8;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LayerRec {
    pub blobs: BTreeSet<String>,
    pub public: bool,
    /// Up to `LAYER_MANIFEST_EXAMPLES` manifests containing the layer.
    pub manifests: BTreeSet<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChainRec {
    pub parent: String,
    pub diff_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub identity: String,
    pub verified_at: i64,
    /// The granted manifest's layers (diffIDs, as raw sha256), copied when the grant is
    /// written so that a decision reads one namespace's grants and nothing else per grant: a
    /// manifest's layers never change. Raw bytes keep a grant's decoding to a few allocations.
    /// Empty in grants written before this field existed, and when a diffID is not sha256:
    /// the gate then reads the manifest.
    #[serde(default, with = "layer_bytes")]
    pub layers: Vec<[u8; 32]>,
    /// For each of `layers`: whether the grant's origin had already served one of the layer's
    /// blobs when the grant was written. Origins only ever gain blobs, so `true` stays true;
    /// `false` is checked again in the ledger.
    #[serde(default)]
    pub served: Vec<bool>,
}

/// A grant as versions before 2026-12-02 wrote it (`ledger_grants`): the layers as a list of
/// 32-byte arrays. Read only by `upgrade`.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct GrantV1 {
    identity: String,
    verified_at: i64,
    #[serde(default)]
    layers: Vec<[u8; 32]>,
    #[serde(default)]
    served: Vec<bool>,
}

/// A grant's layers as one byte string (32 bytes a layer): decoded with one copy, where a
/// list of 32-byte arrays goes through serde one byte at a time (a quarter of a decision's
/// time with 10 grants of 10 layers).
mod layer_bytes {
    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(layers: &[[u8; 32]], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(layers.as_flattened())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<[u8; 32]>, D::Error> {
        struct Flat;
        impl<'de> de::Visitor<'de> for Flat {
            type Value = Vec<[u8; 32]>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte string of 32-byte layer IDs")
            }
            fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Self::Value, E> {
                let (layers, rest) = b.as_chunks::<32>();
                if !rest.is_empty() {
                    return Err(E::invalid_length(b.len(), &self));
                }
                Ok(layers.to_vec())
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                // (JSON writes bytes as an array of numbers.)
                let mut b = Vec::new();
                while let Some(x) = seq.next_element::<u8>()? {
                    b.push(x);
                }
                self.visit_bytes(&b)
            }
        }
        d.deserialize_bytes(Flat)
    }
}

/// The 32 bytes of a `sha256:<64 hex>` digest; None for any other form.
pub fn sha256_bytes(digest: &str) -> Option<[u8; 32]> {
    // By hand: every gate decision turns each layer of the chain into its bytes, and the
    // `hex` crate's general decoder (errors naming the character and its index) took an
    // eighth of a decision. The same digits as `hex` accepts (either case), nothing else:
    // a table gives each byte its value, or 0xff for a byte that is not a hex digit.
    const NIBBLE: [u8; 256] = {
        let mut t = [0xffu8; 256];
        let mut i = 0;
        while i < 10 {
            t[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            t[b'a' as usize + i] = 10 + i as u8;
            t[b'A' as usize + i] = 10 + i as u8;
            i += 1;
        }
        t
    };
    let (pairs, rest) = digest.strip_prefix("sha256:")?.as_bytes().as_chunks::<2>();
    if pairs.len() != 32 || !rest.is_empty() {
        return None;
    }
    let (mut out, mut bad) = ([0u8; 32], 0u8);
    for (o, &[hi, lo]) in out.iter_mut().zip(pairs) {
        let (h, l) = (NIBBLE[hi as usize], NIBBLE[lo as usize]);
        bad |= h | l;
        *o = h << 4 | (l & 0x0f);
    }
    (bad & 0xf0 == 0).then_some(out)
}

/// A grant with its key (`namespace NUL principal NUL origin NUL manifest`), whose parts are
/// read in place: a gate decision reads every grant of the namespace, and four strings a grant
/// were a tenth of its time.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantEntry {
    key: String,
    /// Where the principal, origin and manifest parts of `key` start.
    starts: [usize; 3],
    pub grant: Grant,
}

impl GrantEntry {
    /// Err(key) when `key` has not exactly 4 parts.
    fn new(key: String, grant: Grant) -> Result<GrantEntry, String> {
        let mut seps = key.match_indices('\0').map(|(i, _)| i + 1);
        match [seps.next(), seps.next(), seps.next(), seps.next()] {
            [Some(a), Some(b), Some(c), None] => Ok(GrantEntry { starts: [a, b, c], key, grant }),
            _ => Err(key),
        }
    }

    /// The grant's key in the ledger.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn namespace(&self) -> &str {
        &self.key[..self.starts[0] - 1]
    }

    pub fn principal(&self) -> &str {
        &self.key[self.starts[0]..self.starts[1] - 1]
    }

    pub fn origin(&self) -> &str {
        &self.key[self.starts[1]..self.starts[2] - 1]
    }

    pub fn manifest(&self) -> &str {
        &self.key[self.starts[2]..]
    }
}

/// chainID(parent, d) = sha256(parent + " " + d); the base layer's chainID is its diffID.
pub fn chain_id(parent: &str, diff_id: &str) -> String {
    if parent.is_empty() {
        return diff_id.to_string();
    }
    format!("sha256:{}", hex::encode(Sha256::digest(format!("{parent} {diff_id}").as_bytes())))
}

pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let parent = out.last().map(String::as_str).unwrap_or("");
        out.push(chain_id(parent, d));
    }
    out
}

pub fn blob_origin(tx: &impl LedgerRead, digest: &str, origin: &str) -> Result<Option<BlobOrigin>, StoreError> {
    tx.get_val(Collection::BlobOrigins, &key(&[digest, origin]))
}

/// Every origin that served the blob's bytes.
pub fn blob_origins(tx: &impl LedgerRead, digest: &str) -> Result<Vec<(String, BlobOrigin)>, StoreError> {
    let prefix = key(&[digest, ""]);
    Ok(tx
        .scan::<BlobOrigin>(Collection::BlobOrigins, &prefix)?
        .into_iter()
        .map(|(k, v)| (split_key(&k).get(1).copied().unwrap_or_default().to_string(), v))
        .collect())
}

/// Whether an origin served the blob's own bytes without credentials (its public flag's ground).
pub fn served_anonymously(tx: &impl LedgerRead, digest: &str) -> Result<bool, StoreError> {
    Ok(blob_origins(tx, digest)?.iter().any(|(_, o)| o.identities.contains(ANONYMOUS)))
}

pub fn record_blob(tx: &mut WriteTx, digest: &str, origin: &str, identity: &str, now: i64) -> Result<(), StoreError> {
    let k = key(&[digest, origin]);
    let mut rec: BlobOrigin = tx.get_val(Collection::BlobOrigins, &k)?.unwrap_or_default();
    rec.identities.insert(identity.to_string());
    rec.last = now;
    tx.put_val(Collection::BlobOrigins, &k, &rec)
}

/// Records that `origin` served the manifest `digest` without a credential (an anonymous pull
/// or verify of it there), among its blob origins; writes only when that was not known yet.
/// What `pullgate check` takes as a public image: a manifest whose layers are public but that
/// only a credential fetched is another tenant's image all the same.
pub fn record_manifest_served_anonymously(tx: &mut WriteTx, digest: &str, origin: &str, now: i64) -> Result<(), StoreError> {
    match served_anonymously_at(tx, digest, origin)? {
        true => Ok(()),
        false => record_blob(tx, digest, origin, ANONYMOUS, now),
    }
}

/// Whether one of `origins` served the manifest `digest` without a credential.
pub fn manifest_served_anonymously(tx: &impl LedgerRead, digest: &str, origins: &[String]) -> Result<bool, StoreError> {
    for o in origins {
        if served_anonymously_at(tx, digest, o)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `origin` served the bytes of `digest` without a credential.
fn served_anonymously_at(tx: &impl LedgerRead, digest: &str, origin: &str) -> Result<bool, StoreError> {
    Ok(blob_origin(tx, digest, origin)?.is_some_and(|o| o.identities.contains(ANONYMOUS)))
}

/// The layer ID pullgate computed from the blob's bytes, if it has.
pub fn pairing(tx: &impl LedgerRead, blob: &str) -> Result<Option<String>, StoreError> {
    tx.get_val(Collection::Pairings, blob)
}

/// Records a verified pairing. A blob's layer ID is a fact about its bytes: once recorded it
/// never changes, and a different one is refused.
pub fn record_pairing(tx: &mut WriteTx, v: &Verified) -> Result<(), LedgerError> {
    match pairing(tx, v.blob())? {
        Some(d) if d == v.diff_id() => Ok(()),
        Some(d) => Err(LedgerError::Conflict { blob: v.blob().into(), recorded: d, claimed: v.diff_id().into() }),
        None => Ok(tx.put_val(Collection::Pairings, v.blob(), &v.diff_id().to_string())?),
    }
}

pub fn manifest(tx: &impl LedgerRead, digest: &str) -> Result<Option<ManifestRec>, StoreError> {
    tx.get_val(Collection::Manifests, digest)
}

/// A manifest's name entry: the reference it was fetched as, from `origin`.
pub fn name_entry(origin: &str, name: &str) -> String {
    format!("{origin} {name}")
}

/// (origin, reference) of a name entry; no origin for entries written before names carried one.
pub fn split_name(entry: &str) -> (Option<&str>, &str) {
    match entry.split_once(' ') {
        Some((o, n)) => (Some(o), n),
        None => (None, entry),
    }
}

/// Manifests fetched as the image name `name` (`host/repo:tag`) from one of `origins`.
pub fn manifests_named(tx: &impl LedgerRead, origins: &[String], name: &str) -> Result<Vec<(String, ManifestRec)>, StoreError> {
    let mut digests = BTreeSet::new();
    for o in origins {
        for (k, ()) in tx.scan::<()>(Collection::Names, &key(&[o, name, ""]))? {
            if let Some(d) = split_key(&k).get(2) {
                digests.insert(d.to_string());
            }
        }
    }
    let mut out = Vec::new();
    for d in digests {
        if let Some(m) = manifest(tx, &d)? {
            out.push((d, m));
        }
    }
    Ok(out)
}

/// Indexes name entry `entry` (made by [`name_entry`]) of manifest `digest`; entries without
/// an origin are not indexed (they stand for no registry).
fn index_name(tx: &mut WriteTx, digest: &str, entry: &str) -> Result<(), StoreError> {
    if let (Some(o), n) = split_name(entry) {
        let k = key(&[o, n, digest]);
        if tx.get_val::<()>(Collection::Names, &k)?.is_none() {
            tx.put_val(Collection::Names, &k, &())?;
        }
    }
    Ok(())
}

pub fn layer(tx: &impl LedgerRead, diff_id: &str) -> Result<Option<LayerRec>, StoreError> {
    tx.get_val(Collection::Layers, diff_id)
}

pub fn chain(tx: &impl LedgerRead, chain_id: &str) -> Result<Option<ChainRec>, StoreError> {
    tx.get_val(Collection::Chains, chain_id)
}

/// The protected (not public) layer d with chainID(parent, d) == target, if any: the chainID
/// test for an extract whose target chain the ledger never recorded, by walking the
/// protected-layer keys and hashing each, so its cost grows with the number of protected
/// layers. The gate asks [`crate::chainindex`] instead, which answers the same; this is its
/// reference (and what the index's tables are built from).
pub fn protected_layer_for_chain(tx: &impl LedgerRead, parent: &str, target: &str) -> Result<Option<String>, StoreError> {
    if parent.is_empty() {
        // A base layer's chainID is its diffID.
        return Ok(if is_protected(tx, target)? { Some(target.to_string()) } else { None });
    }
    let Some(want) = sha256_bytes(target) else { return Ok(None) };
    let prefix = chain_hasher(parent);
    tx.find_key(Collection::Protected, &mut |d| {
        let mut h = prefix.clone();
        h.update(d.as_bytes());
        h.finalize().as_slice() == want
    })
}

/// A hasher that has taken `parent + " "`: chainID(parent, d) is its clone's digest after `d`.
pub fn chain_hasher(parent: &str) -> Sha256 {
    let mut h = Sha256::new();
    h.update(parent.as_bytes());
    h.update(b" ");
    h
}

/// Whether layer `diff_id` is in the protected-layer index (known and not public).
pub fn is_protected(tx: &impl LedgerRead, diff_id: &str) -> Result<bool, StoreError> {
    Ok(tx.get_val::<()>(Collection::Protected, diff_id)?.is_some())
}

/// The key of sequence number `seq` in the protected-layer log.
pub fn log_key(seq: u64) -> String {
    format!("{seq:016x}")
}

/// The sequence number a protected-layer log key holds.
fn log_seq(key: &str) -> Result<u64, StoreError> {
    u64::from_str_radix(key, 16).map_err(|e| StoreError::Corrupt { key: key.to_string(), reason: format!("protected-layer log key: {e}") })
}

/// The protected-layer log's last sequence number (0 when empty: numbers start at 1).
pub fn protected_log_last(tx: &impl LedgerRead) -> Result<u64, StoreError> {
    match tx.last_key(Collection::ProtectedLog)? {
        None => Ok(0),
        Some(k) => log_seq(&k),
    }
}

/// Up to `limit` layers logged as entering the protected-layer index after sequence number
/// `after`, with their numbers, oldest first.
pub fn protected_logged_after(tx: &impl LedgerRead, after: u64, limit: usize) -> Result<Vec<(u64, String)>, StoreError> {
    let mut out = Vec::new();
    for (k, d) in tx.range_from::<String>(Collection::ProtectedLog, &log_key(after.saturating_add(1)), limit)? {
        let seq = log_seq(&k)?;
        out.push((seq, d));
    }
    Ok(out)
}

/// Keeps the protected-layer index in step with a layer's public flag; a layer entering it
/// is appended to the log that tells a chain index's tables what they lack.
fn index_protected(tx: &mut WriteTx, diff_id: &str, public: bool) -> Result<(), StoreError> {
    if public {
        tx.delete_val(Collection::Protected, diff_id)?;
        Ok(())
    } else if is_protected(tx, diff_id)? {
        Ok(())
    } else {
        tx.put_val(Collection::Protected, diff_id, &())?;
        log_protected(tx, diff_id)
    }
}

fn log_protected(tx: &mut WriteTx, diff_id: &str) -> Result<(), StoreError> {
    let next = protected_log_last(tx)? + 1;
    tx.put_val(Collection::ProtectedLog, &log_key(next), &diff_id.to_string())?;
    if protected_since(tx, diff_id)?.is_none() {
        tx.put_val(Collection::ProtectedSince, diff_id, &next)?;
    }
    Ok(())
}

/// The protected-layer log's sequence number under which layer `diff_id` first entered the
/// protected-layer index: from when pullgate knew it as private (None: never).
pub fn protected_since(tx: &impl LedgerRead, diff_id: &str) -> Result<Option<u64>, StoreError> {
    tx.get_val::<u64>(Collection::ProtectedSince, diff_id)
}

/// Set once the grant layer index (`Collection::GrantLayers`) was built; and which grants it was
/// kept for (the XOR of a share of each grant's key: a grant written or removed by a version
/// without the index changes it, and the index is built again at the next start).
const GRANT_LAYERS: &str = "ledger_grant_layers_built";
const GRANTS_INDEXED: &str = "ledger_grants_indexed";

/// The marker of the clean-up that made every fact rest on verified pairings.
const VERIFIED_PAIRINGS: &str = "ledger_verified_pairings";
/// Set once a version keeping grants in `ledger_grants_v2` has started on the ledger: from then
/// on, a `ledger_grants` table found at start was made by an older version (a rollback).
const GRANTS_V2: &str = "ledger_grants_v2";

/// One-time upgrades of a ledger written by an earlier version. Runs in the caller's write
/// transaction; each does nothing once done.
/// - Grants move to the table of their current layout (see `GrantV1`), after a rollback too.
/// - The protected-layer log (layers in the protected-layer index, in the order they entered).
/// - The protected-layer index.
/// - The names index (`Names`), from every manifest record's names, at every start.
/// - Verified pairings: earlier versions took a layer's blobs from image configs, so every
///   fact derived from them is dropped: each layer loses its blobs and its public flag (it is
///   protected until a pull or verify pairs a blob with it again, by hashing the bytes, from
///   containerd's content store when they are there), and every grant forgets which of its
///   layers its origin had served (they are looked up again, against verified pairings only).
///   This fails closed: an image verified before the upgrade needs `pullgate verify` again.
pub fn upgrade(tx: &mut WriteTx) -> Result<(), StoreError> {
    // Before anything reads grants: they move to the table of the layout `Grant` now has. Not
    // once but whenever the old table is there: an older version that opened the ledger since
    // (a rollback) made it again and kept its grants there, blind to the ones here, which it
    // could neither show nor revoke. Its table is then the truth (a revoke made during the
    // rollback must hold): the grants here are dropped, its grants moved here. And as that
    // version may predate verified pairings (it took layer IDs from image configs and wrote
    // facts on them, knowing nothing of the marker), their clean-up (below) runs again.
    let rolled_back = tx.counter(GRANTS_V2)? > 0;
    if let Some(old) = tx.take_retired::<GrantV1>("ledger_grants")? {
        if rolled_back {
            tx.set_counter(VERIFIED_PAIRINGS, 0)?;
        }
        tx.clear(Collection::Grants)?;
        for (k, g) in old {
            tx.put_val(Collection::Grants, &k, &Grant { identity: g.identity, verified_at: g.verified_at, layers: g.layers, served: g.served })?;
        }
    }
    if !rolled_back {
        tx.set_counter(GRANTS_V2, 1)?;
    }
    // First: the log lists every layer already in the index (none in a ledger older than the
    // index, which the next step fills, logging each).
    tx.once("ledger_protected_log", |tx| {
        let mut all = Vec::new();
        tx.find_key(Collection::Protected, &mut |d| {
            all.push(d.to_string());
            false
        })?;
        for d in all {
            log_protected(tx, &d)?;
        }
        Ok(())
    })?;
    // Each logged layer's first sequence number (a ledger older than this table logged them
    // without it).
    tx.once("ledger_protected_since", |tx| {
        for (k, d) in tx.scan::<String>(Collection::ProtectedLog, "")? {
            let seq = log_seq(&k)?;
            if protected_since(tx, &d)?.is_none() {
                tx.put_val(Collection::ProtectedSince, &d, &seq)?;
            }
        }
        Ok(())
    })?;
    // Every manifest an anonymous grant names was served anonymously at the grant's origin: at
    // every start, as grants written before that was recorded (or by an earlier version, a
    // rollback) are its only trace. Writes only what is missing.
    for (k, g) in tx.scan::<Grant>(Collection::Grants, "")? {
        if g.identity == ANONYMOUS {
            if let [_, _, origin, manifest] = split_key(&k)[..] {
                let (origin, manifest) = (origin.to_string(), manifest.to_string());
                record_manifest_served_anonymously(tx, &manifest, &origin, g.verified_at)?;
            }
        }
    }
    // Every name a manifest's record holds, in the table look-ups by name read: at every start,
    // as an earlier version (a rollback) records names in the manifest's record only. Writes
    // only the entries missing.
    for (d, m) in tx.scan::<ManifestRec>(Collection::Manifests, "")? {
        for e in &m.names {
            index_name(tx, &d, e)?;
        }
    }
    tx.once("ledger_protected_index", |tx| {
        for (d, l) in tx.scan::<LayerRec>(Collection::Layers, "")? {
            index_protected(tx, &d, l.public)?;
        }
        Ok(())
    })?;
    tx.once(VERIFIED_PAIRINGS, |tx| {
        // Names were recorded as typed, without the origin that answered.
        for (d, mut m) in tx.scan::<ManifestRec>(Collection::Manifests, "")? {
            m.names.retain(|e| split_name(e).0.is_some());
            tx.put_val(Collection::Manifests, &d, &m)?;
        }
        for (d, mut l) in tx.scan::<LayerRec>(Collection::Layers, "")? {
            l.blobs.clear();
            l.public = false;
            tx.put_val(Collection::Layers, &d, &l)?;
            index_protected(tx, &d, false)?;
        }
        for (k, mut g) in tx.scan::<Grant>(Collection::Grants, "")? {
            if g.served.iter().any(|s| *s) {
                g.served.iter_mut().for_each(|s| *s = false);
                tx.put_val(Collection::Grants, &k, &g)?;
            }
        }
        Ok(())
    })?;
    // Last: the grants are in their table, in their layout.
    index_grant_layers(tx)
}

/// Records a manifest whose blobs' origins and pairings are already recorded: its layers,
/// chains, and which layers are public (a blob of the layer was served anonymously somewhere).
/// Refused unless every (blob, diffID) it lists is a verified pairing.
pub fn record_manifest(tx: &mut WriteTx, digest: &str, m: &ManifestRec) -> Result<(), LedgerError> {
    if m.layers.len() != m.diff_ids.len() {
        return Err(StoreError::Corrupt { key: digest.into(), reason: format!("{} layers, {} diffIDs", m.layers.len(), m.diff_ids.len()) }.into());
    }
    for (blob, d) in m.layers.iter().zip(&m.diff_ids) {
        match pairing(tx, blob)? {
            Some(v) if &v == d => {}
            Some(v) => return Err(LedgerError::Conflict { blob: blob.clone(), recorded: v, claimed: d.clone() }),
            None => return Err(LedgerError::Unverified { blob: blob.clone(), claimed: d.clone() }),
        }
    }
    // Each record is written only when it changed: a pull of a manifest recorded before
    // writes nothing but what it added.
    let before = manifest(tx, digest)?;
    let mut rec = before.clone().unwrap_or_else(|| ManifestRec { config: m.config.clone(), layers: m.layers.clone(), diff_ids: m.diff_ids.clone(), ..Default::default() });
    for o in &m.origins {
        if rec.origins.len() < MANIFEST_ORIGIN_EXAMPLES {
            rec.origins.insert(o.clone());
        }
    }
    for e in &m.names {
        index_name(tx, digest, e)?;
        if rec.names.len() < MANIFEST_NAME_EXAMPLES {
            rec.names.insert(e.clone());
        }
    }
    if before.as_ref() != Some(&rec) {
        tx.put_val(Collection::Manifests, digest, &rec)?;
    }
    let chains = chain_ids(&m.diff_ids);
    for (i, (blob, d)) in m.layers.iter().zip(&m.diff_ids).enumerate() {
        let before = layer(tx, d)?;
        let mut l = before.clone().unwrap_or_default();
        l.blobs.insert(blob.clone());
        if l.manifests.len() < LAYER_MANIFEST_EXAMPLES {
            l.manifests.insert(digest.to_string());
        }
        if !l.public {
            l.public = served_anonymously(tx, blob)?;
        }
        if before.as_ref() != Some(&l) {
            tx.put_val(Collection::Layers, d, &l)?;
            index_protected(tx, d, l.public)?;
        }
        let parent = if i == 0 { String::new() } else { chains[i - 1].clone() };
        let c = ChainRec { parent, diff_id: d.clone() };
        if chain(tx, &chains[i])?.as_ref() != Some(&c) {
            tx.put_val(Collection::Chains, &chains[i], &c)?;
        }
    }
    Ok(())
}

pub fn mark_public(tx: &mut WriteTx, diff_id: &str) -> Result<(), StoreError> {
    if let Some(mut l) = layer(tx, diff_id)? {
        if !l.public {
            l.public = true;
            tx.put_val(Collection::Layers, diff_id, &l)?;
            index_protected(tx, diff_id, true)?;
        }
    }
    Ok(())
}

/// Whether `origin` served the bytes of one of the layer's blobs.
pub fn layer_served_by(tx: &impl LedgerRead, layer: &LayerRec, origin: &str) -> Result<bool, StoreError> {
    for b in &layer.blobs {
        if blob_origin(tx, b, origin)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Records that `(ns, principal)` authenticated at `origin` for `manifest` (already recorded)
/// as `identity` at `verified_at`, replacing an older grant for the same key.
pub fn put_grant(tx: &mut WriteTx, ns: &str, principal: &str, origin: &str, manifest: &str, identity: &str, verified_at: i64) -> Result<(), StoreError> {
    let diff_ids = self::manifest(tx, manifest)?.map(|m| m.diff_ids).unwrap_or_default();
    let raw: Option<Vec<[u8; 32]>> = diff_ids.iter().map(|d| sha256_bytes(d)).collect();
    let mut g = Grant { identity: identity.to_string(), verified_at, layers: vec![], served: vec![] };
    if let Some(raw) = raw {
        for d in &diff_ids {
            g.served.push(match layer(tx, d)? {
                Some(l) => layer_served_by(tx, &l, origin)?,
                None => false,
            });
        }
        g.layers = raw;
    }
    let k = key(&[ns, principal, origin, manifest]);
    let new = tx.get_val::<Grant>(Collection::Grants, &k)?.is_none();
    tx.put_val(Collection::Grants, &k, &g)?;
    for d in &diff_ids {
        tx.put_val(Collection::GrantLayers, &key(&[ns, d, principal, origin, manifest]), &())?;
    }
    if new {
        toggle_indexed(tx, &k)?;
    }
    Ok(())
}

/// A grant key's share of `GRANTS_INDEXED`: the first 8 bytes of its SHA-256.
fn key_share(k: &str) -> u64 {
    let h = Sha256::digest(k.as_bytes());
    u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]])
}

/// Adds or takes grant key `k` in the set the layer index was kept for (`GRANTS_INDEXED`, the
/// XOR of every grant key's share).
fn toggle_indexed(tx: &mut WriteTx, k: &str) -> Result<(), StoreError> {
    let n = tx.counter(GRANTS_INDEXED)?;
    tx.set_counter(GRANTS_INDEXED, n ^ key_share(k))
}

/// The grants of `ns` whose manifest contains layer `diff_id` (any principal), read through
/// the layer index: what an unpack step of that layer asks, whatever the number of other
/// grants. An index entry whose grant is gone is skipped.
pub fn grants_with_layer(tx: &impl LedgerRead, ns: &str, diff_id: &str) -> Result<Vec<GrantEntry>, StoreError> {
    let mut out = Vec::new();
    each_grant_with_layer(tx, ns, diff_id, &mut |g| {
        out.push(g);
        true
    })?;
    Ok(out)
}

/// Hands `f` the grants of `ns` whose manifest contains layer `diff_id`, read through the
/// layer index a page at a time, until `f` answers false.
pub fn each_grant_with_layer(tx: &impl LedgerRead, ns: &str, diff_id: &str, f: &mut dyn FnMut(GrantEntry) -> bool) -> Result<(), StoreError> {
    const PAGE: usize = 256;
    let prefix = key(&[ns, diff_id, ""]);
    let mut start = prefix.clone();
    loop {
        let page = tx.range_from::<()>(Collection::GrantLayers, &start, PAGE)?;
        let full = page.len() == PAGE;
        for (k, ()) in &page {
            if !k.starts_with(&prefix) {
                return Ok(());
            }
            let parts = split_key(k);
            let [_, _, principal, origin, manifest] = parts[..] else {
                return Err(StoreError::Corrupt { key: k.replace('\0', "|"), reason: "grant layer key has not 5 parts".into() });
            };
            let gk = key(&[ns, principal, origin, manifest]);
            if let Some(g) = tx.get_val::<Grant>(Collection::Grants, &gk)? {
                let g = GrantEntry::new(gk, g).map_err(|k| StoreError::Corrupt { key: k.replace('\0', "|"), reason: "grant key has not 4 parts".into() })?;
                if !f(g) {
                    return Ok(());
                }
            }
        }
        match page.last() {
            // The next page starts just after the last key read.
            Some((k, ())) if full => start = format!("{k}\0"),
            _ => return Ok(()),
        }
    }
}

/// The layers (diffIDs) grant `g` is indexed under: its own, else its manifest's.
fn indexed_layers(tx: &impl LedgerRead, g: &GrantEntry) -> Result<Vec<String>, StoreError> {
    if !g.grant.layers.is_empty() {
        return Ok(g.grant.layers.iter().map(|raw| format!("sha256:{}", hex::encode(raw))).collect());
    }
    Ok(self::manifest(tx, g.manifest())?.map(|m| m.diff_ids).unwrap_or_default())
}

/// Builds the layer index from the grants, when it was not kept for exactly these grants (a
/// ledger from before the index, or one an earlier version changed grants in since): every
/// entry is written again from the grants themselves. Reads every grant key at each start.
fn index_grant_layers(tx: &mut WriteTx) -> Result<(), StoreError> {
    let all = grants(tx, None)?;
    let kept_for = all.iter().fold(0u64, |x, g| x ^ key_share(g.key()));
    if tx.counter(GRANTS_INDEXED)? == kept_for && tx.counter(GRANT_LAYERS)? > 0 {
        return Ok(());
    }
    tx.clear(Collection::GrantLayers)?;
    for g in &all {
        for d in indexed_layers(tx, g)? {
            tx.put_val(Collection::GrantLayers, &key(&[g.namespace(), &d, g.principal(), g.origin(), g.manifest()]), &())?;
        }
    }
    tx.set_counter(GRANTS_INDEXED, kept_for)?;
    tx.set_counter(GRANT_LAYERS, 1)
}

/// Grants of one namespace (all namespaces when `ns` is None).
pub fn grants(tx: &impl LedgerRead, ns: Option<&str>) -> Result<Vec<GrantEntry>, StoreError> {
    scan_grants(tx, &ns.map(|n| key(&[n, ""])).unwrap_or_default())
}

fn scan_grants(tx: &impl LedgerRead, prefix: &str) -> Result<Vec<GrantEntry>, StoreError> {
    let mut out = Vec::new();
    for (k, grant) in tx.scan::<Grant>(Collection::Grants, prefix)? {
        out.push(GrantEntry::new(k, grant).map_err(|k| StoreError::Corrupt { key: k.replace('\0', "|"), reason: "grant key has not 4 parts".into() })?);
    }
    Ok(out)
}

/// Grants of principal `principal` in `ns` (`""`: the namespace-wide ones), by key prefix.
pub fn grants_of(tx: &impl LedgerRead, ns: &str, principal: &str) -> Result<Vec<GrantEntry>, StoreError> {
    scan_grants(tx, &key(&[ns, principal, ""]))
}

/// Removes the grants of `ns` matching `principal` (None: every principal) whose origin
/// `origin` accepts (None: every origin); returns how many.
pub fn revoke(tx: &mut WriteTx, ns: &str, principal: Option<&str>, origin: Option<&dyn Fn(&str) -> bool>) -> Result<usize, StoreError> {
    revoke_where(tx, ns, &|g| principal.is_none_or(|p| p == g.principal()) && origin.is_none_or(|o| o(g.origin())))
}

/// Removes the grants of `ns` that `which` picks; returns how many.
pub fn revoke_where(tx: &mut WriteTx, ns: &str, which: &dyn Fn(&GrantEntry) -> bool) -> Result<usize, StoreError> {
    let mut n = 0;
    for g in grants(tx, Some(ns))? {
        if !which(&g) {
            continue;
        }
        for d in indexed_layers(tx, &g)? {
            tx.delete_val(Collection::GrantLayers, &key(&[ns, &d, g.principal(), g.origin(), g.manifest()]))?;
        }
        if tx.delete_val(Collection::Grants, &g.key)? {
            toggle_indexed(tx, &g.key)?;
        }
        n += 1;
    }
    Ok(n)
}

/// An image the operator marked preloaded in a namespace (`pullgate preload`). Under
/// `NeverVerifyPreloadedImages` its layers run there without a grant, whoever pulls the same
/// bytes since, under any name, with any credential. The layers are the ones pullgate
/// established for the manifest (each blob's layer ID from its own hashing), never a claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Preload {
    /// The reference the operator named, as pullgate reads it.
    pub reference: String,
    /// The manifest's layers (diffIDs), base first.
    pub diff_ids: Vec<String>,
    /// Nanoseconds since the epoch.
    pub marked_at: i64,
}

/// One mark: its namespace, manifest and record.
#[derive(Debug, Clone, PartialEq)]
pub struct PreloadEntry {
    pub namespace: String,
    pub manifest: String,
    pub preload: Preload,
}

/// The layers of `manifest` as pullgate established them: every blob paired with its layer ID
/// by pullgate's own hashing, agreeing with the manifest's record. None when any is not.
pub fn established_layers(tx: &impl LedgerRead, manifest: &str) -> Result<Option<Vec<String>>, StoreError> {
    let Some(m) = self::manifest(tx, manifest)? else { return Ok(None) };
    if m.layers.len() != m.diff_ids.len() {
        return Ok(None);
    }
    for (blob, d) in m.layers.iter().zip(&m.diff_ids) {
        if pairing(tx, blob)?.as_deref() != Some(d.as_str()) {
            return Ok(None);
        }
    }
    Ok(Some(m.diff_ids))
}

/// Marks `manifest` preloaded in `ns` under the reference `p` names, replacing an earlier mark
/// of the same manifest there and the marks of other manifests the same reference named before
/// (the name moved: what the operator marks is the image the name names now). Returns the
/// manifests whose marks went.
pub fn mark_preloaded(tx: &mut WriteTx, ns: &str, manifest: &str, p: &Preload) -> Result<Vec<String>, StoreError> {
    let moved: Vec<String> = preloads(tx, Some(ns))?.into_iter().filter(|e| e.manifest != manifest && e.preload.reference == p.reference).map(|e| e.manifest).collect();
    for m in &moved {
        tx.delete_val(Collection::Preloads, &key(&[ns, m]))?;
    }
    tx.put_val(Collection::Preloads, &key(&[ns, manifest]), p)?;
    Ok(moved)
}

/// The marks of one namespace (of all when `ns` is None).
pub fn preloads(tx: &impl LedgerRead, ns: Option<&str>) -> Result<Vec<PreloadEntry>, StoreError> {
    let prefix = ns.map(|n| key(&[n, ""])).unwrap_or_default();
    let mut out = Vec::new();
    for (k, preload) in tx.scan::<Preload>(Collection::Preloads, &prefix)? {
        match split_key(&k)[..] {
            [namespace, manifest] => out.push(PreloadEntry { namespace: namespace.to_string(), manifest: manifest.to_string(), preload }),
            _ => return Err(StoreError::Corrupt { key: k.replace('\0', "|"), reason: "preload key has not 2 parts".into() }),
        }
    }
    Ok(out)
}

/// Every layer marked preloaded in `ns`.
pub fn preloaded_layers(tx: &impl LedgerRead, ns: &str) -> Result<std::collections::HashSet<String>, StoreError> {
    Ok(preloads(tx, Some(ns))?.into_iter().flat_map(|e| e.preload.diff_ids).collect())
}

/// Removes the marks of `ns` that `which` selects; returns how many.
pub fn unmark_preloaded(tx: &mut WriteTx, ns: &str, which: &dyn Fn(&PreloadEntry) -> bool) -> Result<usize, StoreError> {
    let mut n = 0;
    for e in preloads(tx, Some(ns))?.iter().filter(|e| which(e)) {
        n += usize::from(tx.delete_val(Collection::Preloads, &key(&[&e.namespace, &e.manifest]))?);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metastore::MetaStore;

    fn d(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn manifest_ab() -> ManifestRec {
        ManifestRec { config: d('C'), layers: vec![d('A'), d('B')], diff_ids: vec![d('a'), d('b')], ..Default::default() }
    }

    fn store() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        s.write(upgrade).unwrap();
        (dir, s)
    }

    #[test]
    fn the_layer_index_follows_the_grants_and_is_built_again_when_they_changed_without_it() {
        let (_d, s) = store();
        let pair = |b: char, l: char| Verified::for_test(&d(b), &d(l));
        s.write(|tx| -> Result<(), LedgerError> {
            record_pairing(tx, &pair('A', 'a'))?;
            record_pairing(tx, &pair('B', 'b'))?;
            record_manifest(tx, &d('m'), &manifest_ab())?;
            put_grant(tx, "ns", "p1", "reg/app", &d('m'), "id", 1)?;
            put_grant(tx, "ns", "p2", "reg/app", &d('m'), "id", 1)?;
            put_grant(tx, "ns", "p2", "reg/app", &d('m'), "id", 2)?;
            put_grant(tx, "other", "p1", "reg/app", &d('m'), "id", 1)?;
            Ok(())
        })
        .unwrap();
        let with = |l: char| s.read(|tx| grants_with_layer(tx, "ns", &d(l))).unwrap().iter().map(|g| g.principal().to_string()).collect::<Vec<_>>();
        assert_eq!(with('a'), ["p1", "p2"]);
        assert_eq!(with('b'), ["p1", "p2"]);
        assert!(with('c').is_empty());
        s.write(|tx| revoke(tx, "ns", Some("p1"), None)).unwrap();
        assert_eq!(with('a'), ["p2"]);
        s.write(|tx| -> Result<(), StoreError> {
            let keys = [key(&["ns", "p2", "reg/app", &d('m')]), key(&["other", "p1", "reg/app", &d('m')])];
            assert_eq!(tx.counter(GRANTS_INDEXED)?, key_share(&keys[0]) ^ key_share(&keys[1]));
            assert_eq!(tx.scan::<()>(Collection::GrantLayers, "")?.len(), 4);
            Ok(())
        })
        .unwrap();
        // A grant written by a version without the index (the table alone): the next start
        // builds the index again, and the grant is found by its layers.
        s.write(|tx| {
            let g = Grant { identity: "id".into(), verified_at: 1, layers: vec![], served: vec![] };
            tx.put_val(Collection::Grants, &key(&["ns", "p3", "reg/app", &d('m')]), &g)
        })
        .unwrap();
        assert_eq!(with('a'), ["p2"]);
        s.write(upgrade).unwrap();
        assert_eq!(with('a'), ["p2", "p3"]);
        assert_eq!(with('b'), ["p2", "p3"]);
        // Such a version revoking one grant and writing another (the same number of grants):
        // the index is built again all the same.
        s.write(|tx| -> Result<(), StoreError> {
            tx.delete_val(Collection::Grants, &key(&["ns", "p2", "reg/app", &d('m')]))?;
            let g = Grant { identity: "id".into(), verified_at: 1, layers: vec![], served: vec![] };
            tx.put_val(Collection::Grants, &key(&["ns", "p4", "reg/app", &d('m')]), &g)
        })
        .unwrap();
        s.write(upgrade).unwrap();
        assert_eq!(with('a'), ["p3", "p4"]);
    }

    #[test]
    fn a_manifest_is_recorded_only_on_verified_pairings() {
        let (_d, s) = store();
        let pair = |b: char, l: char| Verified::for_test(&d(b), &d(l));
        // Claims alone (no pairing at all): refused, nothing written.
        let e = s.write(|tx| record_manifest(tx, &d('m'), &manifest_ab())).unwrap_err();
        assert!(matches!(&e, LedgerError::Unverified { blob, claimed } if *blob == d('A') && *claimed == d('a')), "{e}");
        // One pairing verified, the other missing: still refused, and the verified one is not
        // recorded either (one transaction).
        let e = s.write(|tx| {
            record_pairing(tx, &pair('A', 'a'))?;
            record_manifest(tx, &d('m'), &manifest_ab())
        });
        assert!(matches!(e, Err(LedgerError::Unverified { .. })));
        s.read(|tx| -> Result<(), StoreError> {
            assert_eq!(pairing(tx, &d('A'))?, None);
            assert_eq!(manifest(tx, &d('m'))?, None);
            assert_eq!(layer(tx, &d('a'))?, None);
            Ok(())
        })
        .unwrap();
        // A config claiming another layer ID than the bytes hash to: refused.
        let e = s.write(|tx| {
            record_pairing(tx, &pair('A', 'a'))?;
            record_pairing(tx, &pair('B', 'x'))?;
            record_manifest(tx, &d('m'), &manifest_ab())
        });
        assert!(matches!(&e, Err(LedgerError::Conflict { blob, recorded, claimed }) if *blob == d('B') && *recorded == d('x') && *claimed == d('b')));
        // A pairing never changes once recorded.
        s.write(|tx| record_pairing(tx, &pair('B', 'b'))).unwrap();
        assert!(matches!(s.write(|tx| record_pairing(tx, &pair('B', 'x'))), Err(LedgerError::Conflict { .. })));
        // Both verified and matching: recorded, and the layers list exactly those blobs.
        s.write(|tx| {
            record_pairing(tx, &pair('A', 'a'))?;
            record_manifest(tx, &d('m'), &manifest_ab())
        })
        .unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            assert_eq!(layer(tx, &d('a'))?.unwrap().blobs, BTreeSet::from([d('A')]));
            assert_eq!(layer(tx, &d('b'))?.unwrap().blobs, BTreeSet::from([d('B')]));
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn a_manifest_is_served_anonymously_only_where_an_anonymous_pull_fetched_it() {
        let (_d, s) = store();
        let (public, private) = ("reg/public/app".to_string(), "reg/private/app".to_string());
        s.write(|tx| {
            record_manifest_served_anonymously(tx, &d('m'), &public, 5)?;
            // Again: nothing rewritten (the first moment stays).
            record_manifest_served_anonymously(tx, &d('m'), &public, 9)?;
            assert_eq!(blob_origin(tx, &d('m'), &public)?.map(|o| o.last), Some(5));
            // A grant with a credential says nothing of the manifest being public; one written
            // anonymously before the manifest's fetch was recorded is found at the next start.
            put_grant(tx, "A", "", &private, &d('n'), "hmac-sha256:alice", 1)?;
            put_grant(tx, "B", "", &private, &d('o'), ANONYMOUS, 2)?;
            upgrade(tx)?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            assert!(manifest_served_anonymously(tx, &d('m'), std::slice::from_ref(&public))?);
            assert!(!manifest_served_anonymously(tx, &d('m'), std::slice::from_ref(&private))?);
            assert!(!manifest_served_anonymously(tx, &d('n'), std::slice::from_ref(&private))?);
            assert!(manifest_served_anonymously(tx, &d('o'), &[public.clone(), private.clone()])?);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn a_layer_is_public_only_through_a_blob_verified_as_that_layer() {
        let (_d, s) = store();
        s.write(|tx| {
            // B's blob X was served anonymously; it is its own layer x, whatever a config says.
            record_pairing(tx, &Verified::for_test(&d('X'), &d('x')))?;
            record_blob(tx, &d('X'), "evil/app", ANONYMOUS, 1)?;
            record_pairing(tx, &Verified::for_test(&d('A'), &d('a')))?;
            record_blob(tx, &d('A'), "reg/private", "hmac-sha256:alice", 1)?;
            record_manifest(tx, &d('m'), &ManifestRec { layers: vec![d('A')], diff_ids: vec![d('a')], ..Default::default() })?;
            // The attacker's manifest pairing X with layer a is refused...
            let forged = ManifestRec { layers: vec![d('X')], diff_ids: vec![d('a')], ..Default::default() };
            assert!(matches!(record_manifest(tx, &d('e'), &forged), Err(LedgerError::Conflict { .. })));
            Ok::<_, LedgerError>(())
        })
        .unwrap();
        // ...so layer a stays protected and served by its own origin only.
        s.read(|tx| -> Result<(), StoreError> {
            let a = layer(tx, &d('a'))?.unwrap();
            assert!(!a.public);
            assert_eq!(a.blobs, BTreeSet::from([d('A')]));
            assert!(!layer_served_by(tx, &a, "evil/app")?);
            assert!(protected_layer_for_chain(tx, "", &d('a'))?.is_some());
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn names_are_found_only_with_the_origin_that_answered() {
        let (_d, s) = store();
        s.write(|tx| {
            record_pairing(tx, &Verified::for_test(&d('A'), &d('a')))?;
            let m = ManifestRec { layers: vec![d('A')], diff_ids: vec![d('a')], names: [name_entry("http://evil:1/private/app", "reg:5000/private/app:v1")].into(), ..Default::default() };
            record_manifest(tx, &d('m'), &m)
        })
        .unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            let name = "reg:5000/private/app:v1";
            assert!(manifests_named(tx, &["reg:5000/private/app".into(), "http://reg:5000/private/app".into()], name)?.is_empty());
            assert_eq!(manifests_named(tx, &["http://evil:1/private/app".into()], name)?.len(), 1);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn a_manifest_fetched_under_thousands_of_names_keeps_a_small_record_and_every_name() {
        let (_d, s) = store();
        let named = |i: usize| name_entry(&format!("reg:5000/t{i}/app"), &format!("reg:5000/t{i}/app:v1"));
        s.write(|tx| {
            record_pairing(tx, &Verified::for_test(&d('A'), &d('a')))?;
            for chunk in (0..5000).collect::<Vec<_>>().chunks(500) {
                let m = ManifestRec {
                    layers: vec![d('A')],
                    diff_ids: vec![d('a')],
                    origins: chunk.iter().map(|i| format!("reg:5000/t{i}/app")).collect(),
                    names: chunk.iter().map(|i| named(*i)).collect(),
                    ..Default::default()
                };
                record_manifest(tx, &d('m'), &m)?;
            }
            Ok::<_, LedgerError>(())
        })
        .unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            let rec = manifest(tx, &d('m'))?.unwrap();
            assert_eq!((rec.names.len(), rec.origins.len()), (MANIFEST_NAME_EXAMPLES, MANIFEST_ORIGIN_EXAMPLES));
            for i in [0, 2500, 4999] {
                let found = manifests_named(tx, &[format!("reg:5000/t{i}/app")], &format!("reg:5000/t{i}/app:v1"))?;
                assert_eq!(found.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>(), vec![d('m')], "name {i}");
            }
            assert!(manifests_named(tx, &["reg:5000/t1/app".into()], "reg:5000/t2/app:v1")?.is_empty());
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn names_an_earlier_version_recorded_are_indexed_at_the_next_start() {
        let (_d, s) = store();
        let (o, n) = ("reg:5000/old/app", "reg:5000/old/app:v9");
        s.write(|tx| {
            upgrade(tx)?;
            // As a version without the index writes a record (after a rollback).
            let m = ManifestRec { layers: vec![d('A')], diff_ids: vec![d('a')], names: [name_entry(o, n)].into(), ..Default::default() };
            tx.put_val(Collection::Manifests, &d('m'), &m)
        })
        .unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            assert!(manifests_named(tx, &[o.into()], n)?.is_empty());
            Ok(())
        })
        .unwrap();
        s.write(|tx| upgrade(tx)).unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            assert_eq!(manifests_named(tx, &[o.into()], n)?.len(), 1);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn upgrading_an_older_ledger_drops_what_rested_on_claims() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        // As an older version wrote it: a layer whose blob came from a config, made public by
        // an anonymous origin, and a grant that marked it served. No pairings, no marker.
        s.write(|tx| -> Result<(), StoreError> {
            tx.put_val(Collection::Layers, &d('a'), &LayerRec { blobs: [d('X')].into(), public: true, manifests: [d('m')].into() })?;
            tx.put_retired("ledger_grants", &key(&["B", "", "evil/app", &d('m')]), &GrantV1 { identity: ANONYMOUS.into(), verified_at: 1, layers: vec![[0xaa; 32]], served: vec![true] })?;
            tx.set_counter("ledger_protected_index", 1)
        })
        .unwrap();
        s.write(upgrade).unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            let a = layer(tx, &d('a'))?.unwrap();
            assert!(!a.public && a.blobs.is_empty(), "{a:?}");
            assert!(tx.get_val::<()>(Collection::Protected, &d('a'))?.is_some());
            assert_eq!(grants(tx, Some("B"))?[0].grant.served, vec![false]);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn grants_move_to_the_layout_with_layers_as_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        // 32 layers: the old layout's list length (32) reads as a byte length in the new one,
        // which is why the layouts live in different tables.
        let layers: Vec<[u8; 32]> = (0..32u8).map(|i| [i; 32]).collect();
        let old = GrantV1 { identity: "hmac-sha256:x".into(), verified_at: 7, layers: layers.clone(), served: vec![false; 32] };
        let k = key(&["A", "p", "reg/app", &d('m')]);
        s.write(|tx| tx.put_retired("ledger_grants", &k, &old)).unwrap();
        s.write(upgrade).unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            let g = grants(tx, None)?;
            assert_eq!(g.len(), 1);
            assert_eq!((g[0].namespace(), g[0].principal(), g[0].origin(), g[0].manifest()), ("A", "p", "reg/app", d('m').as_str()));
            assert_eq!(g[0].grant, Grant { identity: "hmac-sha256:x".into(), verified_at: 7, layers, served: vec![false; 32] });
            Ok(())
        })
        .unwrap();
        // The old table is gone: a second upgrade finds nothing to move, and keeps the grant.
        s.write(|tx| tx.take_retired::<GrantV1>("ledger_grants").map(|v| assert!(v.is_none()))).unwrap();
        s.write(upgrade).unwrap();
        assert_eq!(s.read(|tx| grants(tx, None)).unwrap().len(), 1);
        // A rollback: an older version opens the ledger (making its table again, empty), records
        // a grant for B and revokes nothing it can see; A's grant here was revoked meanwhile in
        // the operator's eyes (the older version's `revoke -n A` found nothing). Forward again:
        // the older version's table is the truth.
        let kb = key(&["B", "", "reg/app", &d('n')]);
        s.write(|tx| tx.put_retired("ledger_grants", &kb, &GrantV1 { identity: "hmac-sha256:y".into(), verified_at: 9, layers: vec![], served: vec![] })).unwrap();
        s.write(upgrade).unwrap();
        let after = s.read(|tx| grants(tx, None)).unwrap();
        assert_eq!(after.iter().map(|g| g.namespace()).collect::<Vec<_>>(), vec!["B"]);
        // The older version may predate verified pairings: what it marked served is not kept.
        let kc = key(&["C", "", "reg/app", &d('o')]);
        s.write(|tx| tx.put_retired("ledger_grants", &kc, &GrantV1 { identity: "hmac-sha256:z".into(), verified_at: 9, layers: vec![[7; 32]], served: vec![true] })).unwrap();
        s.write(upgrade).unwrap();
        let after = s.read(|tx| grants(tx, Some("C"))).unwrap();
        assert_eq!((after.len(), after[0].grant.served.clone()), (1, vec![false]));
        // An older version that only opened the ledger (its table empty) leaves no grant behind.
        s.write(|tx| tx.make_retired("ledger_grants")).unwrap();
        s.write(upgrade).unwrap();
        assert!(s.read(|tx| grants(tx, None)).unwrap().is_empty());
        // The new layout round-trips, and a grant written as JSON before either (no layers) reads.
        let g = Grant { identity: "i".into(), verified_at: 1, layers: vec![[1; 32], [2; 32]], served: vec![true, false] };
        assert_eq!(postcard::from_bytes::<Grant>(&postcard::to_allocvec(&g).unwrap()).unwrap(), g);
        let json: Grant = serde_json::from_str(r#"{"identity":"i","verified_at":1}"#).unwrap();
        assert!(json.layers.is_empty() && json.served.is_empty());
        assert_eq!(serde_json::from_str::<Grant>(&serde_json::to_string(&g).unwrap()).unwrap(), g);
        // A byte string that is not whole layers is refused, not cut.
        let mut bad = postcard::to_allocvec(&Grant { layers: vec![], ..g.clone() }).unwrap();
        bad.truncate(bad.len() - 2);
        bad.extend([3u8, 9, 9, 9, 0]);
        assert!(postcard::from_bytes::<Grant>(&bad).is_err());
    }

    #[test]
    fn a_grant_key_has_exactly_four_parts_read_in_place() {
        let g = Grant { identity: String::new(), verified_at: 0, layers: vec![], served: vec![] };
        let e = GrantEntry::new(key(&["ns", "", "reg:5000/app", &d('m')]), g.clone()).unwrap();
        assert_eq!((e.namespace(), e.principal(), e.origin(), e.manifest()), ("ns", "", "reg:5000/app", d('m').as_str()));
        let e = GrantEntry::new("\0p\0\0".into(), g.clone()).unwrap();
        assert_eq!((e.namespace(), e.principal(), e.origin(), e.manifest()), ("", "p", "", ""));
        for bad in ["a\0b\0c", "a\0b\0c\0d\0e", ""] {
            assert_eq!(GrantEntry::new(bad.into(), g.clone()).unwrap_err(), bad);
        }
    }

    #[test]
    fn sha256_bytes_reads_what_the_hex_crate_reads() {
        let mut cases = vec![d('a'), d('A'), d('0'), d('f'), d('g'), "sha256:".into(), "sha512:00".into(), format!("sha256:{}", "ab".repeat(33))];
        cases.push(format!("sha256:{}", &"0123456789abcdefABCDEF".repeat(3)[..64]));
        cases.push(format!("sha256:{}", "a".repeat(63)));
        cases.push(format!("sha256:{}é", "a".repeat(62)));
        cases.push(format!("sha256:{} ", "a".repeat(63)));
        for c in cases {
            let mut want = [0u8; 32];
            let want = c.strip_prefix("sha256:").and_then(|h| hex::decode_to_slice(h, &mut want).ok().map(|()| want));
            assert_eq!(sha256_bytes(&c), want, "{c:?}");
        }
    }

    #[test]
    fn chain_id_arithmetic() {
        // Values from containerd's identity.ChainID for two diffIDs.
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let ids = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(ids[0], a);
        let expect = format!("sha256:{}", hex::encode(Sha256::digest(format!("{a} {b}").as_bytes())));
        assert_eq!(ids[1], expect);
        assert_eq!(chain_id(&a, &b), expect);
        assert_eq!(chain_id("", &b), b);
    }
}

//! ledger: what pullgate knows about images, kept in the metastore's ledger collections.
//! Blob origins (which origin served a blob's bytes, to which credential identities, or
//! anonymously), manifests (config, layers, diffIDs), layers (their blobs, public flag and the
//! manifests containing them), chains (chainID -> parent chain + diffID) and grants
//! ((namespace, principal, origin, manifest) -> identity, time verified). Every logical change
//! is one write transaction made by the caller; reads take any transaction.
use crate::credential::ANONYMOUS;
use crate::metastore::{key, split_key, Collection, LedgerRead, StoreError, WriteTx};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeSet;

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
    /// Origins the manifest was fetched from.
    pub origins: BTreeSet<String>,
    /// References it was fetched as (`host/repo:tag`), for messages.
    pub names: BTreeSet<String>,
}

/// How many manifests containing a layer are kept on its record (for messages and
/// `inspect`). Bounded so that a popular base layer's record stays small: the gate decides
/// membership from the granted manifests themselves.
pub const LAYER_MANIFEST_EXAMPLES: usize = 8;

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
    #[serde(default)]
    pub layers: Vec<[u8; 32]>,
    /// For each of `layers`: whether the grant's origin had already served one of the layer's
    /// blobs when the grant was written. Origins only ever gain blobs, so `true` stays true;
    /// `false` is checked again in the ledger.
    #[serde(default)]
    pub served: Vec<bool>,
}

/// The 32 bytes of a `sha256:<64 hex>` digest; None for any other form.
pub fn sha256_bytes(digest: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(digest.strip_prefix("sha256:")?, &mut out).ok()?;
    Some(out)
}

/// A grant with its key parts.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantEntry {
    pub namespace: String,
    pub principal: String,
    pub origin: String,
    pub manifest: String,
    pub grant: Grant,
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

pub fn record_blob(tx: &mut WriteTx, digest: &str, origin: &str, identity: &str, now: i64) -> Result<(), StoreError> {
    let k = key(&[digest, origin]);
    let mut rec: BlobOrigin = tx.get_val(Collection::BlobOrigins, &k)?.unwrap_or_default();
    rec.identities.insert(identity.to_string());
    rec.last = now;
    tx.put_val(Collection::BlobOrigins, &k, &rec)
}

pub fn manifest(tx: &impl LedgerRead, digest: &str) -> Result<Option<ManifestRec>, StoreError> {
    tx.get_val(Collection::Manifests, digest)
}

/// Manifests fetched as the image name `name` (`host/repo:tag`), or by digest.
pub fn manifests_named(tx: &impl LedgerRead, name: &str) -> Result<Vec<(String, ManifestRec)>, StoreError> {
    Ok(tx.scan::<ManifestRec>(Collection::Manifests, "")?.into_iter().filter(|(_, m)| m.names.contains(name)).collect())
}

pub fn layer(tx: &impl LedgerRead, diff_id: &str) -> Result<Option<LayerRec>, StoreError> {
    tx.get_val(Collection::Layers, diff_id)
}

pub fn chain(tx: &impl LedgerRead, chain_id: &str) -> Result<Option<ChainRec>, StoreError> {
    tx.get_val(Collection::Chains, chain_id)
}

/// The protected (not public) layer d with chainID(parent, d) == target, if any: the chainID
/// test for an extract whose target chain the ledger never recorded. Walks the protected-layer
/// keys hashing each, so its cost grows with the number of protected layers.
pub fn protected_layer_for_chain(tx: &impl LedgerRead, parent: &str, target: &str) -> Result<Option<String>, StoreError> {
    if parent.is_empty() {
        // A base layer's chainID is its diffID.
        return Ok(if tx.get_val::<()>(Collection::Protected, target)?.is_some() { Some(target.to_string()) } else { None });
    }
    let Some(want) = sha256_bytes(target) else { return Ok(None) };
    let mut prefix = Sha256::new();
    prefix.update(parent.as_bytes());
    prefix.update(b" ");
    tx.find_key(Collection::Protected, &mut |d| {
        let mut h = prefix.clone();
        h.update(d.as_bytes());
        h.finalize().as_slice() == want
    })
}

/// Keeps the protected-layer index in step with a layer's public flag.
fn index_protected(tx: &mut WriteTx, diff_id: &str, public: bool) -> Result<(), StoreError> {
    if public {
        tx.delete_val(Collection::Protected, diff_id)?;
        Ok(())
    } else {
        tx.put_val(Collection::Protected, diff_id, &())
    }
}

/// One-time upgrades of a ledger written by an earlier version: builds the protected-layer
/// index. Runs in the caller's write transaction; does nothing once done.
pub fn upgrade(tx: &mut WriteTx) -> Result<(), StoreError> {
    tx.once("ledger_protected_index", |tx| {
        for (d, l) in tx.scan::<LayerRec>(Collection::Layers, "")? {
            index_protected(tx, &d, l.public)?;
        }
        Ok(())
    })
}

/// Records a manifest whose blobs' origins are already recorded: its layers, chains, and
/// which layers are public (a blob of the layer was served anonymously somewhere).
pub fn record_manifest(tx: &mut WriteTx, digest: &str, m: &ManifestRec) -> Result<(), StoreError> {
    let mut rec = manifest(tx, digest)?.unwrap_or_else(|| ManifestRec { config: m.config.clone(), layers: m.layers.clone(), diff_ids: m.diff_ids.clone(), ..Default::default() });
    rec.origins.extend(m.origins.iter().cloned());
    rec.names.extend(m.names.iter().cloned());
    tx.put_val(Collection::Manifests, digest, &rec)?;
    let chains = chain_ids(&m.diff_ids);
    for (i, (blob, d)) in m.layers.iter().zip(&m.diff_ids).enumerate() {
        let mut l = layer(tx, d)?.unwrap_or_default();
        l.blobs.insert(blob.clone());
        if l.manifests.len() < LAYER_MANIFEST_EXAMPLES {
            l.manifests.insert(digest.to_string());
        }
        if !l.public {
            l.public = blob_origins(tx, blob)?.iter().any(|(_, o)| o.identities.contains(ANONYMOUS));
        }
        tx.put_val(Collection::Layers, d, &l)?;
        index_protected(tx, d, l.public)?;
        let parent = if i == 0 { String::new() } else { chains[i - 1].clone() };
        tx.put_val(Collection::Chains, &chains[i], &ChainRec { parent, diff_id: d.clone() })?;
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
    tx.put_val(Collection::Grants, &key(&[ns, principal, origin, manifest]), &g)
}

/// Grants of one namespace (all namespaces when `ns` is None).
pub fn grants(tx: &impl LedgerRead, ns: Option<&str>) -> Result<Vec<GrantEntry>, StoreError> {
    let prefix = ns.map(|n| key(&[n, ""])).unwrap_or_default();
    let mut out = Vec::new();
    for (k, grant) in tx.scan::<Grant>(Collection::Grants, &prefix)? {
        let p = split_key(&k);
        if p.len() != 4 {
            return Err(StoreError::Corrupt { key: k.replace('\0', "|"), reason: "grant key has not 4 parts".into() });
        }
        out.push(GrantEntry { namespace: p[0].into(), principal: p[1].into(), origin: p[2].into(), manifest: p[3].into(), grant });
    }
    Ok(out)
}

/// Removes the grants of `ns` matching `principal` (None: every principal) and `origin`
/// (None: every origin); returns how many.
pub fn revoke(tx: &mut WriteTx, ns: &str, principal: Option<&str>, origin: Option<&str>) -> Result<usize, StoreError> {
    let mut n = 0;
    for g in grants(tx, Some(ns))? {
        if principal.is_some_and(|p| p != g.principal) || origin.is_some_and(|o| o != g.origin) {
            continue;
        }
        tx.delete_val(Collection::Grants, &key(&[&g.namespace, &g.principal, &g.origin, &g.manifest]))?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

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

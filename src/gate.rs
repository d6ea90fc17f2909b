//! gate: the decision on Prepare and View. A protected layer (known to the ledger and not
//! public) may be materialised (extract) in namespace N only if N holds a fresh grant, at an
//! origin that served the layer's bytes, for a manifest containing it; a chain may be used
//! (container rootfs, view) by principal P only if (N, P) — or (N, "") namespace-wide, unless
//! the namespace requires principals — holds such a grant for every protected layer in it.
//! Layers pullgate has no record of follow the KEP-2535 policy. An unpack onto a parent whose
//! chain pullgate cannot establish is refused (it cannot tell which layer is being applied),
//! unless the policy is NeverVerify. Any ledger read error denies. A refusal names only what
//! the requester itself holds or asked for: never an image another tenant, or another
//! principal of its namespace, pulled.
use crate::defence::{off, Defence};
use crate::ledger::{self, LayerRec};
use crate::metastore::{LedgerRead, StoreError};
use crate::reference::AllowPattern;
use std::collections::HashSet;
use std::fmt;

/// KEP-2535's image pull credential verification policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum Policy {
    NeverVerify,
    #[default]
    NeverVerifyPreloadedImages,
    NeverVerifyAllowlistedImages,
    AlwaysVerify,
}

#[derive(Debug, Clone, Default)]
pub struct GateConfig {
    pub policy: Policy,
    pub allowlist: Vec<AllowPattern>,
    /// Grants older than this (nanoseconds) no longer count.
    pub reverify_after_ns: Option<i64>,
    pub require_principal: HashSet<String>,
    /// Namespaces whose principals are separate tenants (`k8s.io` under the CRI front, where
    /// each pod's namespace is one, and every namespace that requires principals): a refusal
    /// there names an image only from a grant of the requesting principal itself.
    pub tenant_principals: HashSet<String>,
    /// Namespaces where nothing counts as preloaded: those whose principals are tenants that
    /// reach containerd themselves (`require_principal`, outside the CRI front's namespace), so
    /// a layer unpacked there before pullgate knew it may be one principal's own unmediated
    /// pull, which must not become another principal's.
    pub no_preloaded: HashSet<String>,
}

/// Who asks.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    pub namespace: &'a str,
    pub principal: &'a str,
}

/// Why a request was refused; its Display is the message containerd's client shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Denial {
    pub namespace: String,
    pub principal: String,
    /// The layer (diffID) or chain concerned.
    pub subject: String,
    /// An image reference containing it, when known.
    pub image: Option<String>,
    pub reason: String,
    pub fix: String,
    /// The reason's class (a metrics label: a small fixed set).
    pub kind: DenyReason,
}

/// Why the gate refused, as a class: what `reason` says, without names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// No grant of the namespace (and principal) covers a private layer.
    NoGrant,
    /// The grant that covers it is older than `reverify_after`.
    StaleGrant,
    /// pullgate has no record of the layer and the policy verifies unknown layers.
    UnknownLayer,
    /// An unpack onto a parent whose chain pullgate cannot establish.
    UnestablishedParent,
    /// The namespace requires a principal and none was given.
    PrincipalRequired,
}

impl DenyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::NoGrant => "no_grant",
            DenyReason::StaleGrant => "stale_grant",
            DenyReason::UnknownLayer => "unknown_layer",
            DenyReason::UnestablishedParent => "unestablished_parent",
            DenyReason::PrincipalRequired => "principal_required",
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = if self.principal.is_empty() { "no principal".to_string() } else { format!("principal {:?}", self.principal) };
        write!(f, "pullgate denied namespace {:?} ({who}): {}", self.namespace, self.subject)?;
        if let Some(i) = &self.image {
            write!(f, " of image {i}")?;
        }
        write!(f, ": {}; to fix: {}", self.reason, self.fix)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("{0}")]
    Denied(Box<Denial>),
    #[error("pullgate denied the request: the ledger cannot be read ({0}); failing closed")]
    Ledger(#[from] StoreError),
}

/// What the gate knows about a chain (a snapshot's layers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChainInfo {
    /// chainID of the chain, empty when unknown.
    pub chain_id: String,
    /// Known layers (diffIDs), base first.
    pub diff_ids: Vec<String>,
    /// Layers pullgate has no record of.
    pub unknown_layers: u32,
    /// The snapshot exists but pullgate cannot establish which chain it holds (committed by a
    /// client outside an unpack, under a name that is not a chainID, or under a name that
    /// disagrees with the chain recorded when it was prepared): nothing is unpacked onto it.
    pub unestablished: bool,
    /// Layers among `diff_ids` that this namespace held unpacked before pullgate knew them
    /// (unpacked while pullgate had no record of them, known only since): under
    /// `NeverVerifyPreloadedImages` they are preloaded and need no grant, whoever pulled the
    /// same bytes since. Established by the snapshotter from its own records, never a claim.
    pub preloaded: Vec<String>,
    /// Its unpack steps could not be followed to look up again the layers they applied while
    /// pullgate had no record of them (a step committed under a name that is not its chain):
    /// its unknown layers may be ones pullgate now knows as private.
    pub unfollowed: bool,
}

pub struct Gate {
    pub cfg: GateConfig,
    /// Finds the layer an unpack of an unrecorded chain applies (see [`crate::chainindex`]).
    pub index: std::sync::Arc<crate::chainindex::ChainIndex>,
}

/// The grants of one namespace, read once per decision, each listing its manifest's layers
/// (and whether its origin had served them when the grant was written).
struct GrantView {
    entries: Vec<ledger::GrantEntry>,
    /// Per grant without raw layers (written before grants carried them, or a manifest with a
    /// diffID that is not sha256): its manifest's diffIDs, read on first use.
    manifest_layers: Vec<Option<Vec<String>>>,
}

/// A layer as the grants compare it: the diffID and its raw sha256, when it has one.
struct LayerId<'a> {
    diff_id: &'a str,
    raw: Option<[u8; 32]>,
}

impl<'a> LayerId<'a> {
    fn new(diff_id: &'a str) -> LayerId<'a> {
        LayerId { diff_id, raw: ledger::sha256_bytes(diff_id) }
    }
}

impl GrantView {
    /// Every grant of namespace `ns` (any of them lets the namespace materialise a layer).
    fn load(tx: &impl LedgerRead, ns: &str) -> Result<GrantView, StoreError> {
        Ok(GrantView::of(ledger::grants(tx, Some(ns))?))
    }

    /// The grants of namespace `ns` whose manifest contains one of `layers`, through the
    /// ledger's layer index: every grant an unpack step's decision on those layers can use
    /// (each check asks only about grants covering the layer it checks), read at a cost that
    /// does not grow with the namespace's other grants.
    fn load_covering(tx: &impl LedgerRead, ns: &str, layers: &[&str]) -> Result<GrantView, StoreError> {
        let mut seen = HashSet::new();
        let mut entries = Vec::new();
        for d in layers {
            for g in ledger::grants_with_layer(tx, ns, d)? {
                if seen.insert(g.key().to_string()) {
                    entries.push(g);
                }
            }
        }
        Ok(GrantView::of(entries))
    }

    /// The grants that can speak for `principal`'s use of a chain in `ns`: its own, and the
    /// namespace-wide ones unless the namespace requires principals. Read by key prefix, so a
    /// decision costs the same however many other principals (pods) hold grants there.
    fn load_for(tx: &impl LedgerRead, ns: &str, principal: &str, namespace_wide: bool) -> Result<GrantView, StoreError> {
        let mut entries = ledger::grants_of(tx, ns, principal)?;
        if namespace_wide && !principal.is_empty() {
            entries.extend(ledger::grants_of(tx, ns, "")?);
        }
        Ok(GrantView::of(entries))
    }

    fn of(entries: Vec<ledger::GrantEntry>) -> GrantView {
        GrantView { manifest_layers: vec![None; entries.len()], entries }
    }

    /// Whether the manifest of grant `i` contains layer `d`: None if not, else whether the
    /// grant's origin was known to have served it when the grant was written. A linear
    /// search: a manifest has tens of layers, and a hash index per decision costs more.
    fn covers(&mut self, tx: &impl LedgerRead, i: usize, d: &LayerId) -> Result<Option<bool>, StoreError> {
        if !self.entries[i].grant.layers.is_empty() {
            return Ok(self.recorded(i, d));
        }
        if self.manifest_layers[i].is_none() {
            let ids = ledger::manifest(tx, self.entries[i].manifest())?.map(|r| r.diff_ids).unwrap_or_default();
            self.manifest_layers[i] = Some(ids);
        }
        Ok(self.manifest_layers[i].as_ref().and_then(|ids| ids.iter().any(|x| x == d.diff_id).then_some(false)))
    }

    /// What grant `i` recorded of layer `d`: None if not among its layers, else whether its
    /// origin had served it.
    fn recorded(&self, i: usize, d: &LayerId) -> Option<bool> {
        let g = &self.entries[i].grant;
        let p = g.layers.iter().position(|l| Some(l) == d.raw.as_ref())?;
        Some(g.served.get(p).copied().unwrap_or(false))
    }

    /// Whether a grant for which `counts` holds lists `layers` as its first layers, each
    /// already served by its origin when the grant was written.
    fn covers_prefix(&self, layers: &[LayerId], counts: impl Fn(&ledger::GrantEntry) -> bool) -> bool {
        self.entries.iter().any(|g| lists_served_prefix(g, layers) && counts(g))
    }
}

/// Whether grant `g` lists `layers` as its first layers, each already served by its origin
/// when the grant was written.
fn lists_served_prefix(g: &ledger::GrantEntry, layers: &[LayerId]) -> bool {
    let (gl, served) = (&g.grant.layers, &g.grant.served);
    gl.len() >= layers.len()
        && served.len() >= layers.len()
        && layers.iter().zip(gl.iter().zip(served)).all(|(d, (l, s))| *s && d.raw.as_ref() == Some(l))
}

pub(crate) fn now_nanos() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

impl Gate {
    pub fn new(cfg: GateConfig) -> Gate {
        Gate { cfg, index: Default::default() }
    }

    fn deny(&self, s: &Subject, kind: DenyReason, subject: String, image: Option<String>, reason: String, fix: String) -> GateError {
        GateError::Denied(Box::new(Denial {
            kind,
            namespace: s.namespace.to_string(),
            principal: s.principal.to_string(),
            subject,
            image,
            reason,
            fix,
        }))
    }

    fn fix_verify(&self, s: &Subject, image: Option<&str>) -> String {
        let p = if s.principal.is_empty() { String::new() } else { format!(" --principal {}", s.principal) };
        format!("pullgate verify -n {}{p} --user USER:PASSWORD {}", s.namespace, image.unwrap_or("IMAGE"))
    }

    /// The answer to a question about an image `s` holds no grant for and pullgate knows no
    /// public image by: allowed under `NeverVerify`, else refused with the fix. It says nothing
    /// of whether another tenant pulled the image (see `pullgate check`).
    pub fn no_grant_for_image(&self, s: &Subject) -> Result<(), GateError> {
        if self.cfg.policy == Policy::NeverVerify {
            return Ok(());
        }
        Err(self.deny(
            s,
            DenyReason::NoGrant,
            "a layer".into(),
            None,
            "no grant of this namespace and principal covers the image, and pullgate knows no public image by that name (an image it has no record of may still run where the policy lets it)".into(),
            self.fix_verify(s, None),
        ))
    }

    /// Extract: which layer an unpack step with target chain `target` on top of `parent`
    /// applies, and whether namespace `s.namespace` may materialise it. Returns the new chain.
    pub fn extract(&self, tx: &impl LedgerRead, s: &Subject, parent: &ChainInfo, target: &str) -> Result<ChainInfo, GateError> {
        self.extract_hinted(tx, s, parent, target, &[])
    }

    /// [`Gate::extract`] with `hints`: layers (diffIDs) the request's labels say it applies
    /// (containerd 2.4's unpacker names the layer's diffID, CRI's the layer's blob, which
    /// pullgate's own pairing turns into a diffID). A hint is a claim: it is used only when
    /// chainID(parent, hint) == target, which proves (as far as sha256 does) that the hint is
    /// the layer applied; then no protected layer has to be looked for.
    pub fn extract_hinted(&self, tx: &impl LedgerRead, s: &Subject, parent: &ChainInfo, target: &str, hints: &[String]) -> Result<ChainInfo, GateError> {
        if parent.unestablished && self.cfg.policy != Policy::NeverVerify && !off(Defence::UnestablishedParent) {
            return Err(self.deny(
                s,
                DenyReason::UnestablishedParent,
                format!("layer chain {target}"),
                None,
                "its parent snapshot was not unpacked from an image (or its name disagrees with the chain it was prepared as), so pullgate cannot tell which layer is being applied".into(),
                format!("unpack the image from its first layer: pullgate pull -n {} --user USER:PASSWORD IMAGE", s.namespace),
            ));
        }
        let applied = self.applied_layer(tx, s.namespace, parent, target, hints, true)?;
        let layers: Vec<&str> = parent.diff_ids.iter().map(String::as_str).chain(applied.as_deref()).collect();
        if !off(Defence::Gate) && !self.extract_covered(tx, s, parent, &layers)? {
            let mut grants = GrantView::load_covering(tx, s.namespace, &layers)?;
            self.check_chain(tx, s, parent, applied.as_deref(), false, &mut grants)?;
        }
        let mut next = ChainInfo { chain_id: target.to_string(), diff_ids: parent.diff_ids.clone(), unknown_layers: parent.unknown_layers, ..Default::default() };
        match applied {
            Some(d) => next.diff_ids.push(d),
            None => {
                self.check_unknown(s, target)?;
                next.unknown_layers += 1;
            }
        }
        Ok(next)
    }

    /// The common case of an unpack step, decided through the ledger's layer index without
    /// reading the namespace's other grants: as `check_chain` first asks, one fresh grant of the
    /// namespace whose manifest starts with these layers, each served by its origin when the
    /// grant was written. The grants indexed under the top layer are read a page at a time,
    /// stopping at the first that qualifies (a chain with layers pullgate has no record of, or
    /// under `NeverVerify`, is left to `check_chain`).
    fn extract_covered(&self, tx: &impl LedgerRead, s: &Subject, parent: &ChainInfo, layers: &[&str]) -> Result<bool, StoreError> {
        let Some(top) = layers.last() else { return Ok(false) };
        if parent.unknown_layers > 0 || self.cfg.policy == Policy::NeverVerify {
            return Ok(false);
        }
        let ids: Vec<LayerId> = layers.iter().map(|d| LayerId::new(d)).collect();
        let now = now_nanos();
        let mut found = false;
        ledger::each_grant_with_layer(tx, s.namespace, top, &mut |g| {
            found = lists_served_prefix(&g, &ids) && self.fresh(g.grant.verified_at, now);
            !found
        })?;
        Ok(found)
    }

    /// Use: a container rootfs or a view on top of `parent`, by `s.principal`. In a namespace
    /// that requires principals, a request without one may use public layers only.
    pub fn use_chain(&self, tx: &impl LedgerRead, s: &Subject, parent: &ChainInfo) -> Result<(), GateError> {
        if off(Defence::Gate) {
            return Ok(());
        }
        let mut grants = GrantView::load_for(tx, s.namespace, s.principal, !self.cfg.require_principal.contains(s.namespace))?;
        match self.check_chain(tx, s, parent, None, true, &mut grants) {
            Err(GateError::Denied(mut d)) if s.principal.is_empty() && self.cfg.require_principal.contains(s.namespace) => {
                d.reason = format!("this namespace requires a principal, and no principal was given ({})", d.reason);
                d.kind = DenyReason::PrincipalRequired;
                d.fix = "run with --snapshotter-label containerd.io/snapshot/pullgate.principal=NAME (under Kubernetes: through pullgate's CRI socket)".into();
                Err(GateError::Denied(d))
            }
            other => other,
        }
    }

    /// Checks every layer of `chain`, then `extra` (the layer an extract adds).
    fn check_chain(&self, tx: &impl LedgerRead, s: &Subject, chain: &ChainInfo, extra: Option<&str>, per_principal: bool, grants: &mut GrantView) -> Result<(), GateError> {
        if chain.unknown_layers > 0 {
            let what = if chain.chain_id.is_empty() { "(unnamed chain)" } else { &chain.chain_id };
            if chain.unfollowed && self.cfg.no_preloaded.contains(s.namespace) && self.cfg.policy != Policy::NeverVerify {
                return Err(self.deny(
                    s,
                    DenyReason::UnknownLayer,
                    format!("layer chain {what}"),
                    None,
                    "pullgate cannot follow the unpack steps of this chain to look up the layers it applied unknown (a step committed under another name), and in this namespace a principal may have put them there".into(),
                    format!("unpack the image again from its first layer: pullgate pull -n {} --user USER:PASSWORD IMAGE", s.namespace),
                ));
            }
            self.check_unknown(s, what)?;
        }
        if self.cfg.policy == Policy::NeverVerify {
            return Ok(());
        }
        let layers: Vec<LayerId> = chain.diff_ids.iter().map(String::as_str).chain(extra).map(LayerId::new).collect();
        let now = now_nanos();
        // The common case, decided from the grants alone: one grant's manifest starts with
        // these layers, and its origin had served every one of them when it was written.
        if grants.covers_prefix(&layers, |g| self.grant_counts(s, g, per_principal, now)) {
            return Ok(());
        }
        // Layers the operator marked preloaded in this namespace (`pullgate preload`) count
        // under NeverVerifyPreloadedImages in every namespace: an operator's statement, not a
        // principal's pull.
        let marked = if self.cfg.policy == Policy::NeverVerifyPreloadedImages { ledger::preloaded_layers(tx, s.namespace)? } else { Default::default() };
        let preloaded = |d: &LayerId| (self.preloaded_counts(s) && chain.preloaded.iter().any(|p| p == d.diff_id)) || marked.contains(d.diff_id);
        for d in layers.iter().filter(|d| !preloaded(d)) {
            self.check_layer(tx, s, d, per_principal, grants, now)?;
        }
        Ok(())
    }

    /// Whether grant `g` may count for `s` now: its principal, and its age.
    fn grant_counts(&self, s: &Subject, g: &ledger::GrantEntry, per_principal: bool, now: i64) -> bool {
        self.principal_ok(s, g, per_principal) && self.fresh(g.grant.verified_at, now)
    }

    /// Whether grant `g` speaks for `s`: any grant of the namespace materialises; for use, the
    /// principal's own grants, and namespace-wide ones unless the namespace requires principals
    /// (where a request without a principal has no grant at all).
    fn principal_ok(&self, s: &Subject, g: &ledger::GrantEntry, per_principal: bool) -> bool {
        if !per_principal {
            return true;
        }
        if self.cfg.require_principal.contains(s.namespace) {
            return !s.principal.is_empty() && g.principal() == s.principal;
        }
        g.principal() == s.principal || g.principal().is_empty()
    }

    /// Whether layers the namespace held before pullgate knew them run without a grant there:
    /// under `NeverVerifyPreloadedImages`, outside the namespaces where a principal's own
    /// unmediated pull could have put them.
    pub fn preloaded_counts(&self, s: &Subject) -> bool {
        self.cfg.policy == Policy::NeverVerifyPreloadedImages && !self.cfg.no_preloaded.contains(s.namespace)
    }

    fn fresh(&self, verified_at: i64, now: i64) -> bool {
        self.cfg.reverify_after_ns.is_none_or(|age| now.saturating_sub(verified_at) <= age)
    }

    fn check_unknown(&self, s: &Subject, what: &str) -> Result<(), GateError> {
        match self.cfg.policy {
            Policy::NeverVerify | Policy::NeverVerifyPreloadedImages => Ok(()),
            Policy::NeverVerifyAllowlistedImages | Policy::AlwaysVerify => Err(self.deny(
                s,
                DenyReason::UnknownLayer,
                format!("layer chain {what}"),
                None,
                format!("pullgate has no record of this layer and the policy is {:?}", self.cfg.policy),
                format!("pullgate pull -n {} --user USER:PASSWORD IMAGE", s.namespace),
            )),
        }
    }

    /// The layer, if pullgate knows it now, that an unpack step from chain `parent` ("" for the
    /// base) to chain `target` applied: how a step unpacked while pullgate had no record of its
    /// layer is looked up again. From the ledger's chains and `hints` (layers a caller claims,
    /// confirmed by the chain arithmetic, protected ones only); with `thorough`, also from the
    /// chain index, whose tables cost a hash per protected layer on the node to build: asked
    /// only where it changes a decision (see [`Gate::looks_up_thoroughly`]).
    pub fn layer_of_step(&self, tx: &impl LedgerRead, namespace: &str, parent: &str, target: &str, hints: &[String], thorough: bool) -> Result<Option<String>, StoreError> {
        self.applied_layer(tx, namespace, &ChainInfo { chain_id: parent.to_string(), ..Default::default() }, target, hints, thorough)
    }

    /// Whether a chain's unknown steps in `namespace` are looked up with the chain index too:
    /// only where a layer found there would change the decision against the requester. Under
    /// `NeverVerifyPreloadedImages` a layer learnt after its step is preloaded, and under the
    /// other policies an unknown layer is refused already; in a namespace where nothing is
    /// preloaded it may be another principal's private layer.
    pub fn looks_up_thoroughly(&self, namespace: &str) -> bool {
        self.cfg.policy == Policy::NeverVerifyPreloadedImages && self.cfg.no_preloaded.contains(namespace)
    }

    /// The layer a target chainID adds to `parent`: from the ledger's chains, from a hint the
    /// chain arithmetic confirms, or from the chain index (as if every protected diffID d were
    /// tested for chainID(parent, d) == target). A known layer that is not protected is
    /// reported as unknown, as the test of protected layers alone would.
    /// Without `use_index`, the chain index is not asked (what it alone would find stays None).
    /// `namespace` is the requester's: the chain index keeps each namespace's tables within its
    /// share.
    fn applied_layer(&self, tx: &impl LedgerRead, namespace: &str, parent: &ChainInfo, target: &str, hints: &[String], use_index: bool) -> Result<Option<String>, StoreError> {
        if let Some(c) = ledger::chain(tx, target)? {
            if c.parent == parent.chain_id {
                return Ok(Some(c.diff_id));
            }
        }
        if parent.chain_id.is_empty() && (!parent.diff_ids.is_empty() || parent.unknown_layers > 0) {
            // The parent's own chain is unknown: the arithmetic cannot be done.
            return Ok(None);
        }
        if let Some(d) = hints.iter().find(|d| ledger::chain_id(&parent.chain_id, d) == target) {
            // The layer applied is d: it is what the index would find, if d is protected.
            return Ok(if ledger::is_protected(tx, d)? { Some(d.clone()) } else { None });
        }
        match use_index {
            true => self.index.protected_layer_for_chain_in(tx, namespace, &parent.chain_id, target),
            false => Ok(None),
        }
    }

    fn check_layer(&self, tx: &impl LedgerRead, s: &Subject, id: &LayerId, per_principal: bool, grants: &mut GrantView, now: i64) -> Result<(), GateError> {
        // A grant that recorded this layer as served allows it whatever its record says.
        if (0..grants.entries.len()).any(|i| grants.recorded(i, id) == Some(true) && self.grant_counts(s, &grants.entries[i], per_principal, now)) {
            return Ok(());
        }
        let d = id.diff_id;
        let Some(layer) = ledger::layer(tx, d)? else {
            return self.check_unknown(s, d);
        };
        if layer.public || self.cfg.policy == Policy::NeverVerify {
            return Ok(());
        }
        if self.cfg.policy == Policy::NeverVerifyAllowlistedImages
            && self.served_origins(tx, &layer)?.iter().any(|o| self.cfg.allowlist.iter().any(|a| a.matches(o)))
        {
            return Ok(());
        }
        let mut stale = false;
        for i in 0..grants.entries.len() {
            let principal_ok = self.principal_ok(s, &grants.entries[i], per_principal);
            // Cheapest test first: the principal, then manifest membership, then whether the
            // grant's origin served one of the layer's blobs (known at grant time, or asked now).
            let served = match if principal_ok { grants.covers(tx, i, id)? } else { None } {
                None => false,
                Some(true) => true,
                Some(false) => ledger::layer_served_by(tx, &layer, grants.entries[i].origin())?,
            };
            if served {
                if self.fresh(grants.entries[i].grant.verified_at, now) {
                    return Ok(());
                }
                stale = true;
            }
        }
        // The name for the message: where principals are separate tenants, from the requester's
        // own grants (loaded); elsewhere from any grant of the namespace, read for this refusal.
        let image = match self.cfg.tenant_principals.contains(s.namespace) || !per_principal {
            true => self.own_image_name(tx, s, grants, id)?,
            false => self.own_image_name(tx, s, &mut GrantView::load(tx, s.namespace)?, id)?,
        };
        let reason = if stale {
            "the grant for it is older than reverify_after".to_string()
        } else if per_principal {
            "no grant for this namespace and principal covers this private layer".to_string()
        } else {
            "no grant for this namespace covers this private layer".to_string()
        };
        let kind = if stale { DenyReason::StaleGrant } else { DenyReason::NoGrant };
        Err(self.deny(s, kind, format!("layer {d}"), image.clone(), reason, self.fix_verify(s, image.as_deref())))
    }

    fn served_origins(&self, tx: &impl LedgerRead, layer: &LayerRec) -> Result<HashSet<String>, StoreError> {
        let mut out = HashSet::new();
        for b in &layer.blobs {
            out.extend(ledger::blob_origins(tx, b)?.into_iter().map(|(o, _)| o));
        }
        Ok(out)
    }

    /// A name of an image containing layer `d` that the requester itself verified (any grant of
    /// its namespace; where principals are separate tenants, a grant of its own principal only),
    /// as fetched from that grant's origin, for the message; never a name another tenant, or
    /// another pod, fetched it as.
    fn own_image_name(&self, tx: &impl LedgerRead, s: &Subject, grants: &mut GrantView, d: &LayerId) -> Result<Option<String>, StoreError> {
        for i in 0..grants.entries.len() {
            let own = !self.cfg.tenant_principals.contains(s.namespace) || self.principal_ok(s, &grants.entries[i], true);
            if own && grants.covers(tx, i, d)?.is_some() {
                if let Some(rec) = ledger::manifest(tx, grants.entries[i].manifest())? {
                    let origin = grants.entries[i].origin();
                    if let Some((_, n)) = rec.names.iter().map(|e| ledger::split_name(e)).find(|(o, _)| *o == Some(origin)) {
                        return Ok(Some(n.to_string()));
                    }
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{record_blob, record_manifest, put_grant, ManifestRec};
    use crate::metastore::MetaStore;

    const ORIGIN: &str = "reg:5000/private/app";
    fn d(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    /// A ledger with one private image (layers a, b with blobs A, B) served by ORIGIN to alice,
    /// and a public image (layer p) served anonymously.
    fn ledger() -> (tempfile::TempDir, MetaStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = MetaStore::open(&dir.path().join("m.redb")).unwrap();
        s.write(|tx| -> Result<(), ledger::LedgerError> {
            // A current ledger: its one-time upgrades ran when it was created.
            ledger::upgrade(tx)?;
            for (blob, layer) in [('A', 'a'), ('B', 'b'), ('P', 'p')] {
                ledger::record_pairing(tx, &crate::diffid::Verified::for_test(&d(blob), &d(layer)))?;
            }
            for blob in [d('A'), d('B'), d('C')] {
                record_blob(tx, &blob, ORIGIN, "hmac-sha256:alice", 1)?;
            }
            record_blob(tx, &d('P'), "reg:5000/public/base", crate::credential::ANONYMOUS, 1)?;
            record_manifest(tx, &d('m'), &ManifestRec {
                config: d('C'),
                layers: vec![d('A'), d('B')],
                diff_ids: vec![d('a'), d('b')],
                origins: [ORIGIN.to_string()].into(),
                names: [ledger::name_entry(ORIGIN, &format!("{ORIGIN}:v1"))].into(),
            })?;
            record_manifest(tx, &d('n'), &ManifestRec {
                config: d('Q'),
                layers: vec![d('P')],
                diff_ids: vec![d('p')],
                origins: ["reg:5000/public/base".to_string()].into(),
                names: [ledger::name_entry("reg:5000/public/base", "reg:5000/public/base:v1")].into(),
            })?;
            Ok(())
        })
        .unwrap();
        (dir, s)
    }

    fn grant(s: &MetaStore, ns: &str, principal: &str, origin: &str, at: i64) {
        s.write(|tx| put_grant(tx, ns, principal, origin, &d('m'), "hmac-sha256:x", at)).unwrap();
    }

    fn chain_ab() -> ChainInfo {
        ChainInfo { chain_id: ledger::chain_ids(&[d('a'), d('b')])[1].clone(), diff_ids: vec![d('a'), d('b')], ..Default::default() }
    }

    fn gate(policy: Policy) -> Gate {
        Gate::new(GateConfig { policy, ..Default::default() })
    }

    fn subj<'a>(ns: &'a str, p: &'a str) -> Subject<'a> {
        Subject { namespace: ns, principal: p }
    }

    fn denied(r: Result<impl std::fmt::Debug, GateError>) -> String {
        match r {
            Err(GateError::Denied(d)) => d.to_string(),
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn unknown_layers_follow_policy() {
        let (_d, s) = ledger();
        let unknown = d('z');
        s.read(|tx| -> Result<(), StoreError> {
            let base = ChainInfo::default();
            assert!(gate(Policy::NeverVerifyPreloadedImages).extract(tx, &subj("b", ""), &base, &unknown).is_ok());
            assert!(gate(Policy::NeverVerify).extract(tx, &subj("b", ""), &base, &unknown).is_ok());
            let m = denied(gate(Policy::AlwaysVerify).extract(tx, &subj("b", ""), &base, &unknown));
            assert!(m.contains("no record") && m.contains("pullgate pull"), "{m}");
            assert!(gate(Policy::NeverVerifyAllowlistedImages).extract(tx, &subj("b", ""), &base, &unknown).is_err());
            let pre = ChainInfo { chain_id: String::new(), diff_ids: vec![], unknown_layers: 2, ..Default::default() };
            assert!(gate(Policy::NeverVerifyPreloadedImages).use_chain(tx, &subj("b", ""), &pre).is_ok());
            assert!(gate(Policy::AlwaysVerify).use_chain(tx, &subj("b", ""), &pre).is_err());
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn protected_layers_need_a_grant_at_a_serving_origin() {
        let (_d, s) = ledger();
        let g = gate(Policy::NeverVerifyPreloadedImages);
        let m = s.read(|tx| Ok::<_, StoreError>(denied(g.extract(tx, &subj("b", ""), &ChainInfo::default(), &d('a'))))).unwrap();
        assert!(m.contains("namespace \"b\"") && m.contains(&d('a')) && m.contains("pullgate verify -n b"), "{m}");
        // The image is another tenant's: the refusal does not name it.
        assert!(!m.contains("private/app") && m.contains("IMAGE"), "{m}");
        // A grant at an origin that never served the bytes grants nothing.
        grant(&s, "b", "", "evil:5000/x", 1 << 62);
        s.read(|tx| Ok::<_, StoreError>(denied(g.use_chain(tx, &subj("b", ""), &chain_ab())))).unwrap();
        grant(&s, "b", "", ORIGIN, 1 << 62);
        s.read(|tx| -> Result<(), StoreError> {
            let next = g.extract(tx, &subj("b", ""), &ChainInfo::default(), &d('a')).unwrap();
            assert_eq!(next.diff_ids, vec![d('a')]);
            assert_eq!(next.chain_id, d('a'));
            g.use_chain(tx, &subj("b", "any-pod"), &chain_ab()).unwrap();
            // Other namespaces are unaffected.
            denied(g.use_chain(tx, &subj("c", ""), &chain_ab()));
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn principals_and_require_principal() {
        let (_d, s) = ledger();
        grant(&s, "n", "p1", ORIGIN, 1 << 62);
        let mut g = gate(Policy::NeverVerifyPreloadedImages);
        s.read(|tx| -> Result<(), StoreError> {
            g.use_chain(tx, &subj("n", "p1"), &chain_ab()).unwrap();
            denied(g.use_chain(tx, &subj("n", "p2"), &chain_ab()));
            denied(g.use_chain(tx, &subj("n", ""), &chain_ab()));
            // Materialising needs any principal's grant in the namespace.
            g.extract(tx, &subj("n", ""), &ChainInfo::default(), &d('a')).unwrap();
            Ok(())
        })
        .unwrap();
        grant(&s, "n", "", ORIGIN, 1 << 62);
        g.cfg.require_principal.insert("n".into());
        s.read(|tx| -> Result<(), StoreError> {
            let m = denied(g.use_chain(tx, &subj("n", ""), &chain_ab()));
            assert!(m.contains("requires a principal"), "{m}");
            // Public layers need no principal (a pod's sandbox image, a public app image).
            let public = ChainInfo { diff_ids: vec![d('p')], ..Default::default() };
            g.use_chain(tx, &subj("n", ""), &public).unwrap();
            // Namespace-wide grants do not count where principals are required.
            denied(g.use_chain(tx, &subj("n", "p2"), &chain_ab()));
            g.use_chain(tx, &subj("n", "p1"), &chain_ab()).unwrap();
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn public_layers_and_allowlist_and_age() {
        let (_d, s) = ledger();
        s.read(|tx| -> Result<(), StoreError> {
            gate(Policy::AlwaysVerify).extract(tx, &subj("x", ""), &ChainInfo::default(), &d('p')).unwrap();
            let mut g = gate(Policy::NeverVerifyAllowlistedImages);
            denied(g.use_chain(tx, &subj("x", ""), &chain_ab()));
            g.cfg.allowlist = vec![AllowPattern::parse("reg:5000/private/*").unwrap()];
            g.use_chain(tx, &subj("x", ""), &chain_ab()).unwrap();
            Ok(())
        })
        .unwrap();
        grant(&s, "old", "", ORIGIN, 1);
        let g = Gate::new(GateConfig { reverify_after_ns: Some(60_000_000_000), ..Default::default() });
        let m = s.read(|tx| Ok::<_, StoreError>(denied(g.use_chain(tx, &subj("old", ""), &chain_ab())))).unwrap();
        assert!(m.contains("reverify_after"), "{m}");
        // The namespace verified this image itself (its grant aged out): the refusal names it.
        assert!(m.contains(&format!("{ORIGIN}:v1")), "{m}");
        // Without reverify_after the same old grant still counts.
        let g = gate(Policy::NeverVerifyPreloadedImages);
        s.read(|tx| Ok::<_, StoreError>(g.use_chain(tx, &subj("old", ""), &chain_ab()).unwrap())).unwrap();
    }

    #[test]
    fn chain_arithmetic_identifies_a_protected_layer_on_an_unknown_base() {
        let (_d, s) = ledger();
        let g = gate(Policy::NeverVerifyPreloadedImages);
        // An attacker's manifest stacks private layer b on its own base x: the chain is new.
        let base = ChainInfo { chain_id: d('x'), diff_ids: vec![], unknown_layers: 1, ..Default::default() };
        let target = ledger::chain_id(&d('x'), &d('b'));
        let m = s.read(|tx| Ok::<_, StoreError>(denied(g.extract(tx, &subj("b", ""), &base, &target)))).unwrap();
        assert!(m.contains(&d('b')), "{m}");
        // A genuinely unknown layer on that base is allowed under the default policy.
        let other = ledger::chain_id(&d('x'), &d('y'));
        let next = s.read(|tx| Ok::<_, StoreError>(g.extract(tx, &subj("b", ""), &base, &other).unwrap())).unwrap();
        assert_eq!(next.unknown_layers, 2);
    }

    #[test]
    fn a_layer_label_is_a_hint_the_chain_arithmetic_must_confirm() {
        let (_d, s) = ledger();
        let g = gate(Policy::NeverVerifyPreloadedImages);
        let base = ChainInfo { chain_id: d('x'), diff_ids: vec![], unknown_layers: 1, ..Default::default() };
        let target = ledger::chain_id(&d('x'), &d('b'));
        // Labels naming the public layer p, an unknown layer, or a malformed one, for an unpack
        // that applies private layer b: refused all the same, naming b.
        for hint in [d('p'), d('z'), "b".to_string()] {
            let m = s.read(|tx| Ok::<_, StoreError>(denied(g.extract_hinted(tx, &subj("b", ""), &base, &target, &[hint.clone()])))).unwrap();
            assert!(m.contains(&d('b')), "{m}");
        }
        // The true label decides without the chain index.
        g.index.clear();
        let built = g.index.stats().built_in_decision;
        s.read(|tx| Ok::<_, StoreError>(denied(g.extract_hinted(tx, &subj("b", ""), &base, &target, &[d('p'), d('b')])))).unwrap();
        assert_eq!(g.index.stats().built_in_decision, built);
        // With a grant the same unpack is allowed, and applies b.
        grant(&s, "b", "", ORIGIN, 1 << 62);
        let next = s.read(|tx| Ok::<_, StoreError>(g.extract_hinted(tx, &subj("b", ""), &base, &target, &[d('b')]).unwrap())).unwrap();
        assert_eq!((next.diff_ids, next.unknown_layers), (vec![d('b')], 1));
        // A true label of a public layer: unknown, as the test of protected layers says.
        let pt = ledger::chain_id(&d('x'), &d('p'));
        let next = s.read(|tx| Ok::<_, StoreError>(g.extract_hinted(tx, &subj("c", ""), &base, &pt, &[d('p')]).unwrap())).unwrap();
        assert_eq!((next.diff_ids.len(), next.unknown_layers), (0, 2));
    }

    #[test]
    fn a_refusal_names_the_image_as_this_namespace_fetched_it() {
        let (_d, s) = ledger();
        // The same manifest fetched by another tenant from a second repository (listed first).
        let other = "reg:5000/aaa/copy";
        s.write(|tx| -> Result<(), ledger::LedgerError> {
            for blob in [d('A'), d('B'), d('C')] {
                record_blob(tx, &blob, other, "hmac-sha256:bob", 1)?;
            }
            record_manifest(tx, &d('m'), &ManifestRec { config: d('C'), layers: vec![d('A'), d('B')], diff_ids: vec![d('a'), d('b')], origins: [other.to_string()].into(), names: [ledger::name_entry(other, &format!("{other}:v1"))].into() })
        })
        .unwrap();
        // Namespace n verified it at ORIGIN for principal p1; p2 is refused, and told the name
        // its namespace fetched it as (one tenant, several principals).
        grant(&s, "n", "p1", ORIGIN, 1);
        let m = s.read(|tx| Ok::<_, StoreError>(denied(gate(Policy::NeverVerifyPreloadedImages).use_chain(tx, &subj("n", "p2"), &chain_ab())))).unwrap();
        assert!(m.contains(&format!("{ORIGIN}:v1")) && !m.contains("aaa/copy"), "{m}");
        // Where principals are tenants of their own (k8s.io's pods), p2 is told no name: p1's
        // grant is another pod's.
        let pods = Gate::new(GateConfig { tenant_principals: ["n".to_string()].into(), ..Default::default() });
        let m = s.read(|tx| Ok::<_, StoreError>(denied(pods.use_chain(tx, &subj("n", "p2"), &chain_ab())))).unwrap();
        assert!(!m.contains("private/app") && !m.contains("aaa/copy") && m.contains(" IMAGE"), "{m}");
        // p1 itself, refused once its grant is stale, is told the name it fetched.
        let stale = Gate::new(GateConfig { reverify_after_ns: Some(1), tenant_principals: ["n".to_string()].into(), ..Default::default() });
        let m = s.read(|tx| Ok::<_, StoreError>(denied(stale.use_chain(tx, &subj("n", "p1"), &chain_ab())))).unwrap();
        assert!(m.contains(&format!("{ORIGIN}:v1")) && !m.contains("aaa/copy") && m.contains("older than"), "{m}");
    }

    #[test]
    fn layers_the_operator_marked_preloaded_run_without_a_grant_in_that_namespace_only() {
        let (_d, s) = ledger();
        let by = |policy: Policy| Gate::new(GateConfig { policy, require_principal: ["n".to_string()].into(), no_preloaded: ["n".to_string()].into(), ..Default::default() });
        let run = |g: &Gate, ns: &str, p: &str| s.read(|tx| Ok::<_, StoreError>(g.use_chain(tx, &subj(ns, p), &chain_ab()).map_err(|e| e.to_string()))).unwrap();
        let g = by(Policy::NeverVerifyPreloadedImages);
        assert!(run(&g, "n", "pod").is_err_and(|e| e.contains("no grant")), "{:?}", run(&g, "n", "pod"));
        // Only a manifest whose every blob pullgate hashed has layers to mark (the ledger
        // records no other).
        assert!(s.write(|tx| record_manifest(tx, &d('x'), &ManifestRec { config: d('C'), layers: vec![d('X')], diff_ids: vec![d('a')], ..Default::default() })).is_err());
        assert_eq!(s.read(|tx| ledger::established_layers(tx, &d('x'))).unwrap(), None);
        let layers = s.read(|tx| ledger::established_layers(tx, &d('m'))).unwrap().unwrap();
        assert_eq!(layers, [d('a'), d('b')]);
        s.write(|tx| ledger::mark_preloaded(tx, "n", &d('m'), &ledger::Preload { reference: format!("{ORIGIN}:v1"), diff_ids: layers.clone(), marked_at: 1 })).unwrap();
        // Every principal of the namespace, even where principals' own pulls preload nothing.
        for p in ["pod", "other", ""] {
            assert_eq!(run(&g, "n", p), Ok(()));
        }
        assert!(run(&g, "elsewhere", "").is_err(), "a mark is the namespace's own");
        assert!(run(&by(Policy::AlwaysVerify), "n", "pod").is_err(), "AlwaysVerify exempts nothing");
        assert!(run(&by(Policy::NeverVerifyAllowlistedImages), "n", "pod").is_err());
        let marks = s.read(|tx| ledger::preloads(tx, None)).unwrap();
        assert_eq!(marks.len(), 1);
        assert_eq!((marks[0].namespace.as_str(), marks[0].manifest.as_str()), ("n", d('m').as_str()));
        // The same name marked again once it names another manifest: the earlier mark goes
        // (marks do not pile up as a tag moves); marking it again changes nothing more.
        let mark = |m: char, r: &str| s.write(|tx| ledger::mark_preloaded(tx, "n", &d(m), &ledger::Preload { reference: r.to_string(), diff_ids: vec![d('z')], marked_at: 2 })).unwrap();
        assert_eq!(mark('o', "other:v1"), Vec::<String>::new());
        assert_eq!(mark('q', &format!("{ORIGIN}:v1")), [d('m')]);
        assert!(run(&g, "n", "pod").is_err(), "the moved name's old layers are no longer preloaded");
        assert_eq!(mark('m', &format!("{ORIGIN}:v1")), [d('q')]);
        assert_eq!(mark('m', &format!("{ORIGIN}:v1")), Vec::<String>::new());
        let left: Vec<String> = s.read(|tx| ledger::preloads(tx, Some("n"))).unwrap().into_iter().map(|e| e.manifest).collect();
        assert_eq!(left.len(), 2, "{left:?}: the other name's mark stays");
        assert_eq!(s.write(|tx| ledger::unmark_preloaded(tx, "elsewhere", &|_| true)).unwrap(), 0);
        assert_eq!(s.write(|tx| ledger::unmark_preloaded(tx, "n", &|e| e.manifest == d('m'))).unwrap(), 1);
        assert!(run(&g, "n", "pod").is_err(), "the mark removed, the grant is needed again");
    }

    #[test]
    fn nothing_is_unpacked_onto_a_parent_whose_chain_is_unknown() {
        let (_d, s) = ledger();
        grant(&s, "n", "", ORIGIN, 1 << 62);
        let parent = ChainInfo { unestablished: true, ..Default::default() };
        for policy in [Policy::NeverVerifyPreloadedImages, Policy::AlwaysVerify, Policy::NeverVerifyAllowlistedImages] {
            // Even a public layer, even with a grant: the layer applied cannot be told.
            let m = s.read(|tx| Ok::<_, StoreError>(denied(gate(policy).extract(tx, &subj("n", ""), &parent, &d('p'))))).unwrap();
            assert!(m.contains("parent snapshot was not unpacked from an image"), "{m}");
        }
        s.read(|tx| Ok::<_, StoreError>(gate(Policy::NeverVerify).extract(tx, &subj("n", ""), &parent, &d('p')).unwrap())).unwrap();
    }

    #[test]
    fn grants_decide_from_their_own_layers_and_learn_later_serving() {
        let (_d, s) = ledger();
        let g = gate(Policy::NeverVerifyPreloadedImages);
        // A grant at a mirror that had not served the blobs when the grant was written...
        let mirror = "mirror:5000/private/app";
        grant(&s, "m", "", mirror, 1 << 62);
        s.read(|tx| Ok::<_, StoreError>(denied(g.use_chain(tx, &subj("m", ""), &chain_ab())))).unwrap();
        // ...counts once that mirror has served them (served-ness is checked again, not cached).
        s.write(|tx| -> Result<(), StoreError> {
            record_blob(tx, &d('A'), mirror, "hmac-sha256:y", 2)?;
            record_blob(tx, &d('B'), mirror, "hmac-sha256:y", 2)
        })
        .unwrap();
        s.read(|tx| Ok::<_, StoreError>(g.use_chain(tx, &subj("m", ""), &chain_ab()).unwrap())).unwrap();
        // A grant stored without its layers (written before grants carried them) reads the manifest.
        s.write(|tx| {
            let k = crate::metastore::key(&["old", "", ORIGIN, &d('m')]);
            tx.put_val(crate::metastore::Collection::Grants, &k, &ledger::Grant { identity: "hmac-sha256:x".into(), verified_at: 1 << 62, layers: vec![], served: vec![] })
        })
        .unwrap();
        // (As a start finds it: the layer index is built again for the grants there are.)
        s.write(ledger::upgrade).unwrap();
        s.read(|tx| -> Result<(), StoreError> {
            g.use_chain(tx, &subj("old", ""), &chain_ab()).unwrap();
            g.extract(tx, &subj("old", ""), &ChainInfo::default(), &d('a')).unwrap();
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn protected_index_is_rebuilt_for_an_older_ledger() {
        let (_d, s) = ledger();
        let g = gate(Policy::NeverVerifyPreloadedImages);
        let base = ChainInfo { chain_id: d('x'), diff_ids: vec![], unknown_layers: 1, ..Default::default() };
        let target = ledger::chain_id(&d('x'), &d('b'));
        // A ledger from before the index: drop it and the upgrade marker, then upgrade.
        s.write(|tx| -> Result<(), StoreError> {
            for l in [d('a'), d('b'), d('p')] {
                tx.delete_val(crate::metastore::Collection::Protected, &l)?;
            }
            tx.set_counter("ledger_protected_index", 0)
        })
        .unwrap();
        let next = s.read(|tx| Ok::<_, StoreError>(g.extract(tx, &subj("b", ""), &base, &target).unwrap())).unwrap();
        assert_eq!(next.unknown_layers, 2, "without the index the layer is not recognised");
        s.write(ledger::upgrade).unwrap();
        s.read(|tx| Ok::<_, StoreError>(denied(g.extract(tx, &subj("b", ""), &base, &target)))).unwrap();
        // The public layer is not indexed: on an unknown base it is simply unknown.
        let pub_target = ledger::chain_id(&d('x'), &d('p'));
        s.read(|tx| Ok::<_, StoreError>(g.extract(tx, &subj("b", ""), &base, &pub_target).unwrap())).unwrap();
    }

    #[test]
    fn unreadable_ledger_denies() {
        struct Broken;
        impl LedgerRead for Broken {
            fn range_from<V: serde::de::DeserializeOwned>(&self, _c: crate::metastore::Collection, k: &str, _l: usize) -> Result<Vec<(String, V)>, StoreError> {
                Err(StoreError::Corrupt { key: k.into(), reason: "test".into() })
            }
            fn last_key(&self, _c: crate::metastore::Collection) -> Result<Option<String>, StoreError> {
                Err(StoreError::Corrupt { key: String::new(), reason: "test".into() })
            }
            fn find_key(&self, _c: crate::metastore::Collection, _p: &mut dyn FnMut(&str) -> bool) -> Result<Option<String>, StoreError> {
                Err(StoreError::Corrupt { key: String::new(), reason: "test".into() })
            }
            fn get_val<V: serde::de::DeserializeOwned>(&self, _c: crate::metastore::Collection, k: &str) -> Result<Option<V>, StoreError> {
                Err(StoreError::Corrupt { key: k.into(), reason: "test".into() })
            }
            fn scan<V: serde::de::DeserializeOwned>(&self, _c: crate::metastore::Collection, p: &str) -> Result<Vec<(String, V)>, StoreError> {
                Err(StoreError::Corrupt { key: p.into(), reason: "test".into() })
            }
        }
        let r = gate(Policy::NeverVerifyPreloadedImages).use_chain(&Broken, &subj("b", ""), &chain_ab());
        assert!(matches!(r, Err(GateError::Ledger(_))));
        assert!(r.unwrap_err().to_string().contains("failing closed"));
    }
}

//! document: one reading of every image document (manifest, index, config). pullgate reads
//! them with serde; containerd reads them with Go's encoding/json, which matches object keys to
//! struct fields case-insensitively (Unicode simple folding: `ſ` U+017F is `s`, the Kelvin sign
//! U+212A is `k`), lets a repeated key overwrite the earlier one, and ignores unknown keys.
//! serde is case-sensitive and refuses only exact duplicates. A document the two read
//! differently is two images: one that pullgate decides and one that containerd runs. This
//! module owns the rule, and every path that reads a manifest, index or config (pull, verify,
//! the CRI front's PullImage and CreateContainer) goes through it:
//! - a key that names a field containerd reads must spell it exactly (no case variant, no
//!   folding character), and each field at most once;
//! - no object repeats a key (maps included: annotations, labels);
//! - a document is read as the media type it was served or stored as, one of the four
//!   containerd reads (else refused, as containerd refuses it); its own `mediaType`, when
//!   present, is that one, and a manifest holds no `manifests` nor an index `config` or
//!   `layers` (containerd's own check);
//! - an index names at most one image for a platform as containerd matches platforms
//!   (architecture aliases normalised), so both pick the same entry.
//!
//! Anything else that could mean two things is refused before it is parsed, with the path of
//! the offending key. Written by hand: no crate reads JSON as Go does, and serde_json's `Value`
//! drops duplicate keys before anyone can see them.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DocumentError {
    #[error("{what} is not valid JSON: {reason}")]
    Json { what: &'static str, reason: String },
    #[error("{what} has key {key:?} at {path}, which containerd reads as field {field:?} (Go matches keys case-insensitively) and pullgate would not; refusing a document that means two things")]
    CaseVariant { what: &'static str, path: String, key: String, field: &'static str },
    #[error("{what} repeats key {key} at {path} (containerd keeps the last one); refusing a document that means two things")]
    Duplicate { what: &'static str, path: String, key: String },
    #[error("{what} says its media type is {inner}, but it was served or stored as {declared}")]
    MediaType { what: &'static str, inner: String, declared: String },
    #[error("{what} was served or stored as media type {declared}, which containerd does not read as an image manifest or index")]
    UnknownMediaType { what: &'static str, declared: String },
    #[error("{what} of media type {declared:?} has a {field:?} field that only another kind of document has")]
    WrongKind { what: &'static str, declared: String, field: &'static str },
    #[error("index lists a manifest for platform {platform} that needs OS features (containerd 2.4 passes over it, earlier versions choose it)")]
    OsFeatures { platform: String },
    #[error("{what} has a descriptor of size {size}, larger than containerd reads (a signed 64-bit number)")]
    Size { what: &'static str, size: u64 },
    #[error("index lists {count} different manifests for platform {platform} (containerd and pullgate could choose different ones)")]
    AmbiguousPlatform { platform: String, count: usize },
    #[error("{what} is a Docker schema 1 manifest, which pullgate does not read (containerd 2.x does not pull schema 1 either): push the image again with a current client, as schema 2 or OCI")]
    Schema1 { what: &'static str },
    #[error("{what}: {reason}")]
    Parse { what: &'static str, reason: String },
}

type Result<T> = std::result::Result<T, DocumentError>;

/// A JSON value as written, every key of every object kept in order (duplicates included).
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Scalar,
    Null,
    Str(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Node, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_unit<E>(self) -> std::result::Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Node, E> {
                Ok(Node::Str(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> std::result::Result<Node, E> {
                Ok(Node::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> std::result::Result<Node, A::Error> {
                let mut out = Vec::new();
                while let Some(n) = a.next_element()? {
                    out.push(n);
                }
                Ok(Node::Array(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> std::result::Result<Node, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Node>()? {
                    out.push((k, v));
                }
                Ok(Node::Object(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Node {
    fn get(&self, field: &str) -> Option<&Node> {
        match self {
            Node::Object(kv) => kv.iter().rev().find(|(k, _)| k == field).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Whether any object at any depth has a key for which `want` holds.
    fn has_key(&self, want: &dyn Fn(&str) -> bool) -> bool {
        match self {
            Node::Object(kv) => kv.iter().any(|(k, v)| want(k) || v.has_key(want)),
            Node::Array(items) => items.iter().any(|n| n.has_key(want)),
            Node::Scalar | Node::Null | Node::Str(_) => false,
        }
    }

    fn str(&self, field: &str) -> Option<&str> {
        match self.get(field) {
            Some(Node::Str(s)) => Some(s),
            _ => None,
        }
    }
}

/// The shapes of the Go structs containerd decodes these documents into (image-spec's
/// `Manifest`, `Index`, `Descriptor`, `Platform`, `Image`, `ImageConfig`, `RootFS`, `History`,
/// and the fields containerd's own media-type check reads).
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// A manifest or an index (containerd decides which from the media type, and checks the
    /// fields of both): every field either has.
    Top,
    Descriptor,
    Descriptors,
    Platform,
    Image,
    ImageConfig,
    RootFs,
    History,
    Histories,
    /// A `map[string]...`: keys are data, matched exactly by both readers.
    Map,
    /// A value whose inside neither reader matches against struct fields.
    Leaf,
}

impl Shape {
    fn fields(self) -> &'static [(&'static str, Shape)] {
        use Shape::*;
        match self {
            Top => &[
                ("schemaVersion", Leaf),
                ("mediaType", Leaf),
                ("artifactType", Leaf),
                ("config", Descriptor),
                ("layers", Descriptors),
                ("manifests", Descriptors),
                ("subject", Descriptor),
                ("annotations", Map),
                ("fsLayers", Leaf),
            ],
            Descriptor => &[
                ("mediaType", Leaf),
                ("digest", Leaf),
                ("size", Leaf),
                ("urls", Leaf),
                ("annotations", Map),
                ("data", Leaf),
                ("platform", Platform),
                ("artifactType", Leaf),
            ],
            Platform => &[
                ("architecture", Leaf),
                ("os", Leaf),
                ("os.version", Leaf),
                ("os.features", Leaf),
                ("variant", Leaf),
                ("features", Leaf),
            ],
            Image => &[
                ("created", Leaf),
                ("author", Leaf),
                ("architecture", Leaf),
                ("os", Leaf),
                ("os.version", Leaf),
                ("os.features", Leaf),
                ("variant", Leaf),
                ("config", ImageConfig),
                ("rootfs", RootFs),
                ("history", Histories),
            ],
            ImageConfig => &[
                ("User", Leaf),
                ("ExposedPorts", Map),
                ("Env", Leaf),
                ("Entrypoint", Leaf),
                ("Cmd", Leaf),
                ("Volumes", Map),
                ("WorkingDir", Leaf),
                ("Labels", Map),
                ("StopSignal", Leaf),
                ("ArgsEscaped", Leaf),
            ],
            RootFs => &[("type", Leaf), ("diff_ids", Leaf)],
            History => &[("created", Leaf), ("created_by", Leaf), ("author", Leaf), ("comment", Leaf), ("empty_layer", Leaf)],
            Descriptors | Histories | Map | Leaf => &[],
        }
    }
}

/// Go's key folding (encoding/json's `foldName`: every rune to the smallest of its simple case
/// folding orbit), restricted to what can equal an ASCII field name: ASCII letters fold to
/// upper case, and the only other runes whose orbit holds an ASCII letter are U+017F (`s`) and
/// U+212A (`k`) (checked against Go 1.26's encoding/json over every rune). Any other rune stays
/// itself, and so never equals a field's fold.
pub(crate) fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{017F}' => 'S',
            '\u{212A}' => 'K',
            c => c.to_ascii_uppercase(),
        })
        .collect()
}

struct Checker {
    what: &'static str,
}

impl Checker {
    fn check(&self, node: &Node, shape: Shape, path: &str) -> Result<()> {
        match (shape, node) {
            (Shape::Descriptors, Node::Array(items)) => {
                for (i, n) in items.iter().enumerate() {
                    self.check(n, Shape::Descriptor, &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            (Shape::Histories, Node::Array(items)) => {
                for (i, n) in items.iter().enumerate() {
                    self.check(n, Shape::History, &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            (Shape::Map, Node::Object(kv)) => self.no_duplicates(kv, path),
            (Shape::Leaf | Shape::Descriptors | Shape::Histories | Shape::Map, _) => Ok(()),
            (_, Node::Object(kv)) => {
                self.no_duplicates(kv, path)?;
                let fields = shape.fields();
                let mut seen = vec![false; fields.len()];
                for (key, value) in kv {
                    let folded = fold(key);
                    let Some(i) = fields.iter().position(|(f, _)| fold(f) == folded) else { continue };
                    let (field, inner) = fields[i];
                    if key != field {
                        return Err(DocumentError::CaseVariant { what: self.what, path: path.to_string(), key: key.clone(), field });
                    }
                    if std::mem::replace(&mut seen[i], true) {
                        return Err(DocumentError::Duplicate { what: self.what, path: path.to_string(), key: shown_key(key) });
                    }
                    self.check(value, inner, &format!("{path}.{field}"))?;
                }
                Ok(())
            }
            // A struct's value of another JSON type: a type error to both readers.
            _ => Ok(()),
        }
    }

    fn no_duplicates(&self, kv: &[(String, Node)], path: &str) -> Result<()> {
        let mut keys: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        match keys.windows(2).find(|w| w[0] == w[1]) {
            Some(w) => Err(DocumentError::Duplicate { what: self.what, path: path.to_string(), key: shown_key(w[0]) }),
            None => Ok(()),
        }
    }
}

/// What a refusal says of a document it could not read into containerd's types: never the
/// parser's message, which may quote the document's values.
const NOT_READ: &str = "a field holds a value of another type or form than containerd reads there";

// What a refusal quotes of a document. A registry chooses its documents' keys, media types and
// values, and may write into them what it was just sent (a password, a token): only words of
// the formats' own vocabulary are quoted, anything else is described.

/// A media type as a refusal shows it: quoted when it is one of the formats' own.
fn shown_media_type(t: &str) -> String {
    const KNOWN: [&str; 8] = [OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST, "application/json", "application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json", "application/vnd.docker.distribution.manifest.v1+json"];
    match t {
        "" => "(none)".into(),
        t if KNOWN.contains(&t) => format!("{t:?}"),
        t => format!("(another, of {} characters)", t.chars().count()),
    }
}

/// A key as a refusal shows it: quoted when it is, but for case, a field of the formats.
fn shown_key(k: &str) -> String {
    const FIELDS: [&str; 24] = [
        "schemaversion", "mediatype", "config", "layers", "manifests", "annotations", "digest", "size", "urls", "platform", "architecture", "os",
        "os.version", "os.features", "variant", "features", "subject", "artifacttype", "rootfs", "diff_ids", "history", "created", "data", "fslayers",
    ];
    match FIELDS.contains(&k.to_ascii_lowercase().as_str()) {
        true => format!("{k:?}"),
        false => format!("(one of {} characters)", k.chars().count()),
    }
}

/// Where a document stopped being JSON, and the kind of fault: never serde_json's message,
/// which may quote the document's text.
fn json_reason(e: &serde_json::Error) -> String {
    format!("{:?} fault at line {} column {}", e.classify(), e.line(), e.column()).to_lowercase()
}

fn read(what: &'static str, bytes: &[u8], shape: Shape) -> Result<Node> {
    let node: Node = serde_json::from_slice(bytes).map_err(|e| DocumentError::Json { what, reason: json_reason(&e) })?;
    Checker { what }.check(&node, shape, "$")?;
    Ok(node)
}

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker's schema 1 manifest, signed and unsigned (refused: [`DocumentError::Schema1`]).
const DOCKER_SCHEMA1: [&str; 2] = ["application/vnd.docker.distribution.manifest.v1+prettyjws", "application/vnd.docker.distribution.manifest.v1+json"];

pub fn is_index(media_type: &str) -> bool {
    matches!(media_type, OCI_INDEX | DOCKER_LIST)
}

/// Reads a manifest or an index whose media type (`declared`: as served, or as its descriptor
/// names it) is checked against the document. Returns the media type it is read as: the
/// declared one, which must be one of the four containerd reads (OCI or Docker, manifest or
/// index; anything else, empty included, is refused as containerd refuses it).
pub fn media_type_of(bytes: &[u8], declared: &str) -> Result<String> {
    top(bytes, declared).map(|(kind, _)| kind)
}

/// [`media_type_of`], with the document as read.
fn top(bytes: &[u8], declared: &str) -> Result<(String, Node)> {
    let what = "manifest or index";
    // Schema 1 (served as such, or whatever its type, a document with schema 1's `fsLayers`,
    // even empty): containerd 1.7 converts it, 2.x refuses it; pullgate refuses it by name.
    if DOCKER_SCHEMA1.contains(&declared) {
        return Err(DocumentError::Schema1 { what });
    }
    let node = read(what, bytes, Shape::Top)?;
    if node.get("fsLayers").is_some() {
        return Err(DocumentError::Schema1 { what });
    }
    let inner = node.str("mediaType").unwrap_or_default();
    // containerd reads a document by the media type it was served or stored as, and reads no
    // other kind (its images.Manifest: "unexpected media type"), whatever the document says.
    if !matches!(declared, OCI_INDEX | OCI_MANIFEST | DOCKER_LIST | DOCKER_MANIFEST) {
        return Err(DocumentError::UnknownMediaType { what, declared: shown_media_type(declared) });
    }
    if !inner.is_empty() && inner != declared {
        return Err(DocumentError::MediaType { what, inner: shown_media_type(inner), declared: shown_media_type(declared) });
    }
    let kind = declared.to_string();
    let wrong = if is_index(&kind) { ["config", "layers"].into_iter().find(|f| node.get(f).is_some()) } else { ["manifests"].into_iter().find(|f| node.get(f).is_some()) };
    if let Some(field) = wrong {
        return Err(DocumentError::WrongKind { what, declared: kind, field });
    }
    Ok((kind, node))
}

/// An image manifest, read as containerd reads it (see the module's rule).
pub fn manifest(bytes: &[u8], declared: &str) -> Result<oci_spec::image::ImageManifest> {
    let kind = media_type_of(bytes, declared)?;
    if is_index(&kind) {
        return Err(DocumentError::WrongKind { what: "image manifest", declared: kind, field: "manifests" });
    }
    let m = oci_spec::image::ImageManifest::from_reader(bytes).map_err(|_| DocumentError::Parse { what: "image manifest", reason: NOT_READ.into() })?;
    sizes_fit("image manifest", std::iter::once(m.config()).chain(m.layers()))?;
    Ok(m)
}

/// containerd reads a descriptor's size as a signed 64-bit number: a larger one is refused.
fn sizes_fit<'a>(what: &'static str, mut ds: impl Iterator<Item = &'a oci_spec::image::Descriptor>) -> Result<()> {
    match ds.find(|d| d.size() > i64::MAX as u64) {
        Some(d) => Err(DocumentError::Size { what, size: d.size() }),
        None => Ok(()),
    }
}

/// An index, read as containerd reads it (see the module's rule).
pub fn index(bytes: &[u8], declared: &str) -> Result<oci_spec::image::ImageIndex> {
    let (kind, node) = top(bytes, declared)?;
    if !is_index(&kind) {
        return Err(DocumentError::WrongKind { what: "index", declared: kind, field: "config" });
    }
    let mut idx = oci_spec::image::ImageIndex::from_reader(bytes).map_err(|_| DocumentError::Parse { what: "index", reason: NOT_READ.into() })?;
    sizes_fit("index", idx.manifests().iter())?;
    platforms_as_go_reads_them(&mut idx, &node)?;
    Ok(idx)
}

/// oci-spec names a platform's `os.version` and `os.features` `osVersion` and `osFeatures`
/// (its serde renaming), keys Go's image-spec ignores, and ignores the ones Go reads: each
/// entry's two fields are set here from the document as Go reads it.
fn platforms_as_go_reads_them(idx: &mut oci_spec::image::ImageIndex, node: &Node) -> Result<()> {
    let entries = match node.get("manifests") {
        Some(Node::Array(a)) => a.as_slice(),
        _ => &[],
    };
    let bad = |field: &str| DocumentError::Parse { what: "index", reason: format!("a platform's {field:?} is not what containerd reads there") };
    let mut manifests = idx.manifests().clone();
    for (d, n) in manifests.iter_mut().zip(entries) {
        let Some(mut p) = d.platform().clone() else { continue };
        let pn = n.get("platform");
        let version = match pn.and_then(|p| p.get("os.version")) {
            None | Some(Node::Null) => None,
            Some(Node::Str(v)) => Some(v.clone()),
            Some(_) => return Err(bad("os.version")),
        };
        let features = match pn.and_then(|p| p.get("os.features")) {
            None | Some(Node::Null) => None,
            Some(Node::Array(items)) => Some(items.iter().map(|i| match i { Node::Str(f) => Ok(f.clone()), _ => Err(bad("os.features")) }).collect::<Result<Vec<_>>>()?),
            Some(_) => return Err(bad("os.features")),
        };
        p.set_os_version(version);
        p.set_os_features(features);
        d.set_platform(Some(p));
    }
    idx.set_manifests(manifests);
    Ok(())
}

/// An image config, read as containerd reads it (see the module's rule).
pub fn config(bytes: &[u8]) -> Result<oci_spec::image::ImageConfiguration> {
    let node = read("image config", bytes, Shape::Image)?;
    // Go reads `created` (the config's and each history entry's) as a time.Time: a string it
    // cannot parse makes the config unreadable to containerd. oci-spec keeps any string.
    let histories = match node.get("history") {
        Some(Node::Array(h)) => h.iter().collect(),
        _ => Vec::new(),
    };
    for n in std::iter::once(&node).chain(histories) {
        match n.get("created") {
            None | Some(Node::Null) => {}
            Some(Node::Str(t)) if rfc3339(t) => {}
            Some(_) => return Err(DocumentError::Parse { what: "image config", reason: "a \"created\" time containerd cannot read (RFC 3339)".into() }),
        }
    }
    oci_spec::image::ImageConfiguration::from_reader(bytes).map_err(|_| DocumentError::Parse { what: "image config", reason: NOT_READ.into() })
}

/// An RFC 3339 time as Go's time.Time reads it on its strict path
/// (`2006-01-02T15:04:05[.frac](Z|±hh:mm)`, fields in range, the day in its month). Written by
/// hand: a handful of lines, against a date crate for one check; a form only Go's lenient
/// fallback takes is refused (the safe direction).
fn rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>, lo: u32, hi: u32| -> Option<u32> {
        let d = b.get(r)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = d.iter().fold(0u32, |a, c| a * 10 + u32::from(c - b'0'));
        (lo..=hi).contains(&v).then_some(v)
    };
    let (Some(year), Some(month)) = (num(0..4, 0, 9999), num(5..7, 1, 12)) else { return false };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let fields = [num(8..10, 1, days), num(11..13, 0, 23), num(14..16, 0, 59), num(17..19, 0, 59)];
    if fields.iter().any(Option::is_none) || b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return false;
    }
    let mut rest = &b[19..];
    if rest.len() >= 2 && rest[0] == b'.' && rest[1].is_ascii_digit() {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        rest = &rest[1 + n..];
    }
    match rest {
        b"Z" => true,
        [sign, h1, h2, b':', m1, m2] if (*sign == b'+' || *sign == b'-') => {
            let two = |a: u8, c: u8| (a.is_ascii_digit() && c.is_ascii_digit()).then(|| u32::from(a - b'0') * 10 + u32::from(c - b'0'));
            matches!((two(*h1, *h2), two(*m1, *m2)), (Some(h), Some(m)) if h <= 23 && m <= 59)
        }
        _ => false,
    }
}

/// The annotation key family of a checkpoint image (CRIU's `org.criu.checkpoint.*`): containerd
/// 2.x's CRI restores a container from an image whose record's target, decoded as an index,
/// has annotation `org.criu.checkpoint.container.name`.
pub const CHECKPOINT_ANNOTATION: &str = "org.criu.checkpoint";

/// Whether a manifest or index marks a checkpoint image, read as containerd reads it (JSON
/// escapes decoded: `"org.criu.checkpoin\u0074.container.name"` is the key containerd looks
/// up). Wider than containerd's own test, never narrower: any decoded object key anywhere in
/// the document (the document's annotations, every index entry's and descriptor's) that begins
/// with [`CHECKPOINT_ANNOTATION`]. A document that cannot be read as containerd reads it is an
/// error, never "not a checkpoint".
pub fn is_checkpoint(bytes: &[u8], declared: &str) -> Result<bool> {
    let (_, node) = top(bytes, declared)?;
    Ok(checkpoint_keys(&node))
}

/// Whether a document, as read, has a key of the checkpoint family anywhere.
fn checkpoint_keys(node: &Node) -> bool {
    node.has_key(&|k: &str| k.starts_with(CHECKPOINT_ANNOTATION))
}

/// Go's `strings.ToLower` where it can make an ASCII letter: ASCII letters, and the only two
/// other runes whose lower case is one (U+0130 `İ` is `i`, U+212A, the Kelvin sign, is `k`;
/// checked against Go over every rune). Any other rune stays itself, and so never equals an
/// ASCII name (containerd lowercases a platform's OS, architecture and variant so).
fn go_lower(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{0130}' => 'i',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// containerd's platform normalisation of an architecture and variant (its `platforms`
/// package): the aliases distributions use for the same machine.
fn normalize_arch(arch: &str, variant: &str) -> (String, String) {
    let arch = go_lower(arch);
    let variant = go_lower(variant);
    match (arch.as_str(), variant.as_str()) {
        ("i386", _) => ("386".into(), String::new()),
        ("x86_64" | "x86-64" | "amd64", "v1") => ("amd64".into(), String::new()),
        ("x86_64" | "x86-64", _) => ("amd64".into(), variant),
        ("aarch64" | "arm64", "8" | "v8" | "v8.0") => ("arm64".into(), String::new()),
        ("aarch64", _) => ("arm64".into(), variant),
        ("armhf", _) => ("arm".into(), "v7".into()),
        ("armel", _) => ("arm".into(), "v6".into()),
        ("arm", "" | "7") => ("arm".into(), "v7".into()),
        ("arm", "5" | "6" | "8") => ("arm".into(), format!("v{variant}")),
        _ => (arch, variant),
    }
}

/// Whether `p` is platform `os/arch[/variant]` as containerd's `platforms.Only` matches it
/// first: OS case-insensitively, architecture and variant normalised (`x86_64` is `amd64`,
/// `amd64/v1` is `amd64`, `arm64/v8` is `arm64`, no variant on `arm` is `v7`) and then equal, so
/// `linux/amd64` is not `linux/amd64/v3` (containerd would not choose that entry either).
/// containerd's fallbacks (an older variant, `386` on `amd64`, entries without a platform) are
/// never chosen: where an index has no exact entry, pullgate finds none and fails closed.
pub fn platform_matches(p: &oci_spec::image::Platform, os: &str, arch: &str, variant: Option<&str>) -> bool {
    let want = normalize_arch(arch, variant.unwrap_or(""));
    let got = normalize_arch(&p.architecture().to_string(), p.variant().as_deref().unwrap_or(""));
    os_is(&p.os().to_string(), os) && got == want
}

/// Whether an entry's OS `entry` is `os` as containerd normalises it: compared in lower case,
/// and an empty one is the OS containerd runs on (its `runtime.GOOS`: this process's).
fn os_is(entry: &str, os: &str) -> bool {
    let (entry, os) = (go_lower(entry), go_lower(os));
    entry == os || (entry.is_empty() && os == std::env::consts::OS)
}

/// Whether `p` is OS `os` and architecture `arch` as containerd normalises them, whatever its
/// variant: the widest set of entries containerd could choose for a node of that OS and
/// architecture.
pub fn same_os_arch(p: &oci_spec::image::Platform, os: &str, arch: &str) -> bool {
    let want = normalize_arch(arch, "").0;
    let got = normalize_arch(&p.architecture().to_string(), p.variant().as_deref().unwrap_or("")).0;
    os_is(&p.os().to_string(), os) && got == want
}

/// The entry of `idx` for `platform` (`os/arch[/variant]`), matched as containerd matches
/// platforms ([`platform_matches`]). Two entries of different digests that both match are
/// refused: containerd orders equal candidates by its own preferences, and pullgate must decide
/// the same image containerd would run.
pub fn select_platform<'a>(idx: &'a oci_spec::image::ImageIndex, os: &str, arch: &str, variant: Option<&str>) -> Result<Option<&'a oci_spec::image::Descriptor>> {
    let mut found: Vec<&oci_spec::image::Descriptor> = Vec::new();
    // An entry of this OS and architecture naming OS features: containerd 2.4 passes over it
    // (its matcher wants them among the node's, which are none), 1.7 and 2.1 choose it.
    if idx.manifests().iter().filter_map(|d| d.platform().as_ref()).any(|p| same_os_arch(p, os, arch) && p.os_features().as_ref().is_some_and(|f| !f.is_empty())) {
        return Err(DocumentError::OsFeatures { platform: format!("{os}/{arch}") });
    }
    for d in idx.manifests() {
        if d.platform().as_ref().is_some_and(|p| platform_matches(p, os, arch, variant)) && !found.iter().any(|f| f.digest() == d.digest()) {
            found.push(d);
        }
    }
    match found.len() {
        0 | 1 => Ok(found.pop()),
        count => {
            let platform = match variant {
                Some(v) => format!("{os}/{arch}/{v}"),
                None => format!("{os}/{arch}"),
            };
            Err(DocumentError::AmbiguousPlatform { platform, count })
        }
    }
}

/// What the CRI front checks an image record's target (`bytes`, of media type `declared`)
/// against for a node of `os/arch`: a manifest's own config, or an index's entries for that OS
/// and architecture (any variant), for the architectures containerd falls back to on it (`386`
/// on `amd64`, `arm` on `arm64`: [`fallback_arch`]) and those without a platform, of which
/// containerd may choose any (its matcher's preferences among them, and a platform-less entry's
/// config, are its own).
/// The front requires every candidate's config to be the image's: a superset of containerd's
/// choice, never fewer; an index with no candidate names no image here. The differential test
/// shows containerd's own choice among these for every document it reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Candidates {
    /// The target is a manifest with this config.
    Config(String),
    /// The target is an index: these entries (digest, media type) are to be read, each a manifest.
    Entries(Vec<(String, String)>),
}

/// The architecture containerd's platform matcher also accepts on a node of `arch` (its
/// `platforms.Only`: `386` on `amd64`, 32-bit `arm` on `arm64`), whatever the variants.
fn fallback_arch(arch: &str) -> Option<&'static str> {
    match normalize_arch(arch, "").0.as_str() {
        "amd64" => Some("386"),
        "arm64" => Some("arm"),
        _ => None,
    }
}

/// The CRI front's [`Candidates`] of a target for `os/arch`.
pub fn cri_candidates(bytes: &[u8], declared: &str, os: &str, arch: &str) -> Result<Candidates> {
    if !is_index(&media_type_of(bytes, declared)?) {
        return Ok(Candidates::Config(manifest(bytes, declared)?.config().digest().to_string()));
    }
    let entries = index(bytes, declared)?
        .manifests()
        .iter()
        .filter(|m| m.platform().as_ref().is_none_or(|p| same_os_arch(p, os, arch) || fallback_arch(arch).is_some_and(|f| same_os_arch(p, os, f))))
        .map(|m| (m.digest().to_string(), m.media_type().to_string()))
        .collect();
    Ok(Candidates::Entries(entries))
}

/// The configs of a target's [`Candidates`] for `os/arch`, each entry read with `blob` (its
/// bytes, checked against the digest here) and refused when it is a checkpoint image: the
/// CRI front's reading, for the differential test (the front reads through containerd).
pub fn cri_configs(root: &[u8], declared: &str, os: &str, arch: &str, blob: &mut dyn FnMut(&str) -> Option<Vec<u8>>) -> std::result::Result<Vec<String>, String> {
    if is_checkpoint(root, declared).map_err(|e| e.to_string())? {
        return Err("a checkpoint image".into());
    }
    match cri_candidates(root, declared, os, arch).map_err(|e| e.to_string())? {
        Candidates::Config(c) => Ok(vec![c]),
        Candidates::Entries(entries) => entries
            .iter()
            .map(|(digest, media_type)| {
                let bytes = blob(digest).filter(|b| crate::reference::sha256_digest(b) == *digest).ok_or_else(|| format!("blob {digest} not found or not its digest"))?;
                if is_checkpoint(&bytes, media_type).map_err(|e| e.to_string())? {
                    return Err("a checkpoint image".into());
                }
                Ok(manifest(&bytes, media_type).map_err(|e| e.to_string())?.config().digest().to_string())
            })
            .collect(),
    }
}

/// An image as containerd would run it on one platform: what the image record's target
/// (`root`) leads to, each document read as containerd reads it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Reading {
    /// The image manifest chosen for the platform.
    pub manifest: String,
    pub config: String,
    pub layers: Vec<String>,
    /// The config's `rootfs.diff_ids`.
    pub diff_ids: Vec<String>,
    /// Whether the target or the chosen manifest marks a checkpoint image ([`is_checkpoint`]).
    pub checkpoint: bool,
}

/// Reads an image from its target `root` (of media type `declared`) for platform `os/arch[/variant]`,
/// the way a pull reads it: an index's entry chosen by [`select_platform`], the manifest, its
/// config. `blob` gives a blob's bytes by digest (checked against it here). The differential
/// test runs this against containerd's own code over the same documents.
pub fn read_image(root: &[u8], declared: &str, platform: (&str, &str, Option<&str>), blob: &mut dyn FnMut(&str) -> Option<Vec<u8>>) -> std::result::Result<Reading, String> {
    let (os, arch, variant) = platform;
    let mut fetch = |digest: &str| -> std::result::Result<Vec<u8>, String> {
        let bytes = blob(digest).ok_or_else(|| format!("blob {digest} not found"))?;
        match crate::reference::sha256_digest(&bytes) {
            d if d == digest => Ok(bytes),
            d => Err(format!("blob {digest} hashes to {d}")),
        }
    };
    let (kind, node) = top(root, declared).map_err(|e| e.to_string())?;
    let mut checkpoint = checkpoint_keys(&node);
    let (bytes, media_type, digest) = if is_index(&kind) {
        let idx = index(root, declared).map_err(|e| e.to_string())?;
        let entry = select_platform(&idx, os, arch, variant).map_err(|e| e.to_string())?.ok_or_else(|| format!("no manifest for platform {os}/{arch} in the index"))?;
        let digest = entry.digest().to_string();
        (fetch(&digest)?, entry.media_type().to_string(), digest)
    } else {
        (root.to_vec(), declared.to_string(), crate::reference::sha256_digest(root))
    };
    checkpoint |= is_checkpoint(&bytes, &media_type).map_err(|e| e.to_string())?;
    let m = manifest(&bytes, &media_type).map_err(|e| e.to_string())?;
    let config_digest = m.config().digest().to_string();
    let cfg = config(&fetch(&config_digest)?).map_err(|e| e.to_string())?;
    Ok(Reading {
        manifest: digest,
        config: config_digest,
        layers: m.layers().iter().map(|l| l.digest().to_string()).collect(),
        diff_ids: cfg.rootfs().diff_ids().to_vec(),
        checkpoint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYER: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn desc(d: &str) -> String {
        format!(r#"{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{d}","size":1}}"#)
    }

    fn manifest_with(extra: &str) -> String {
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{LAYER}","size":1}},"layers":[{}]{extra}}}"#,
            desc(LAYER)
        )
    }

    /// A refusal quotes no key, media type or text of the document outside the formats' own
    /// words: a registry may write into them what it was just sent.
    #[test]
    fn refusals_quote_only_the_formats_own_words() {
        let secret = "Zk7secretPW9x";
        let msg = |e: DocumentError| e.to_string();
        let dup = format!(r#"{{"schemaVersion":2,"{secret}":1,"{secret}":2}}"#);
        assert!(!msg(manifest(dup.as_bytes(), OCI_MANIFEST).unwrap_err()).contains(secret));
        assert!(!msg(media_type_of(b"{}", &format!("application/vnd.leak.{secret}")).unwrap_err()).contains(secret));
        let inner = format!(r#"{{"mediaType":"application/vnd.{secret}"}}"#);
        assert!(!msg(media_type_of(inner.as_bytes(), OCI_MANIFEST).unwrap_err()).contains(secret));
        let bad_json = format!(r#"{{"schemaVersion":2,"x":"{secret}" "#);
        assert!(!msg(media_type_of(bad_json.as_bytes(), OCI_MANIFEST).unwrap_err()).contains(secret));
        let wrong_type = format!(r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"a","digest":"{secret}","size":1}},"layers":[]}}"#);
        assert!(!msg(manifest(wrong_type.as_bytes(), OCI_MANIFEST).unwrap_err()).contains(secret));
        // The formats' own words are quoted: a known key, a known media type.
        assert!(msg(media_type_of(b"{}", "application/json").unwrap_err()).contains("\"application/json\""));
    }

    /// The same bytes read both ways: what serde alone makes of them, and what this module says.
    #[test]
    fn differential_manifests() {
        // serde alone reads the first "config"; containerd reads the last, of another image.
        let twice = manifest_with(&format!(r#","Config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{OTHER}","size":1}}"#));
        let serde_reading = oci_spec::image::ImageManifest::from_reader(twice.as_bytes()).unwrap();
        assert_eq!(serde_reading.config().digest().to_string(), LAYER, "serde alone takes the first");
        assert!(matches!(manifest(twice.as_bytes(), OCI_MANIFEST), Err(DocumentError::CaseVariant { field: "config", .. })));
        // Unicode folding: "layerſ" is "layers" to Go, unknown to serde.
        let folded = manifest_with(&format!(r#","layer\u017f":[{}]"#, desc(OTHER)));
        assert!(oci_spec::image::ImageManifest::from_reader(folded.as_bytes()).is_ok());
        assert!(matches!(manifest(folded.as_bytes(), OCI_MANIFEST), Err(DocumentError::CaseVariant { field: "layers", .. })));
        let kelvin = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[],"\u212Aey":1}"#;
        assert!(index(kelvin.as_bytes(), OCI_INDEX).is_ok(), "an unknown key folding to nothing containerd reads is fine");
        // A descriptor's digest spelled twice, exactly: serde refuses, and so does the rule.
        let dup = format!(r#"{{"schemaVersion":2,"config":{{"mediaType":"x","digest":"{LAYER}","digest":"{OTHER}","size":1}},"layers":[]}}"#);
        assert!(matches!(manifest(dup.as_bytes(), ""), Err(DocumentError::Duplicate { .. })));
        // Inside a descriptor, a case variant.
        let inner = format!(r#"{{"schemaVersion":2,"config":{{"mediaType":"x","digest":"{LAYER}","DIGEST":"{OTHER}","size":1}},"layers":[]}}"#);
        assert!(matches!(manifest(inner.as_bytes(), ""), Err(DocumentError::CaseVariant { field: "digest", .. })));
        // Annotations: keys are data (case matters to both), but never repeated.
        assert!(manifest(manifest_with(r#","annotations":{"a":"1","A":"2"}"#).as_bytes(), OCI_MANIFEST).is_ok());
        assert!(matches!(manifest(manifest_with(r#","annotations":{"a":"1","a":"2"}"#).as_bytes(), OCI_MANIFEST), Err(DocumentError::Duplicate { .. })));
        // A plain, well-formed manifest.
        assert_eq!(manifest(manifest_with("").as_bytes(), OCI_MANIFEST).unwrap().layers().len(), 1);
    }

    #[test]
    fn differential_configs() {
        let mine = format!(r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["{LAYER}"]}}"#);
        let two = format!(r#"{mine},"RootFS":{{"type":"layers","diff_ids":["{OTHER}"]}}}}"#);
        let serde_reading = oci_spec::image::ImageConfiguration::from_reader(two.as_bytes()).unwrap();
        assert_eq!(serde_reading.rootfs().diff_ids()[0], LAYER);
        assert!(matches!(config(two.as_bytes()), Err(DocumentError::CaseVariant { field: "rootfs", .. })));
        let ids = format!(r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["{LAYER}"],"Diff_Ids":["{OTHER}"]}}}}"#);
        assert!(matches!(config(ids.as_bytes()), Err(DocumentError::CaseVariant { field: "diff_ids", .. })));
        let labels = format!(r#"{mine},"config":{{"Labels":{{"x":"1"}},"labels":{{"x":"2"}}}}}}"#);
        assert!(matches!(config(labels.as_bytes()), Err(DocumentError::CaseVariant { field: "Labels", .. })));
        assert_eq!(config(format!("{mine}}}").as_bytes()).unwrap().rootfs().diff_ids().len(), 1);
        // An unknown key that only looks like a field with a separator is unknown to Go too.
        assert!(config(format!(r#"{mine},"diff-ids":1}}"#).as_bytes()).is_ok());
    }

    #[test]
    fn media_types() {
        let m = manifest_with("");
        assert!(matches!(manifest(m.as_bytes(), DOCKER_MANIFEST), Err(DocumentError::MediaType { .. })));
        assert!(matches!(index(m.as_bytes(), OCI_INDEX), Err(DocumentError::MediaType { .. })));
        let both = format!(r#"{{"schemaVersion":2,"manifests":[],"layers":[{}]}}"#, desc(LAYER));
        assert!(matches!(media_type_of(both.as_bytes(), OCI_INDEX), Err(DocumentError::WrongKind { field: "layers", .. })));
        assert!(matches!(media_type_of(both.as_bytes(), OCI_MANIFEST), Err(DocumentError::WrongKind { field: "manifests", .. })));
        // Served as no kind containerd reads (it says "unexpected media type"): refused, however
        // the document describes itself.
        assert!(matches!(media_type_of(br#"{"schemaVersion":2,"manifests":[]}"#, "application/json"), Err(DocumentError::UnknownMediaType { .. })));
        // Docker schema 1, by its media type (signed or not) or its fsLayers, is refused by name.
        let s1 = br#"{"schemaVersion":1,"name":"a/b","tag":"v1","architecture":"amd64","fsLayers":[{"blobSum":"sha256:00"}],"history":[]}"#;
        for t in ["application/vnd.docker.distribution.manifest.v1+prettyjws", "application/vnd.docker.distribution.manifest.v1+json", OCI_MANIFEST, DOCKER_MANIFEST] {
            let e = media_type_of(s1, t).expect_err("schema 1 is refused");
            assert!(matches!(e, DocumentError::Schema1 { .. }) && e.to_string().contains("Docker schema 1 manifest"), "{t}: {e}");
        }
        assert!(matches!(manifest(br#"{"schemaVersion":2,"fsLayers":[]}"#, OCI_MANIFEST), Err(DocumentError::Schema1 { .. })));
        assert!(matches!(media_type_of(br#"{"mediaType":"application/vnd.docker.distribution.manifest.v2+json"}"#, ""), Err(DocumentError::UnknownMediaType { .. })));
        assert_eq!(media_type_of(br#"{"mediaType":"application/vnd.docker.distribution.manifest.v2+json"}"#, DOCKER_MANIFEST).unwrap(), DOCKER_MANIFEST);
        assert!(matches!(media_type_of(b"{\"a\":1} x", ""), Err(DocumentError::Json { .. })));
        assert!(matches!(media_type_of(b"\xef\xbb\xbf{}", ""), Err(DocumentError::Json { .. })));
    }

    #[test]
    fn platforms() {
        let entry = |d: &str, arch: &str, variant: &str| {
            let v = if variant.is_empty() { String::new() } else { format!(r#","variant":"{variant}""#) };
            format!(r#"{{"mediaType":"{OCI_MANIFEST}","digest":"{d}","size":1,"platform":{{"os":"linux","architecture":"{arch}"{v}}}}}"#)
        };
        let idx = |entries: &[String]| index(format!(r#"{{"schemaVersion":2,"manifests":[{}]}}"#, entries.join(",")).as_bytes(), OCI_INDEX).unwrap();
        // A normal multi-variant image: amd64 and amd64/v3 are different platforms to containerd.
        let variants = idx(&[entry(LAYER, "amd64", ""), entry(OTHER, "amd64", "v3")]);
        assert_eq!(select_platform(&variants, "linux", "amd64", None).unwrap().unwrap().digest().to_string(), LAYER);
        assert_eq!(select_platform(&variants, "linux", "amd64", Some("v3")).unwrap().unwrap().digest().to_string(), OTHER);
        let one = idx(&[entry(LAYER, "amd64", ""), entry(OTHER, "arm64", "v8")]);
        assert_eq!(select_platform(&one, "linux", "amd64", None).unwrap().unwrap().digest().to_string(), LAYER);
        assert_eq!(select_platform(&one, "linux", "arm64", None).unwrap().unwrap().digest().to_string(), OTHER);
        assert!(select_platform(&one, "linux", "s390x", None).unwrap().is_none());
        // x86_64 is amd64 to containerd: two images for one platform.
        let two = idx(&[entry(LAYER, "x86_64", ""), entry(OTHER, "amd64", "")]);
        assert!(matches!(select_platform(&two, "linux", "amd64", None), Err(DocumentError::AmbiguousPlatform { count: 2, .. })));
        // The same digest twice is one image.
        let same = idx(&[entry(LAYER, "x86_64", ""), entry(LAYER, "amd64", "")]);
        assert!(select_platform(&same, "linux", "amd64", None).unwrap().is_some());
    }

    /// containerd looks the checkpoint annotation up after decoding: an escaped key is the key.
    #[test]
    fn checkpoint_images_are_read_from_the_decoded_document() {
        let m = |ann: &str| manifest_with(&format!(r#","annotations":{{{ann}}}"#));
        assert!(is_checkpoint(m(r#""org.criu.checkpoint.container.name":"app""#).as_bytes(), OCI_MANIFEST).unwrap());
        assert!(is_checkpoint(m(r#""org.criu.checkpoin\u0074.container.name":"app""#).as_bytes(), OCI_MANIFEST).unwrap());
        assert!(is_checkpoint(m(r#""\u006frg.criu.checkpoint.x":"1""#).as_bytes(), OCI_MANIFEST).unwrap());
        // In a value, it is no key: containerd reads no checkpoint there.
        assert!(!is_checkpoint(m(r#""note":"org.criu.checkpoint.container.name""#).as_bytes(), OCI_MANIFEST).unwrap());
        assert!(!is_checkpoint(manifest_with("").as_bytes(), OCI_MANIFEST).unwrap());
        // An index entry's annotations, or the index's own.
        let entry = format!(r#"{{"mediaType":"{OCI_MANIFEST}","digest":"{LAYER}","size":1,"annotations":{{"org.criu.checkpoin\u0074.container.name":"a"}}}}"#);
        assert!(is_checkpoint(format!(r#"{{"schemaVersion":2,"manifests":[{entry}]}}"#).as_bytes(), OCI_INDEX).unwrap());
        // A document containerd and pullgate would read differently is an error, not "no".
        assert!(is_checkpoint(m(r#""org.criu.checkpoint.container.name":"a","org.criu.checkpoint.container.name":"b""#).as_bytes(), OCI_MANIFEST).is_err());
        assert!(is_checkpoint(manifest_with(r#","Annotations":{"org.criu.checkpoint.container.name":"a"}"#).as_bytes(), OCI_MANIFEST).is_err());
        assert!(is_checkpoint(b"{", OCI_MANIFEST).is_err());
    }

    /// Found by reading containerd's own code beside pullgate's (tests/difftest).
    #[test]
    fn what_containerd_reads_otherwise_is_refused() {
        let entry = |d: &str, platform: &str| format!(r#"{{"mediaType":"{OCI_MANIFEST}","digest":"{d}","size":1,"platform":{platform}}}"#);
        let idx = |entries: &[String]| index(format!(r#"{{"schemaVersion":2,"manifests":[{}]}}"#, entries.join(",")).as_bytes(), OCI_INDEX).unwrap();
        // OS features: 2.4 passes over the entry, 1.7 and 2.1 choose it.
        let feat = idx(&[entry(LAYER, r#"{"os":"linux","architecture":"amd64","os.features":["win32k"]}"#), entry(OTHER, r#"{"os":"linux","architecture":"386"}"#)]);
        assert!(matches!(select_platform(&feat, "linux", "amd64", None), Err(DocumentError::OsFeatures { .. })));
        let none = idx(&[entry(LAYER, r#"{"os":"linux","architecture":"amd64","os.features":[]}"#)]);
        assert!(select_platform(&none, "linux", "amd64", None).unwrap().is_some());
        // arm64/v8.0 is arm64 to containerd: two images for one platform.
        let arm = idx(&[entry(OTHER, r#"{"os":"linux","architecture":"arm64","variant":"v8.0"}"#), entry(LAYER, r#"{"os":"linux","architecture":"arm64"}"#)]);
        assert!(matches!(select_platform(&arm, "linux", "arm64", None), Err(DocumentError::AmbiguousPlatform { .. })));
        // Schema 1's fsLayers, even empty: containerd does not read the document.
        assert!(matches!(manifest(manifest_with(r#","fsLayers":[]"#).as_bytes(), OCI_MANIFEST), Err(DocumentError::Schema1 { .. })));
        // A size past a signed 64-bit number.
        let huge = manifest_with("").replace(r#""size":1}]"#, r#""size":18446744073709551615}]"#);
        assert!(matches!(manifest(huge.as_bytes(), OCI_MANIFEST), Err(DocumentError::Size { .. })), "{huge}");
    }

    #[test]
    fn times_and_platform_names_as_go_reads_them() {
        for ok in ["2026-12-04T15:04:05Z", "2024-02-29T00:00:00.123456789+02:00", "0001-01-01T00:00:00Z", "2026-12-04T23:59:59-23:59"] {
            assert!(rfc3339(ok), "{ok}");
        }
        for bad in ["not a time", "2026-13-01T00:00:00Z", "2025-02-29T00:00:00Z", "2026-12-04 15:04:05Z", "2026-12-04T24:00:00Z", "2026-12-04T15:04:05", "2026-12-04T15:04:05+24:00", "2026-12-04T15:04:05.Z", "2026-12-04t15:04:05z", "2026-12-04T15:04:60Z"] {
            assert!(!rfc3339(bad), "{bad}");
        }
        let cfg = |created: &str| format!(r#"{{"architecture":"amd64","os":"linux","created":{created},"rootfs":{{"type":"layers","diff_ids":[]}}}}"#);
        assert!(config(cfg(r#""2026-12-04T15:04:05Z""#).as_bytes()).is_ok());
        assert!(config(cfg("null").as_bytes()).is_ok());
        assert!(config(cfg(r#""yesterday""#).as_bytes()).is_err());
        assert!(config(cfg("5").as_bytes()).is_err());
        let hist = r#"{"architecture":"amd64","os":"linux","history":[{"created":"soon"}],"rootfs":{"type":"layers","diff_ids":[]}}"#;
        assert!(config(hist.as_bytes()).is_err());
        // Go's strings.ToLower: U+0130 is i, the Kelvin sign is k.
        assert_eq!(go_lower("L\u{0130}NUX"), "linux");
        assert_eq!(go_lower("\u{212A}"), "k");
        let entry = |d: &str, os: &str| format!(r#"{{"mediaType":"{OCI_MANIFEST}","digest":"{d}","size":1,"platform":{{"os":"{os}","architecture":"amd64"}}}}"#);
        let idx = index(format!(r#"{{"schemaVersion":2,"manifests":[{},{}]}}"#, entry(OTHER, "l\u{0130}nux"), entry(LAYER, "linux")).as_bytes(), OCI_INDEX).unwrap();
        assert!(matches!(select_platform(&idx, "linux", "amd64", None), Err(DocumentError::AmbiguousPlatform { .. })));
    }

    #[test]
    fn os_and_architecture_whatever_the_variant() {
        let p = |arch: &str, variant: Option<&str>| {
            let mut b = oci_spec::image::PlatformBuilder::default().os(oci_spec::image::Os::Linux).architecture(oci_spec::image::Arch::from(arch));
            if let Some(v) = variant {
                b = b.variant(v.to_string());
            }
            b.build().unwrap()
        };
        assert!(same_os_arch(&p("arm", Some("v7")), "linux", "arm"));
        assert!(same_os_arch(&p("arm", Some("v6")), "linux", "arm"));
        assert!(same_os_arch(&p("x86_64", None), "linux", "amd64"));
        assert!(same_os_arch(&p("amd64", Some("v3")), "linux", "amd64"));
        assert!(!same_os_arch(&p("arm64", None), "linux", "arm"));
        // An empty OS is the one containerd runs on (Go's platforms.Normalize), on both readings.
        let no_os: oci_spec::image::Platform = serde_json::from_str(r#"{"os":"","architecture":"amd64"}"#).unwrap();
        assert!(same_os_arch(&no_os, "linux", "amd64") && platform_matches(&no_os, "linux", "amd64", None));
        assert!(!same_os_arch(&no_os, "windows", "amd64"));
    }

    /// The CRI front's candidates: every entry of the node's OS and architecture (any variant,
    /// under any alias) and every entry without a platform, none of another architecture; a
    /// manifest's own config.
    #[test]
    fn cri_candidates_are_a_superset_of_containerds_choice() {
        let e = |d: &str, p: &str| format!(r#"{{"mediaType":"{OCI_MANIFEST}","digest":"{d}","size":1{p}}}"#);
        let plat = |arch: &str, variant: &str| format!(r#","platform":{{"os":"linux","architecture":"{arch}"{variant}}}"#);
        let digests: Vec<String> = (3..8).map(|i| format!("sha256:{}", i.to_string().repeat(64))).collect();
        let idx = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[{},{},{},{},{}]}}"#,
            e(&digests[0], &plat("x86_64", "")),
            e(&digests[1], &plat("amd64", r#","variant":"v3""#)),
            e(&digests[2], &plat("arm64", "")),
            e(&digests[3], ""),
            e(&digests[4], &plat("amd64", "")),
        );
        let Candidates::Entries(got) = cri_candidates(idx.as_bytes(), OCI_INDEX, "linux", "amd64").unwrap() else { panic!("an index's candidates are entries") };
        let got: Vec<&str> = got.iter().map(|(d, _)| d.as_str()).collect();
        assert_eq!(got, [&digests[0], &digests[1], &digests[3], &digests[4]]);
        let Candidates::Entries(riscv) = cri_candidates(idx.as_bytes(), OCI_INDEX, "linux", "riscv64").unwrap() else { panic!() };
        assert_eq!(riscv.len(), 1, "only the platform-less entry: {riscv:?}");
        // containerd's fallbacks: 32-bit arm on arm64, 386 on amd64.
        let two = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[{},{}]}}"#,
            e(&digests[0], &plat("arm", r#","variant":"v7""#)),
            e(&digests[1], &plat("386", "")),
        );
        let Candidates::Entries(arm64) = cri_candidates(two.as_bytes(), OCI_INDEX, "linux", "arm64").unwrap() else { panic!() };
        assert_eq!(arm64.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>(), [&digests[0]]);
        let Candidates::Entries(amd64) = cri_candidates(two.as_bytes(), OCI_INDEX, "linux", "amd64").unwrap() else { panic!() };
        assert_eq!(amd64.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>(), [&digests[1]]);
        assert_eq!(cri_candidates(manifest_with("").as_bytes(), OCI_MANIFEST, "linux", "amd64").unwrap(), Candidates::Config(LAYER.to_string()));
    }

    #[test]
    fn folding_matches_go() {
        assert_eq!(fold("config"), fold("CONFIG"));
        assert_eq!(fold("layer\u{017F}"), fold("layers"));
        assert_eq!(fold("\u{212A}ey"), fold("key"));
        assert_ne!(fold("diff-ids"), fold("diff_ids"));
        // The dotless i and the dotted capital I are no ASCII letters to Go's folding.
        assert_ne!(fold("\u{0131}d"), fold("id"));
        assert_ne!(fold("\u{0130}d"), fold("id"));
    }
}

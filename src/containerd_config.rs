//! containerd_config: `pullgate containerd-config`, which merges pullgate's containerd fragment
//! (plugin/containerd-1.x.toml or plugin/containerd-2.x.toml, embedded here) into containerd's
//! config.toml as an operator would by hand, keeping the file's other settings, comments, order
//! and formatting. It owns the merge rules (which of the operator's values give way, which are a
//! conflict), the check of the result by containerd's own reading of it, the backup and its undo,
//! the atomic write and the diff it shows. It reads pullgate's own configuration through `config`
//! and uses nothing above it.
use crate::config::Config;
use sha2::{Digest, Sha256};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, TableLike, Value};

const FRAGMENT_1X: &str = include_str!("../plugin/containerd-1.x.toml");
const FRAGMENT_2X: &str = include_str!("../plugin/containerd-2.x.toml");
/// The proxy plugin's name, which CRI and the transfer service name as their snapshotter.
const NAME: &str = "pullgate";
/// containerd's URI of the proxy snapshotter (what `disabled_plugins` would name).
const PLUGIN_URI: &str = "io.containerd.snapshotter.v1.pullgate";
const BOLT: &str = "io.containerd.metadata.v1.bolt";
/// Snapshotter values that mean containerd's default: `containerd config default` writes
/// "overlayfs" out, and an empty one is the default too.
const DEFAULT_SNAPSHOTTERS: [&str; 2] = ["overlayfs", ""];
/// Beside the file: its bytes before the merge.
pub const BACKUP_SUFFIX: &str = ".pullgate-backup";
/// Beside the file: the sha256 of the bytes the merge wrote (and `created` when there was no
/// file before), which `--undo` compares with the file.
pub const MARK_SUFFIX: &str = ".pullgate-merged";

/// The containerd a config file is for, and so which fragment merges into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// containerd 1.6 and 1.7: config version 2, plugin/containerd-1.x.toml.
    V1,
    /// containerd 2.x: config version 3 (or 4, which 2.4's `containerd config default`
    /// writes, with the same keys), plugin/containerd-2.x.toml.
    V2,
}

impl Series {
    pub fn name(self) -> &'static str {
        match self {
            Series::V1 => "1.x",
            Series::V2 => "2.x",
        }
    }
    fn fragment(self) -> &'static str {
        match self {
            Series::V1 => FRAGMENT_1X,
            Series::V2 => FRAGMENT_2X,
        }
    }
    fn of_version(v: i64) -> Option<Series> {
        match v {
            2 => Some(Series::V1),
            3 | 4 => Some(Series::V2),
            _ => None,
        }
    }
}

/// What to do with `content_sharing_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Set "isolated" (the fragment's), replacing an explicit "shared".
    Isolated,
    /// Keep containerd's shared policy: the policy is left as the file has it.
    Shared,
}

/// What `pullgate containerd-config` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// containerd's config file.
    pub file: PathBuf,
    /// The containerd the operator says the file is for (needed to create a missing file).
    pub series: Option<Series>,
    /// None: "isolated" where no policy is set; an explicit "shared" is a conflict.
    pub sharing: Option<Sharing>,
    /// The platform the transfer service unpacks into pullgate (`linux/amd64`).
    pub platform: String,
    /// `[proxy_plugins.pullgate] address`: pullgate's `[daemon] snapshotter_socket`.
    pub snapshotter_socket: PathBuf,
    /// `exports.root`: pullgate's `[daemon] root`.
    pub root: PathBuf,
}

impl Options {
    /// Options for `file` with pullgate's configuration `pg` and the node's platform.
    pub fn new(file: PathBuf, pg: &Config, platform: String) -> Options {
        Options {
            file,
            series: None,
            sharing: None,
            platform,
            snapshotter_socket: pg.daemon.snapshotter_socket.clone(),
            root: pg.daemon.root.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ContainerdConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot parse {path}: {source}")]
    Parse { path: PathBuf, source: Box<toml_edit::TomlError> },
    #[error("{path}: {reason}")]
    Version { path: PathBuf, reason: String },
    #[error("{path} does not exist: pass --containerd 1.x (containerd 1.6, 1.7) or --containerd 2.x to create it from pullgate's fragment")]
    Missing { path: PathBuf },
    #[error("{path}: refused, nothing written:\n{}", conflicts.iter().map(|c| format!("  {c}")).collect::<Vec<_>>().join("\n"))]
    Conflict { path: PathBuf, conflicts: Vec<String> },
    #[error("{path}: {key}: {reason}")]
    Shape { path: PathBuf, key: String, reason: String },
    #[error("{backup} exists from an earlier merge that was not undone: run `pullgate containerd-config --undo` first, or remove it and {mark} to keep the current file as the new starting point")]
    BackupExists { backup: PathBuf, mark: PathBuf },
    #[error("no merge to undo for {path}: {mark} does not exist")]
    NoBackup { path: PathBuf, mark: PathBuf },
    #[error("{path} changed since pullgate merged into it: restoring {backup} would lose those changes (--force restores it anyway)")]
    Edited { path: PathBuf, backup: PathBuf },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("unknown architecture {0}: pass --platform linux/GOARCH[/VARIANT], as containerd names it")]
    Platform(String),
    #[error("cannot check the merged file with containerd ({containerd} --config FILE config dump): {reason}; pass --containerd-bin with the node's containerd. Nothing written.")]
    Unchecked { containerd: PathBuf, reason: String },
    #[error("{path}: refused, nothing written: containerd {version} would read the merged file otherwise than pullgate needs (its own reading, `config dump`, applies imports, key case, escapes and the config version):\n{}", problems.iter().map(|c| format!("  {c}")).collect::<Vec<_>>().join("\n"))]
    Unverified { path: PathBuf, version: String, problems: Vec<String> },
}

type Result<T, E = ContainerdConfigError> = std::result::Result<T, E>;

/// The platform containerd names for a machine architecture (dpkg's or `uname -m`'s name), as
/// plugin/fragment.sh maps it.
pub fn platform_of(arch: &str) -> Option<&'static str> {
    Some(match arch {
        "amd64" | "x86_64" => "linux/amd64",
        "arm64" | "aarch64" => "linux/arm64",
        "armhf" | "armv7l" => "linux/arm/v7",
        "armel" | "armv6l" => "linux/arm/v6",
        "i386" | "i686" => "linux/386",
        "ppc64el" | "ppc64le" => "linux/ppc64le",
        "s390x" => "linux/s390x",
        "riscv64" => "linux/riscv64",
        "mips64el" => "linux/mips64le",
        _ => return None,
    })
}

/// This machine's platform as containerd names it (from the architecture pullgate runs as).
pub fn node_platform() -> Result<String> {
    let arch = match std::env::consts::ARCH {
        "arm" if cfg!(target_feature = "v7") => "armv7l",
        "arm" => "armv6l",
        "x86" => "i686",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "mips64" if cfg!(target_endian = "little") => "mips64el",
        other => other,
    };
    platform_of(arch).map(str::to_string).ok_or_else(|| ContainerdConfigError::Platform(arch.to_string()))
}

// ---------------------------------------------------------------------------------------------
// The fragment and the merge

/// A string value in place of `v`, keeping `v`'s comments and spacing, and its quotes when they
/// are single (a literal string, as containerd 2.x writes them) and can hold `s`.
fn replace_str(v: &mut Value, s: &str) {
    let decor = v.decor().clone();
    let literal = match &*v {
        Value::String(f) => f.as_repr().and_then(|r| r.as_raw().as_str()).is_some_and(|r| r.starts_with('\'') && !r.starts_with("'''")),
        _ => false,
    };
    *v = match format!("'{s}'").parse::<Value>() {
        Ok(lit) if literal && lit.as_str() == Some(s) => lit,
        _ => Value::from(s),
    };
    *v.decor_mut() = decor;
}

fn utf8<'a>(p: &'a Path, key: &str) -> Result<&'a str> {
    p.to_str().ok_or_else(|| ContainerdConfigError::Shape { path: p.to_path_buf(), key: key.into(), reason: "the path is not UTF-8".into() })
}

/// The string value at `path` (tables and inline tables) in the fragment.
fn fragment_str<'a>(doc: &'a mut DocumentMut, path: &[&str]) -> Option<&'a mut Value> {
    let (last, parents) = path.split_last()?;
    let mut t: &mut dyn TableLike = doc.as_table_mut();
    for k in parents {
        t = t.get_mut(k)?.as_table_like_mut()?;
    }
    t.get_mut(last)?.as_value_mut()
}

/// The fragment for `series`, with pullgate's socket and root from its configuration, the
/// node's platform, and without the content sharing policy under `Sharing::Shared`.
pub fn fragment(series: Series, opts: &Options) -> Result<DocumentMut> {
    let name = PathBuf::from(format!("plugin/containerd-{}.toml", series.name()));
    let mut doc: DocumentMut = series.fragment().parse().map_err(|e| ContainerdConfigError::Parse { path: name.clone(), source: Box::new(e) })?;
    let socket = utf8(&opts.snapshotter_socket, "[daemon] snapshotter_socket")?;
    let root = utf8(&opts.root, "[daemon] root")?;
    let missing = |key: &str| ContainerdConfigError::Shape { path: name.clone(), key: key.into(), reason: "missing from the fragment".into() };
    for (path, value) in [(&["proxy_plugins", NAME, "address"][..], socket), (&["proxy_plugins", NAME, "exports", "root"][..], root)] {
        replace_str(fragment_str(&mut doc, path).ok_or_else(|| missing(&path.join(".")))?, value);
    }
    let entry = doc
        .get_mut("plugins")
        .and_then(|p| p.get_mut("io.containerd.transfer.v1.local"))
        .and_then(|t| t.get_mut("unpack_config"))
        .and_then(Item::as_array_of_tables_mut)
        .and_then(|a| a.get_mut(0))
        .and_then(|t| t.get_mut("platform"))
        .and_then(Item::as_value_mut)
        .ok_or_else(|| missing("unpack_config"))?;
    replace_str(entry, &opts.platform);
    if opts.sharing == Some(Sharing::Shared) {
        if let Some(p) = doc.get_mut("plugins").and_then(Item::as_table_like_mut) {
            p.remove(BOLT);
        }
    }
    Ok(doc)
}

/// A key path as TOML writes it (`plugins."io.containerd.grpc.v1.cri".containerd`).
fn dotted(path: &[&str]) -> String {
    let bare = |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    path.iter().map(|k| if bare(k) { k.to_string() } else { format!("\"{k}\"") }).collect::<Vec<_>>().join(".")
}

/// How a value reads in the file (its TOML, without comments and spacing).
fn shown(i: &Item) -> String {
    match i {
        Item::Value(v) => v.clone().decorated("", "").to_string(),
        Item::Table(_) => "a table".into(),
        Item::ArrayOfTables(_) => "an array of tables".into(),
        Item::None => "nothing".into(),
    }
}

/// Forgets where a table came from in the fragment: placed after its neighbours in the file.
fn unplace(t: &mut Table) {
    t.set_position(None);
    for (_, v) in t.iter_mut() {
        match v {
            Item::Table(t) => unplace(t),
            Item::ArrayOfTables(a) => a.iter_mut().for_each(unplace),
            _ => {}
        }
    }
}

/// The fragment's `item` as it can stand in a parent that is an inline table (`inline`) or not.
fn fitted(item: &Item, inline: bool) -> Item {
    match (item.clone(), inline) {
        (Item::Table(mut t), false) => {
            unplace(&mut t);
            Item::Table(t)
        }
        (Item::ArrayOfTables(mut a), false) => {
            a.iter_mut().for_each(unplace);
            Item::ArrayOfTables(a)
        }
        (Item::Table(t), true) => Item::Value(Value::InlineTable(t.into_inline_table())),
        (Item::ArrayOfTables(a), true) => Item::Value(Value::Array(a.into_array())),
        (other, _) => other,
    }
}

/// Adds `key = value` at the end of an inline table: the space before its closing brace stays
/// there, after the new value.
fn insert_inline(t: &mut dyn TableLike, key: &str, mut value: Value) {
    let mut tail = None;
    if let Some(last) = t.iter_mut().last().and_then(|(_, i)| i.as_value_mut()) {
        tail = last.decor().suffix().and_then(|s| s.as_str()).map(str::to_string);
        last.decor_mut().set_suffix("");
    }
    value.decor_mut().set_prefix(" ");
    value.decor_mut().set_suffix(tail.unwrap_or_else(|| " ".into()));
    t.insert(key, Item::Value(value));
}

/// Inserts the fragment's `item` at `key` of `parent`, in the parent's style.
fn insert(parent: &mut dyn TableLike, inline: bool, key: &str, item: &Item) {
    match fitted(item, inline) {
        Item::Value(v) if inline => insert_inline(parent, key, v),
        other => {
            parent.insert(key, other);
            if !inline && is_value_at(parent, key) {
                indent_like_siblings(parent, key);
            }
        }
    }
}

fn is_value_at(t: &dyn TableLike, key: &str) -> bool {
    t.get(key).is_some_and(Item::is_value)
}

/// A key added to a table is indented as the table's other keys are.
fn indent_like_siblings(t: &mut dyn TableLike, key: &str) {
    let indent = t
        .iter()
        .filter(|(k, _)| *k != key)
        .find_map(|(k, _)| {
            let prefix = t.key(k)?.leaf_decor().prefix()?.as_str()?;
            let tail = prefix.rsplit('\n').next().unwrap_or(prefix);
            tail.chars().all(|c| c == ' ' || c == '\t').then(|| tail.to_string())
        })
        .unwrap_or_default();
    if let Some(mut k) = t.key_mut(key) {
        k.leaf_decor_mut().set_prefix(indent);
    }
}

struct Merger<'a> {
    path: &'a Path,
    sharing: Option<Sharing>,
    conflicts: Vec<String>,
}

impl Merger<'_> {
    fn shape(&self, key: &[&str], reason: &str) -> ContainerdConfigError {
        ContainerdConfigError::Shape { path: self.path.to_path_buf(), key: dotted(key), reason: reason.into() }
    }

    /// Whether the operator's `old` value of `key` is containerd's default, which the
    /// fragment's value replaces.
    fn gives_way(&self, key: &str, old: &str) -> bool {
        match key {
            "snapshotter" => DEFAULT_SNAPSHOTTERS.contains(&old),
            "content_sharing_policy" => old == "shared" && self.sharing == Some(Sharing::Isolated),
            _ => false,
        }
    }

    fn conflict(&mut self, key: &[&str], theirs: &Item, ours: &str) {
        let last = key.last().copied().unwrap_or_default();
        let why = match (last, key.first().copied()) {
            ("content_sharing_policy", _) => {
                " (containerd's default, which `containerd config default` writes out: --content-sharing isolated replaces it, --content-sharing shared keeps it)"
            }
            ("snapshotter", _) => " (another snapshotter would unpack around pullgate's gate: change or remove that setting by hand to move to pullgate)",
            (_, Some("proxy_plugins")) => " (another pullgate, or a stale one: fix that table, or set pullgate's [daemon] snapshotter_socket and root to match it)",
            _ => "",
        };
        self.conflicts.push(format!("{} is {} in the file, pullgate needs \"{ours}\"{why}", dotted(key), shown(theirs)));
    }

    /// Merges the fragment's `ours` at `key` of `parent` (an inline table when `inline`).
    fn item(&mut self, parent: &mut dyn TableLike, inline: bool, key: &str, ours: &Item, path: &[&str]) -> Result<()> {
        let here: Vec<&str> = path.iter().copied().chain([key]).collect();
        match ours {
            Item::Table(_) | Item::Value(Value::InlineTable(_)) => {
                let Some(theirs) = parent.get_mut(key).filter(|i| !i.is_none()) else {
                    insert(parent, inline, key, ours);
                    return Ok(());
                };
                let theirs_inline = theirs.is_inline_table();
                let Some(t) = theirs.as_table_like_mut() else { return Err(self.shape(&here, "must be a table")) };
                if let Some(o) = ours.as_table_like() {
                    for (k, v) in o.iter() {
                        self.item(t, theirs_inline, k, v, &here)?;
                    }
                }
                Ok(())
            }
            Item::ArrayOfTables(entries) => self.entries(parent, inline, key, entries, &here),
            Item::Value(v) => {
                let want = v.as_str().ok_or_else(|| self.shape(&here, "the fragment's value is not a string"))?;
                match parent.get_mut(key) {
                    None | Some(Item::None) => insert(parent, inline, key, &Item::Value(Value::from(want))),
                    Some(Item::Value(old)) if old.as_str() == Some(want) => {}
                    Some(Item::Value(old)) if old.as_str().is_some_and(|s| self.gives_way(key, s)) => replace_str(old, want),
                    Some(other) => {
                        let other = other.clone();
                        self.conflict(&here, &other, want);
                    }
                }
                Ok(())
            }
            Item::None => Ok(()),
        }
    }

    /// The transfer service's `unpack_config`: the entry for the fragment's platform is merged
    /// like a table; without one, the fragment's is appended.
    fn entries(&mut self, parent: &mut dyn TableLike, inline: bool, key: &str, ours: &ArrayOfTables, here: &[&str]) -> Result<()> {
        for entry in ours.iter() {
            let platform = entry.get("platform").and_then(Item::as_str);
            match parent.get_mut(key) {
                None | Some(Item::None) => {
                    let mut a = ArrayOfTables::new();
                    a.push(entry.clone());
                    insert(parent, inline, key, &Item::ArrayOfTables(a));
                }
                Some(Item::ArrayOfTables(theirs)) => {
                    let found = theirs.iter().position(|t| t.get("platform").and_then(Item::as_str) == platform);
                    match found.and_then(|i| theirs.get_mut(i)) {
                        Some(t) => {
                            for (k, v) in entry.iter() {
                                self.item(t, false, k, v, here)?;
                            }
                        }
                        None => {
                            let mut t = entry.clone();
                            unplace(&mut t);
                            theirs.push(t);
                        }
                    }
                }
                Some(Item::Value(Value::Array(theirs))) => {
                    let same = |v: &Value| v.as_inline_table().and_then(|t| t.get("platform")).and_then(Value::as_str) == platform;
                    if theirs.iter().any(|v| !v.is_inline_table()) {
                        return Err(self.shape(here, "must be an array of tables"));
                    }
                    let found = theirs.iter().position(same);
                    match found.and_then(|i| theirs.get_mut(i)).and_then(Value::as_inline_table_mut) {
                        Some(t) => {
                            for (k, v) in entry.iter() {
                                self.item(t, true, k, v, here)?;
                            }
                        }
                        None => theirs.push(entry.clone().into_inline_table()),
                    }
                }
                Some(_) => return Err(self.shape(here, "must be an array of tables")),
            }
        }
        Ok(())
    }

    /// A top-level list of strings.
    fn strings(&self, i: &Item, key: &str) -> Result<Vec<String>> {
        let a = i.as_array().ok_or_else(|| self.shape(&[key], "must be a list"))?;
        a.iter().map(|v| v.as_str().map(str::to_string).ok_or_else(|| self.shape(&[key], "must list strings"))).collect()
    }

    /// `disabled_plugins`: the fragment's entries appended to the operator's, in the style of
    /// the list; pullgate itself listed there, or a plugin the fragment disables listed in
    /// `required_plugins`, is a conflict.
    fn disabled_plugins(&mut self, doc: &mut DocumentMut, ours: &[String]) -> Result<()> {
        if let Some(req) = doc.get("required_plugins") {
            for r in self.strings(req, "required_plugins")?.into_iter().filter(|r| ours.contains(r)) {
                self.conflicts.push(format!("required_plugins lists \"{r}\", which pullgate disables (no snapshotter but pullgate may load): remove it from required_plugins"));
            }
        }
        let Some(item) = doc.get_mut("disabled_plugins").filter(|i| !i.is_none()) else {
            doc.insert("disabled_plugins", toml_edit::value(ours.iter().map(String::as_str).collect::<toml_edit::Array>()));
            return Ok(());
        };
        let theirs = self.strings(item, "disabled_plugins")?;
        if let Some(p) = theirs.iter().find(|p| *p == PLUGIN_URI || *p == NAME) {
            self.conflicts.push(format!("disabled_plugins lists \"{p}\": containerd would not load pullgate"));
        }
        let Some(a) = item.as_array_mut() else { return Err(self.shape(&["disabled_plugins"], "must be a list")) };
        let was_empty = a.is_empty();
        // Each new entry is spaced as the last one is (on its own line in a list of lines), and
        // after a comma and a space in a list with its first entry right after the bracket.
        let prefix = a.iter().last().and_then(|v| v.decor().prefix()).and_then(|p| p.as_str()).filter(|p| !p.is_empty()).unwrap_or(" ").to_string();
        for p in ours.iter().filter(|p| !theirs.contains(p)) {
            let mut v = Value::from(p.as_str());
            v.decor_mut().set_prefix(prefix.clone());
            v.decor_mut().set_suffix("");
            a.push_formatted(v);
        }
        if was_empty {
            a.fmt();
        }
        Ok(())
    }
}

/// The file's containerd, from its `version` (checked against the operator's `want`).
fn series_of(doc: &DocumentMut, path: &Path, want: Option<Series>) -> Result<Series> {
    let refuse = |reason: String| ContainerdConfigError::Version { path: path.to_path_buf(), reason };
    let version = match doc.get("version") {
        None => 1,
        Some(v) => v.as_integer().ok_or_else(|| refuse("version must be an integer".into()))?,
    };
    let Some(found) = Series::of_version(version) else {
        return Err(refuse(if version == 1 {
            format!("config version 1 ({}) is not merged into: convert the file first with `containerd config migrate` (containerd 1.7 and 2.x print it as version 2 or 3), check it, and run this again", if doc.contains_key("version") { "version = 1" } else { "no version key" })
        } else {
            format!("config version {version} is not one pullgate knows (2: containerd 1.6 and 1.7; 3 or 4: containerd 2.x)")
        }));
    };
    match want {
        Some(w) if w != found => Err(refuse(format!("config version {version} is containerd {}'s, not {}'s (--containerd {})", found.name(), w.name(), w.name()))),
        _ => Ok(found),
    }
}

/// `text` (containerd's config file at `path`) with pullgate's fragment merged in. Refuses,
/// naming every conflict, when the file pins something else where pullgate must be.
pub fn merge(text: &str, path: &Path, opts: &Options) -> Result<String> {
    let mut doc: DocumentMut = text.parse().map_err(|e| ContainerdConfigError::Parse { path: path.to_path_buf(), source: Box::new(e) })?;
    let series = series_of(&doc, path, opts.series)?;
    let frag = fragment(series, opts)?;
    let mut m = Merger { path, sharing: opts.sharing, conflicts: Vec::new() };
    let disabled: Vec<String> = frag.get("disabled_plugins").and_then(Item::as_array).into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect();
    m.disabled_plugins(&mut doc, &disabled)?;
    for (k, v) in frag.iter() {
        if k != "version" && k != "disabled_plugins" {
            m.item(doc.as_table_mut(), false, k, v, &[])?;
        }
    }
    if !m.conflicts.is_empty() {
        return Err(ContainerdConfigError::Conflict { path: path.to_path_buf(), conflicts: m.conflicts });
    }
    let out = doc.to_string();
    // What is written must read as TOML (containerd's parser refuses a table defined twice).
    toml::from_str::<toml::Value>(&out)
        .map_err(|e| ContainerdConfigError::Shape { path: path.to_path_buf(), key: "(the merged file)".into(), reason: format!("would not parse ({}); nothing written", e.message()) })?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The file: plan, write, undo

/// What a merge would do to the file.
#[derive(Debug)]
pub struct Plan {
    /// The file written (a symbolic link's target).
    pub file: PathBuf,
    /// Its bytes now (None: it does not exist).
    pub before: Option<Vec<u8>>,
    pub after: String,
}

impl Plan {
    pub fn changes(&self) -> bool {
        self.before.as_deref() != Some(self.after.as_bytes())
    }
    /// The change as a unified diff, the values of credential keys (a registry's `auth`,
    /// `password`, tokens, its `headers`) hidden: the file may hold them, and the diff goes to a
    /// terminal and an installer's log. Both sides are hidden as parsed TOML, so a value written
    /// over several lines or inside an inline table is hidden whole (line numbers are then those
    /// of the hidden text); a side that does not parse is not shown at all.
    pub fn diff(&self) -> String {
        let name = self.file.display().to_string();
        let before = self.before.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let old = if self.before.is_some() { name.clone() } else { "/dev/null".into() };
        match (with_secrets_hidden(&before), with_secrets_hidden(&self.after)) {
            (Some(before), Some(after)) => unified_diff(&before, &after, &old, &name),
            _ if !self.changes() => String::new(),
            _ => format!("(the change to {name} is not shown: it does not parse as TOML, and it may hold credentials)\n"),
        }
    }
    pub fn backup(&self) -> PathBuf {
        beside(&self.file, BACKUP_SUFFIX)
    }
}

// The check: what containerd itself reads from the merged file

/// Built-in snapshotters each containerd series has: every one must be disabled, or a client
/// could unpack a cached image around the gate.
const BUILTINS_1X: [&str; 7] = ["overlayfs", "native", "btrfs", "zfs", "devmapper", "aufs", "blockfile"];
const BUILTINS_2X: [&str; 8] = ["overlayfs", "native", "btrfs", "zfs", "devmapper", "aufs", "blockfile", "erofs"];

/// Runs `containerd --config FILE config dump` on the merged text (written to a private file
/// beside the target, so that relative imports resolve alike) and checks what containerd read.
/// containerd's loader, not pullgate's reading, decides: imports merged in (2.4 adds
/// /etc/containerd/conf.d/*.toml by itself), keys matched as containerd matches them, escapes
/// decoded as its TOML library decodes them, a version 2 file migrated by a 2.x containerd.
pub fn verify(plan: &Plan, opts: &Options, containerd: &Path) -> Result<()> {
    let unchecked = |reason: String| ContainerdConfigError::Unchecked { containerd: containerd.to_path_buf(), reason };
    let dir = plan.file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".pullgate-check-")
        .suffix(".toml")
        .tempfile_in(dir)
        .map_err(|source| ContainerdConfigError::Write { path: dir.to_path_buf(), source })?;
    tmp.write_all(plan.after.as_bytes()).map_err(|source| ContainerdConfigError::Write { path: tmp.path().to_path_buf(), source })?;
    let out = std::process::Command::new(containerd)
        .arg("--config")
        .arg(tmp.path())
        .args(["config", "dump"])
        .output()
        .map_err(|e| unchecked(e.to_string()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(unchecked(format!("{}: {}", out.status, err.trim().lines().last().unwrap_or(""))));
    }
    let dump: toml::Value = std::str::from_utf8(&out.stdout)
        .map_err(|e| e.to_string())
        .and_then(|t| toml::from_str(t).map_err(|e| e.to_string()))
        .map_err(|e| unchecked(format!("its output is not TOML: {e}")))?;
    let (version, problems) = dump_problems(&dump, opts);
    match problems.is_empty() {
        true => Ok(()),
        false => Err(ContainerdConfigError::Unverified { path: plan.file.clone(), version, problems }),
    }
}

/// What in containerd's `config dump` keeps pullgate from being the only snapshotter it loads
/// and the one CRI and the transfer service unpack into; and the config version it read as.
fn dump_problems(dump: &toml::Value, opts: &Options) -> (String, Vec<String>) {
    let at = |path: &[&str]| path.iter().try_fold(dump, |v, k| v.get(k));
    let text = |path: &[&str]| at(path).and_then(|v| v.as_str()).map(str::to_string);
    let version = at(&["version"]).and_then(|v| v.as_integer()).unwrap_or(0);
    let v2 = version >= 3;
    let series = if v2 { "2.x" } else { "1.x" };
    let mut problems = Vec::new();
    let disabled: Vec<&str> = at(&["disabled_plugins"]).and_then(|v| v.as_array()).map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default();
    let builtins: &[&str] = if v2 { &BUILTINS_2X } else { &BUILTINS_1X };
    for b in builtins {
        let uri = format!("io.containerd.snapshotter.v1.{b}");
        if !disabled.contains(&uri.as_str()) {
            problems.push(format!("disabled_plugins lacks {uri}: containerd {series} would load it beside pullgate"));
        }
    }
    if disabled.contains(&PLUGIN_URI) {
        problems.push(format!("disabled_plugins names {PLUGIN_URI}"));
    }
    let socket = opts.snapshotter_socket.display().to_string();
    match (text(&["proxy_plugins", NAME, "type"]), text(&["proxy_plugins", NAME, "address"])) {
        (Some(t), Some(a)) if t == "snapshot" && a == socket => {}
        (t, a) => problems.push(format!(
            "proxy_plugins.{NAME} is type {:?} at {:?}, not a snapshot plugin at {socket}",
            t.unwrap_or_default(),
            a.unwrap_or_default()
        )),
    }
    if let Some(proxies) = at(&["proxy_plugins"]).and_then(|v| v.as_table()) {
        for (name, p) in proxies {
            if name != NAME && p.get("type").and_then(|t| t.as_str()) == Some("snapshot") {
                problems.push(format!("proxy_plugins.{name} is another snapshotter: any client could unpack with it"));
            }
        }
    }
    if opts.sharing != Some(Sharing::Shared) {
        let policy = text(&["plugins", BOLT, "content_sharing_policy"]).unwrap_or_default();
        if policy != "isolated" {
            problems.push(format!("plugins.\"{BOLT}\".content_sharing_policy is {policy:?}, not \"isolated\""));
        }
    }
    // CRI: its image service's snapshotter, and any a runtime or platform of it names.
    let (cri, images, runtimes): (&str, &[&str], &[&str]) = if v2 {
        ("io.containerd.cri.v1.images", &["plugins", "io.containerd.cri.v1.images"], &["plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"])
    } else {
        ("io.containerd.grpc.v1.cri", &["plugins", "io.containerd.grpc.v1.cri", "containerd"], &["plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"])
    };
    if !disabled.contains(&cri) {
        let mut want = |what: String, v: Option<&toml::Value>, empty_ok: bool| {
            let got = v.and_then(|v| v.as_str()).unwrap_or("");
            if got != NAME && !(empty_ok && got.is_empty()) {
                problems.push(format!("{what} is {got:?}, not \"{NAME}\""));
            }
        };
        want(format!("CRI's snapshotter ({})", images.join(".")), at(images).and_then(|t| t.get("snapshotter")), false);
        for (name, r) in at(runtimes).and_then(|v| v.as_table()).into_iter().flatten() {
            want(format!("CRI runtime {name}'s snapshotter"), r.get("snapshotter"), true);
        }
        let platforms: &[&str] = if v2 { &["plugins", "io.containerd.cri.v1.images", "runtime_platforms"] } else { &[] };
        for (name, r) in at(platforms).filter(|_| v2).and_then(|v| v.as_table()).into_iter().flatten() {
            want(format!("CRI runtime platform {name}'s snapshotter"), r.get("snapshotter"), true);
        }
    }
    // The transfer service (1.7 and 2.x): every platform it unpacks unpacks into pullgate.
    if let Some(entries) = at(&["plugins", "io.containerd.transfer.v1.local", "unpack_config"]).and_then(|v| v.as_array()) {
        for e in entries {
            let (platform, snap) = (e.get("platform").and_then(|v| v.as_str()).unwrap_or(""), e.get("snapshotter").and_then(|v| v.as_str()).unwrap_or(""));
            if snap != NAME {
                problems.push(format!("the transfer service unpacks {platform} into {snap:?}, not \"{NAME}\""));
            }
        }
    }
    (format!("{series} (config version {version})"), problems)
}

/// The text with the value of every credential key replaced by `<hidden>`, or None when it
/// does not parse as TOML. Keys are matched without case (containerd 1.x reads its config with
/// BurntSushi's TOML, 2.x with go-toml, and either may be lenient): a registry's `auth`,
/// `password`, `identitytoken`, anything naming a token, secret or passphrase, and every value
/// under `headers` (an `Authorization` header, for one). Written by hand over toml_edit's spans:
/// no crate hides values in place and keeps the rest of the text as written.
fn with_secrets_hidden(text: &str) -> Option<String> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let mut spans = Vec::new();
    secret_spans(doc.as_table(), false, &mut spans)?;
    spans.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for r in spans {
        // A span inside one already hidden (an array under `headers`) is hidden with it.
        if r.start < at {
            continue;
        }
        out.push_str(text.get(at..r.start)?);
        out.push_str("<hidden>");
        at = r.end;
    }
    out.push_str(text.get(at..)?);
    Some(out.split_inclusive('\n').map(|l| match l.strip_suffix('\n') {
        Some(l) => hide_commented_secret(l) + "\n",
        None => hide_commented_secret(l),
    }).collect())
}

/// Keys folded as Go folds them (`ſ` is `s`, the Kelvin sign `k`): containerd's TOML readers
/// match a key to a field that way.
fn is_secret_key(key: &str) -> bool {
    let k = crate::document::fold(key);
    k == "AUTH" || k == "HEADERS" || ["PASSWORD", "TOKEN", "SECRET", "PASSPHRASE", "AUTHORIZATION"].iter().any(|s| k.contains(s))
}

/// A comment line that reads as a credential (`# password = "old"`, a key commented out), with
/// the value hidden; other lines as they are.
fn hide_commented_secret(line: &str) -> String {
    let Some((before, comment)) = line.split_once('#') else { return line.to_string() };
    if !before.trim().is_empty() {
        return line.to_string();
    }
    match comment.split_once('=') {
        Some((key, _)) if is_secret_key(key.trim().trim_matches(|c| c == '"' || c == '\'')) => format!("{before}#{key}= <hidden>"),
        _ => line.to_string(),
    }
}

/// The spans of the values to hide in a table (`all`: under a secret key, every value).
/// None when a value has no span (not parsed from the text): the caller then shows nothing.
fn secret_spans(table: &dyn TableLike, all: bool, spans: &mut Vec<std::ops::Range<usize>>) -> Option<()> {
    for (key, item) in table.iter() {
        let secret = all || is_secret_key(key);
        match item {
            Item::Value(v) if secret => spans.push(v.span()?),
            Item::Value(Value::InlineTable(t)) => secret_spans(t, false, spans)?,
            Item::Value(Value::Array(a)) => array_secret_spans(a, spans)?,
            Item::Value(_) | Item::None => {}
            Item::Table(t) => secret_spans(t, secret, spans)?,
            Item::ArrayOfTables(a) => {
                for t in a.iter() {
                    secret_spans(t, secret, spans)?;
                }
            }
        }
    }
    Some(())
}

/// The spans to hide in the inline tables of an array, arrays within it included.
fn array_secret_spans(a: &toml_edit::Array, spans: &mut Vec<std::ops::Range<usize>>) -> Option<()> {
    for v in a.iter() {
        match v {
            Value::InlineTable(t) => secret_spans(t, false, spans)?,
            Value::Array(a) => array_secret_spans(a, spans)?,
            _ => {}
        }
    }
    Some(())
}

fn beside(file: &Path, suffix: &str) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// The file a path names, through symbolic links (so that the write replaces the file and not
/// the link).
fn resolve(file: &Path) -> PathBuf {
    std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf())
}

/// Reads the file and merges into it (or, when it does not exist and the operator named the
/// containerd, starts from the fragment). Writes nothing.
pub fn plan(opts: &Options) -> Result<Plan> {
    let file = resolve(&opts.file);
    match std::fs::read(&file) {
        Ok(bytes) => {
            let text = std::str::from_utf8(&bytes)
                .map_err(|e| ContainerdConfigError::Shape { path: file.clone(), key: "(the file)".into(), reason: format!("not UTF-8 text ({e})") })?;
            let after = merge(text, &file, opts)?;
            Ok(Plan { file, before: Some(bytes), after })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let series = opts.series.ok_or_else(|| ContainerdConfigError::Missing { path: file.clone() })?;
            Ok(Plan { file, before: None, after: fragment(series, opts)?.to_string() })
        }
        Err(source) => Err(ContainerdConfigError::Read { path: file, source }),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Replaces `path` with `bytes` crash-safely: a temporary file in the same directory, with the
/// mode and owner given (else 0644), flushed to disk, renamed over `path`, the directory flushed.
fn write_atomic(path: &Path, bytes: &[u8], like: Option<&std::fs::Metadata>) -> Result<()> {
    let err = |source| ContainerdConfigError::Write { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(dir).map_err(err)?;
    tmp.write_all(bytes).map_err(err)?;
    let f = tmp.as_file();
    match like {
        Some(m) => {
            f.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777)).map_err(err)?;
            std::os::unix::fs::fchown(f, Some(m.uid()), Some(m.gid())).map_err(err)?;
        }
        None => f.set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(err)?,
    }
    f.sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    sync_dir(dir).map_err(err)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes the plan: first the backup of the previous bytes and the mark of what is written,
/// then the file. Refuses while an earlier merge's backup is there (it would be lost).
pub fn apply(plan: &Plan) -> Result<()> {
    if !plan.changes() {
        return Ok(());
    }
    let (backup, mark) = (plan.backup(), beside(&plan.file, MARK_SUFFIX));
    if backup.symlink_metadata().is_ok() || mark.symlink_metadata().is_ok() {
        return Err(ContainerdConfigError::BackupExists { backup, mark });
    }
    let meta = match std::fs::metadata(&plan.file) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => return Err(ContainerdConfigError::Read { path: plan.file.clone(), source }),
    };
    if let Some(before) = &plan.before {
        write_atomic(&backup, before, meta.as_ref())?;
    }
    let created = if plan.before.is_none() { "created\n" } else { "" };
    write_atomic(&mark, format!("sha256:{}\n{created}", sha256_hex(plan.after.as_bytes())).as_bytes(), meta.as_ref())?;
    write_atomic(&plan.file, plan.after.as_bytes(), meta.as_ref())
}

/// What `undo` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Undone {
    /// The file holds its bytes from before the merge again.
    Restored { file: PathBuf, backup: PathBuf },
    /// The merge had created the file: it is removed.
    Removed { file: PathBuf },
}

/// Puts back the file as it was before the merge (byte for byte), and removes the backup and
/// the mark. Refuses when the file is not what the merge wrote, unless `force`.
pub fn undo(file: &Path, force: bool) -> Result<Undone> {
    let file = resolve(file);
    let (backup, mark) = (beside(&file, BACKUP_SUFFIX), beside(&file, MARK_SUFFIX));
    let marked = match std::fs::read_to_string(&mark) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ContainerdConfigError::NoBackup { path: file, mark }),
        Err(source) => return Err(ContainerdConfigError::Read { path: mark, source }),
    };
    let created = marked.lines().any(|l| l == "created");
    let wrote = marked.lines().find_map(|l| l.strip_prefix("sha256:")).map(str::to_string);
    let current = std::fs::read(&file).map_err(|source| ContainerdConfigError::Read { path: file.clone(), source })?;
    if !force && wrote.as_deref() != Some(sha256_hex(&current).as_str()) {
        return Err(ContainerdConfigError::Edited { path: file, backup: if created { mark } else { backup } });
    }
    let done = if created {
        std::fs::remove_file(&file).map_err(|source| ContainerdConfigError::Write { path: file.clone(), source })?;
        Undone::Removed { file: file.clone() }
    } else {
        let bytes = match std::fs::read(&backup) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ContainerdConfigError::NoBackup { path: file, mark: backup }),
            Err(source) => return Err(ContainerdConfigError::Read { path: backup, source }),
        };
        let meta = std::fs::metadata(&file).map_err(|source| ContainerdConfigError::Read { path: file.clone(), source })?;
        write_atomic(&file, &bytes, Some(&meta))?;
        std::fs::remove_file(&backup).map_err(|source| ContainerdConfigError::Write { path: backup.clone(), source })?;
        Undone::Restored { file: file.clone(), backup }
    };
    std::fs::remove_file(&mark).map_err(|source| ContainerdConfigError::Write { path: mark.clone(), source })?;
    if let Some(dir) = file.parent() {
        sync_dir(dir).map_err(|source| ContainerdConfigError::Write { path: dir.to_path_buf(), source })?;
    }
    Ok(done)
}

// ---------------------------------------------------------------------------------------------
// The diff

/// A unified diff (three lines of context) of two texts, by lines. Written here: no crate in
/// the lock file makes one, and a config file's few hundred lines need no more than the longest
/// common subsequence (the common head and tail are set aside first).
pub fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    if a == b {
        return String::new();
    }
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..].iter().rev().zip(b[head..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    // ops: (' ' | '-' | '+', index in a or b)
    let mut ops: Vec<(char, usize)> = (0..head).map(|i| (' ', i)).collect();
    if ma.len().saturating_mul(mb.len()) > 16_000_000 {
        ops.extend((0..ma.len()).map(|i| ('-', head + i)));
        ops.extend((0..mb.len()).map(|j| ('+', head + j)));
    } else {
        // lcs[i][j]: the longest common subsequence of ma[i..] and mb[j..].
        let w = mb.len() + 1;
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] { lcs[(i + 1) * w + j + 1] + 1 } else { lcs[(i + 1) * w + j].max(lcs[i * w + j + 1]) };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                ops.push((' ', head + i));
                i += 1;
                j += 1;
            } else if i < ma.len() && (j == mb.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                ops.push(('-', head + i));
                i += 1;
            } else {
                ops.push(('+', head + j));
                j += 1;
            }
        }
    }
    ops.extend((0..tail).map(|k| (' ', a.len() - tail + k)));
    // Hunks: runs of changes with up to 3 lines of context around, joined when they touch.
    let changed: Vec<usize> = ops.iter().enumerate().filter(|(_, (c, _))| *c != ' ').map(|(k, _)| k).collect();
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(3);
        let mut end = changed[k];
        while k < changed.len() && changed[k] <= end + 7 {
            end = changed[k];
            k += 1;
        }
        let end = (end + 4).min(ops.len());
        let hunk = &ops[start..end];
        // Line numbers: how many lines of a and of b come before the hunk.
        let before = &ops[..start];
        let a0 = before.iter().filter(|(c, _)| *c != '+').count();
        let b0 = before.iter().filter(|(c, _)| *c != '-').count();
        let alen = hunk.iter().filter(|(c, _)| *c != '+').count();
        let blen = hunk.iter().filter(|(c, _)| *c != '-').count();
        let at = |n0: usize, len: usize| if len == 0 { n0 } else { n0 + 1 };
        out.push_str(&format!("@@ -{},{alen} +{},{blen} @@\n", at(a0, alen), at(b0, blen)));
        for &(c, idx) in hunk {
            let line = if c == '+' { b[idx] } else { a[idx] };
            out.push(c);
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn opts(file: &Path) -> Options {
        Options::new(file.to_path_buf(), &Config::default(), "linux/arm64".into())
    }

    /// The value at a dotted path of a parsed config.
    fn at<'a>(v: &'a toml::Value, path: &[&str]) -> Option<&'a toml::Value> {
        path.iter().try_fold(v, |v, k| v.get(*k))
    }

    fn parsed(text: &str) -> toml::Value {
        toml::from_str(text).unwrap()
    }

    const CRI1: [&str; 4] = ["plugins", "io.containerd.grpc.v1.cri", "containerd", "snapshotter"];
    const CRI2: [&str; 3] = ["plugins", "io.containerd.cri.v1.images", "snapshotter"];

    /// Checks that `text` carries everything the fragment sets.
    fn has_fragment(text: &str, cri: &[&str]) {
        let v = parsed(text);
        assert_eq!(at(&v, cri).and_then(|s| s.as_str()), Some("pullgate"), "{text}");
        assert_eq!(at(&v, &["proxy_plugins", "pullgate", "address"]).and_then(|s| s.as_str()), Some("/run/pullgate/snapshotter.sock"));
        assert_eq!(at(&v, &["proxy_plugins", "pullgate", "exports", "root"]).and_then(|s| s.as_str()), Some("/var/lib/pullgate"));
        assert_eq!(at(&v, &["plugins", BOLT, "content_sharing_policy"]).and_then(|s| s.as_str()), Some("isolated"));
        let unpack = at(&v, &["plugins", "io.containerd.transfer.v1.local", "unpack_config"]).and_then(|u| u.as_array()).unwrap();
        assert!(
            unpack.iter().any(|e| e.get("platform").and_then(|p| p.as_str()) == Some("linux/arm64") && e.get("snapshotter").and_then(|p| p.as_str()) == Some("pullgate")),
            "{text}"
        );
        let disabled = at(&v, &["disabled_plugins"]).and_then(|d| d.as_array()).unwrap();
        assert!(disabled.iter().any(|d| d.as_str() == Some("io.containerd.snapshotter.v1.overlayfs")));
    }

    // containerd 1.7's and 2.1's `containerd config default`, abridged (their shapes kept).
    const DEFAULT_17: &str = r#"disabled_plugins = []
imports = []
oom_score = 0
required_plugins = []
root = "/var/lib/containerd"
state = "/run/containerd"
version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.8"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"

      [plugins."io.containerd.grpc.v1.cri".containerd.default_runtime]
        snapshotter = ""

  [plugins."io.containerd.metadata.v1.bolt"]
    content_sharing_policy = "shared"

  [plugins."io.containerd.transfer.v1.local"]
    max_concurrent_downloads = 3

    [[plugins."io.containerd.transfer.v1.local".unpack_config]]
      differ = ""
      platform = "linux/arm64"
      snapshotter = "overlayfs"

[proxy_plugins]

[timeouts]
  "io.containerd.timeout.bolt.open" = "0s"
"#;
    const DEFAULT_21: &str = "version = 3
root = '/var/lib/containerd'
state = '/run/containerd'
disabled_plugins = []
required_plugins = []
imports = []

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    disable_snapshot_annotations = true

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'registry.k8s.io/pause:3.10'

  [plugins.'io.containerd.metadata.v1.bolt']
    content_sharing_policy = 'shared'
    no_sync = false

  [plugins.'io.containerd.transfer.v1.local']
    max_concurrent_downloads = 3

[timeouts]
  'io.containerd.timeout.bolt.open' = '0s'
";

    #[test]
    fn merges_into_fresh_default_configs() {
        let p = Path::new("/etc/containerd/config.toml");
        let mut o = opts(p);
        // An explicit "shared" (what config default writes) needs the operator's word.
        for (text, cri) in [(DEFAULT_17, &CRI1[..]), (DEFAULT_21, &CRI2[..])] {
            let e = merge(text, p, &o).unwrap_err().to_string().replace('\'', "\"");
            assert!(e.contains("content_sharing_policy is \"shared\" in the file, pullgate needs \"isolated\""), "{e}");
            o.sharing = Some(Sharing::Isolated);
            let out = merge(text, p, &o).unwrap();
            has_fragment(&out, cri);
            // Everything else is where it was.
            for line in text.lines().filter(|l| !l.contains("snapshotter = ") && !l.contains("content_sharing_policy") && !l.starts_with("disabled_plugins")) {
                assert!(out.contains(line), "lost {line:?}:\n{out}");
            }
            // containerd's default overlayfs gave way, the runtime's empty default is untouched.
            assert!(!out.contains("overlayfs\"\n") && !out.contains("'overlayfs'\n"), "{out}");
            o.sharing = None;
        }
        let out = merge(DEFAULT_17, p, &Options { sharing: Some(Sharing::Isolated), ..o.clone() }).unwrap();
        // The 1.7 entry for this platform was changed in place (its differ kept), not doubled.
        assert_eq!(out.matches("unpack_config]]").count(), 1, "{out}");
        assert!(out.contains("      differ = \"\"\n      platform = \"linux/arm64\"\n      snapshotter = \"pullgate\"\n"), "{out}");
        // New keys are indented as their neighbours.
        let out = merge(DEFAULT_21, p, &Options { sharing: Some(Sharing::Isolated), ..o }).unwrap();
        assert!(out.contains("\n    max_concurrent_downloads = 3\n"), "{out}");
        // A value replaced keeps single quotes (containerd 2.x's).
        assert!(out.contains("\n    snapshotter = 'pullgate'\n    disable_snapshot_annotations = true\n"), "{out}");
        assert!(out.starts_with("version = 3\nroot = '/var/lib/containerd'\n"), "{out}");
    }

    #[test]
    fn keeps_the_operators_settings_and_comments() {
        let p = Path::new("/c.toml");
        let text = "# containerd for node 7 (ticket: keep debug on)\nversion = 2\nroot = \"/srv/containerd\"\n# the operator's own list\ndisabled_plugins = [\n  \"io.containerd.grpc.v1.cri\",\n  \"io.containerd.snapshotter.v1.native\",\n]\n\n[debug]\n  level = \"debug\" # while we look into it\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n";
        let out = merge(text, p, &opts(p)).unwrap();
        has_fragment(&out, &CRI1);
        assert!(out.starts_with("# containerd for node 7 (ticket: keep debug on)\nversion = 2\nroot = \"/srv/containerd\"\n# the operator's own list\n"), "{out}");
        assert!(out.contains("  level = \"debug\" # while we look into it\n"), "{out}");
        assert!(out.contains("[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"), "{out}");
        // The list keeps its entries, order and layout; native is not repeated.
        assert!(out.contains("disabled_plugins = [\n  \"io.containerd.grpc.v1.cri\",\n  \"io.containerd.snapshotter.v1.native\",\n  \"io.containerd.snapshotter.v1.overlayfs\",\n"), "{out}");
        assert_eq!(out.matches("io.containerd.snapshotter.v1.native").count(), 1);
        let out = merge("version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n", p, &opts(p)).unwrap();
        assert!(out.contains("disabled_plugins = [\"io.containerd.grpc.v1.cri\", \"io.containerd.snapshotter.v1.overlayfs\", \"io.containerd.snapshotter.v1.native\","), "{out}");
        // The fragment's explanations come along.
        assert!(out.contains("# Each namespace sees only the blobs it wrote or was given"), "{out}");
    }

    #[test]
    fn dotted_keys_and_inline_tables() {
        let p = Path::new("/c.toml");
        let text = "version = 3\nplugins.\"io.containerd.cri.v1.images\".snapshotter = \"overlayfs\"\n\n[plugins.\"io.containerd.transfer.v1.local\"]\nunpack_config = [{ platform = \"linux/arm64\", snapshotter = \"overlayfs\" }]\n\n[proxy_plugins]\nother = { type = \"snapshot\", address = \"/run/other.sock\" }\n";
        let out = merge(text, p, &opts(p)).unwrap();
        has_fragment(&out, &CRI2);
        assert!(out.contains("plugins.\"io.containerd.cri.v1.images\".snapshotter = \"pullgate\"\n"), "{out}");
        assert!(out.contains("unpack_config = [{ platform = \"linux/arm64\", snapshotter = \"pullgate\" }]"), "{out}");
        assert!(out.contains("other = { type = \"snapshot\", address = \"/run/other.sock\" }"), "{out}");
        assert_eq!(merge(&out, p, &opts(p)).unwrap(), out);
        // An inline plugin table gains the key inline; another platform's entry is added.
        let text = "version = 2\n[plugins]\n\"io.containerd.grpc.v1.cri\" = { containerd = { default_runtime_name = \"runc\" } }\n\"io.containerd.transfer.v1.local\" = { unpack_config = [{ platform = \"linux/amd64\", snapshotter = \"pullgate\" }] }\n";
        let out = merge(text, p, &opts(p)).unwrap();
        has_fragment(&out, &CRI1);
        assert!(out.contains("containerd = { default_runtime_name = \"runc\", snapshotter = \"pullgate\" }"), "{out}");
        assert_eq!(merge(&out, p, &opts(p)).unwrap(), out);
    }

    #[test]
    fn idempotent() {
        let p = Path::new("/c.toml");
        let o = Options { sharing: Some(Sharing::Isolated), ..opts(p) };
        for text in [DEFAULT_17, DEFAULT_21, "version = 2\n", "version = 4\n"] {
            let once = merge(text, p, &o).unwrap();
            assert_eq!(merge(&once, p, &o).unwrap(), once);
            assert_eq!(merge(&once, p, &opts(p)).unwrap(), once, "without the flag, once isolated");
        }
        // The fragments themselves (as plugin/fragment.sh prints them) are already merged.
        for (s, text) in [(Series::V1, FRAGMENT_1X), (Series::V2, FRAGMENT_2X)] {
            let o = Options { platform: "linux/amd64".into(), ..opts(p) };
            assert_eq!(merge(text, p, &o).unwrap(), text);
            assert_eq!(fragment(s, &o).unwrap().to_string(), text);
        }
    }

    #[test]
    fn conflicts_are_refused_naming_key_and_values() {
        let p = Path::new("/c.toml");
        let refused = |text: &str, want: &[&str]| {
            let e = merge(text, p, &opts(p)).unwrap_err();
            assert!(matches!(e, ContainerdConfigError::Conflict { .. }), "{e}");
            for w in want {
                assert!(e.to_string().contains(w), "want {w:?} in {e}");
            }
        };
        refused(
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"stargz\"\n",
            &["plugins.\"io.containerd.grpc.v1.cri\".containerd.snapshotter is \"stargz\" in the file, pullgate needs \"pullgate\""],
        );
        refused("version = 3\n[plugins.'io.containerd.cri.v1.images']\nsnapshotter = 'zfs'\n", &["snapshotter is 'zfs'", "needs \"pullgate\""]);
        refused(
            "version = 3\n[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\nplatform = \"linux/arm64\"\nsnapshotter = \"devmapper\"\n",
            &["unpack_config.snapshotter is \"devmapper\""],
        );
        refused("version = 2\n[proxy_plugins.pullgate]\ntype = \"snapshot\"\naddress = \"/run/elsewhere.sock\"\n", &["proxy_plugins.pullgate.address is \"/run/elsewhere.sock\"", "/run/pullgate/snapshotter.sock"]);
        refused("version = 2\n[proxy_plugins.pullgate]\ntype = \"content\"\naddress = \"/run/pullgate/snapshotter.sock\"\n", &["proxy_plugins.pullgate.type is \"content\""]);
        refused("version = 2\ndisabled_plugins = [\"io.containerd.snapshotter.v1.pullgate\"]\n", &["disabled_plugins lists \"io.containerd.snapshotter.v1.pullgate\""]);
        refused("version = 3\nrequired_plugins = [\"io.containerd.snapshotter.v1.overlayfs\"]\n", &["required_plugins lists \"io.containerd.snapshotter.v1.overlayfs\""]);
        refused("version = 3\n[plugins.\"io.containerd.metadata.v1.bolt\"]\ncontent_sharing_policy = \"shared\"\n", &["--content-sharing shared keeps it"]);
        // Two at once: both named.
        refused("version = 2\ndisabled_plugins = [\"pullgate\"]\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"stargz\"\n", &["\"pullgate\"", "\"stargz\""]);
        // "shared" kept on request: the policy is left alone.
        let text = "version = 3\n[plugins.\"io.containerd.metadata.v1.bolt\"]\ncontent_sharing_policy = \"shared\"\n";
        let out = merge(text, p, &Options { sharing: Some(Sharing::Shared), ..opts(p) }).unwrap();
        assert!(out.contains("content_sharing_policy = \"shared\"") && !out.contains("isolated"), "{out}");
        // Shapes it cannot merge into.
        for (text, want) in [
            ("version = 2\ndisabled_plugins = \"x\"\n", "disabled_plugins: must be a list"),
            ("version = 2\nplugins = 3\n", "plugins: must be a table"),
            ("version = 3\n[plugins.\"io.containerd.transfer.v1.local\"]\nunpack_config = 3\n", "unpack_config: must be an array of tables"),
        ] {
            let e = merge(text, p, &opts(p)).unwrap_err();
            assert!(matches!(e, ContainerdConfigError::Shape { .. }) && e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn versions() {
        let p = Path::new("/c.toml");
        for text in ["root = \"/x\"\n", "version = 1\n"] {
            let e = merge(text, p, &opts(p)).unwrap_err().to_string();
            assert!(e.contains("config version 1") && e.contains("containerd config migrate"), "{e}");
        }
        assert!(merge("version = 5\n", p, &opts(p)).unwrap_err().to_string().contains("version 5 is not one pullgate knows"));
        assert!(merge("version = \"2\"\n", p, &opts(p)).unwrap_err().to_string().contains("integer"));
        let e = merge("version = 2\n", p, &Options { series: Some(Series::V2), ..opts(p) }).unwrap_err().to_string();
        assert!(e.contains("config version 2 is containerd 1.x's, not 2.x's"), "{e}");
        // Version 4 (2.4's default) takes the 2.x keys and keeps its version.
        let out = merge("version = 4\n", p, &opts(p)).unwrap();
        assert!(out.starts_with("version = 4\n") && out.contains("[plugins.\"io.containerd.cri.v1.images\"]"), "{out}");
    }

    #[test]
    fn malformed_file_names_line_and_column() {
        let p = Path::new("/c.toml");
        let e = merge("version = 2\n\n[plugins\nx = 1\n", p, &opts(p)).unwrap_err().to_string();
        assert!(e.contains("cannot parse /c.toml") && e.contains("line 3, column"), "{e}");
        // A table defined twice parses with neither parser.
        let e = merge("version = 2\n[a]\nx = 1\n[a]\ny = 2\n", p, &opts(p)).unwrap_err().to_string();
        assert!(e.contains("line 4"), "{e}");
    }

    #[test]
    fn platforms_as_fragment_sh_names_them() {
        for (arch, want) in [("x86_64", "linux/amd64"), ("aarch64", "linux/arm64"), ("armhf", "linux/arm/v7"), ("armv6l", "linux/arm/v6"), ("i686", "linux/386"), ("ppc64el", "linux/ppc64le"), ("mips64el", "linux/mips64le")] {
            assert_eq!(platform_of(arch), Some(want));
        }
        assert_eq!(platform_of("sparc64"), None);
        assert!(node_platform().unwrap().starts_with("linux/"));
    }

    #[test]
    fn diff() {
        assert_eq!(unified_diff("a\n", "a\n", "x", "y"), "");
        let d = unified_diff("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n11\n", "x", "y");
        assert_eq!(d, "--- x\n+++ y\n@@ -2,9 +2,10 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n 9\n 10\n+11\n");
        let d = unified_diff("", "a\nb", "/dev/null", "y");
        assert_eq!(d, "--- /dev/null\n+++ y\n@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n");
        let far: String = (0..30).map(|i| format!("{i}\n")).collect();
        let changed: String = (0..30).map(|i| match i {
            3 => "three\n".to_string(),
            25 => "x\n".to_string(),
            i => format!("{i}\n"),
        }).collect();
        let d = unified_diff(&far, &changed, "x", "y");
        assert_eq!(d.matches("@@ ").count(), 2, "{d}");
        assert!(d.contains("@@ -1,7 +1,7 @@\n 0\n 1\n 2\n-3\n+three\n") && d.contains("@@ -23,7 +23,7 @@\n 22\n 23\n 24\n-25\n+x\n"), "{d}");
    }

    #[test]
    fn write_backup_and_undo_byte_exact() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        // No final newline, CRLF and odd spacing: undo brings back these very bytes.
        let original = b"version = 2\r\n#  kept\r\n[debug]\r\n  level   =  \"debug\"".to_vec();
        std::fs::write(&file, &original).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let o = opts(&file);
        let plan = plan(&o).unwrap();
        assert!(plan.changes() && plan.diff().contains("+[proxy_plugins.pullgate]"));
        apply(&plan).unwrap();
        assert_eq!(std::fs::read(plan.backup()).unwrap(), original);
        let merged = std::fs::read(&file).unwrap();
        assert_eq!(merged, plan.after.as_bytes());
        assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o640);
        // Again: nothing to change, nothing written.
        let again = super::plan(&o).unwrap();
        assert!(!again.changes() && again.diff().is_empty());
        // Edited since: undo refuses, the file stays; a new merge would lose the backup: refused.
        std::fs::write(&file, [&merged[..], b"\n# edited\n"].concat()).unwrap();
        assert!(matches!(undo(&file, false), Err(ContainerdConfigError::Edited { .. })));
        std::fs::write(&file, b"version = 2\n").unwrap();
        assert!(matches!(apply(&super::plan(&o).unwrap()), Err(ContainerdConfigError::BackupExists { .. })));
        std::fs::write(&file, &merged).unwrap();
        assert_eq!(undo(&file, false).unwrap(), Undone::Restored { file: file.clone(), backup: plan.backup() });
        assert_eq!(std::fs::read(&file).unwrap(), original);
        assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o640);
        assert!(!plan.backup().exists() && !beside(&file, MARK_SUFFIX).exists());
        assert!(matches!(undo(&file, false), Err(ContainerdConfigError::NoBackup { .. })));
        // --force restores over an edit.
        apply(&super::plan(&o).unwrap()).unwrap();
        std::fs::write(&file, b"version = 2\n# edited\n").unwrap();
        undo(&file, true).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), original);
        // Only temporary files of our own were ever made, and none is left.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("config.toml")]);
    }

    #[test]
    fn a_missing_file_is_created_only_for_a_named_containerd() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        assert!(matches!(plan(&opts(&file)), Err(ContainerdConfigError::Missing { .. })));
        let o = Options { series: Some(Series::V2), ..opts(&file) };
        let p = plan(&o).unwrap();
        assert!(p.diff().starts_with("--- /dev/null\n"));
        apply(&p).unwrap();
        has_fragment(&std::fs::read_to_string(&file).unwrap(), &CRI2);
        assert!(!super::plan(&o).unwrap().changes());
        assert_eq!(undo(&file, false).unwrap(), Undone::Removed { file: file.clone() });
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_conflict_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"stargz\"\n";
        std::fs::write(&file, text).unwrap();
        assert!(matches!(plan(&opts(&file)), Err(ContainerdConfigError::Conflict { .. })));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn containerds_reading_is_checked() {
        let o = opts(Path::new("/etc/containerd/config.toml"));
        let sock = o.snapshotter_socket.display().to_string();
        let good = format!(
            "version = 3\ndisabled_plugins = [{}]\n[proxy_plugins.pullgate]\ntype = 'snapshot'\naddress = '{sock}'\n\
             [plugins.'io.containerd.metadata.v1.bolt']\ncontent_sharing_policy = 'isolated'\n\
             [plugins.'io.containerd.cri.v1.images']\nsnapshotter = 'pullgate'\n\
             [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\nsnapshotter = ''\n\
             [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\nplatform = 'linux/amd64'\nsnapshotter = 'pullgate'\n",
            BUILTINS_2X.iter().map(|b| format!("'io.containerd.snapshotter.v1.{b}'")).collect::<Vec<_>>().join(", ")
        );
        let dump = |t: &str| toml::from_str::<toml::Value>(t).unwrap();
        assert_eq!(dump_problems(&dump(&good), &o).1, Vec::<String>::new());
        for (change, want) in [
            (("'io.containerd.snapshotter.v1.erofs'", "'x'"), "lacks io.containerd.snapshotter.v1.erofs"),
            ((sock.as_str(), "/tmp/elsewhere.sock"), "proxy_plugins.pullgate is type"),
            (("'isolated'", "'shared'"), "content_sharing_policy is \"shared\""),
            (("snapshotter = ''", "snapshotter = 'native'"), "CRI runtime runc's snapshotter is \"native\""),
            (("version = 3\n", "version = 3\n[proxy_plugins.stargz]\ntype = 'snapshot'\n"), "proxy_plugins.stargz is another snapshotter"),
        ] {
            let p = dump_problems(&dump(&good.replacen(change.0, change.1, 1)), &o).1;
            assert!(p.iter().any(|x| x.contains(want)), "{want}: {p:?}");
        }
    }

    #[test]
    fn credentials_are_hidden_in_the_diff() {
        let hidden = |t: &str| with_secrets_hidden(t).unwrap();
        assert_eq!(hidden("[a]\n   password = \"s3cret\"\n"), "[a]\n   password = <hidden>\n");
        assert_eq!(hidden("auth = 'dXNlcjpwdw=='  # kept\n"), "auth = <hidden>  # kept\n");
        assert_eq!(hidden("IdentityToken = \"t\"\nusername = \"node\"\nsnapshotter = \"pullgate\"\n"),
            "IdentityToken = <hidden>\nusername = \"node\"\nsnapshotter = \"pullgate\"\n");
        // Multi-line strings, inline tables, dotted and quoted keys, escapes in key names,
        // headers, arrays of tables: hidden whole, whatever the spelling.
        let text = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]
  username = "node"
  password = """
s3cret-line-one
s3cret-line-two"""
[plugins."io.containerd.grpc.v1.cri".registry.configs."q.example"]
  auth = { username = "u", "pass\u0077ord" = 's3cret-inline' }
  tls.key_file = "/etc/k"
  auth2.registrytoken = "s3cret-dotted"
[plugins."io.containerd.grpc.v1.cri".registry.headers]
  Authorization = ["Basic s3cret-header", """
s3cret-header-two"""]
  X-Meta = "s3cret-meta"
[[mirrors]]
  client_secret = 's3cret-aot'
  level = "debug"
"#;
        let h = hidden(text);
        assert!(!h.contains("s3cret"), "{h}");
        // Everything under a secret key is hidden (containerd's `auth` table, username too).
        assert!(h.contains("  username = <hidden>\n  password = <hidden>\n") && h.contains("  auth = <hidden>\n"), "{h}");
        for kept in ["tls.key_file = \"/etc/k\"", "level = \"debug\"", "[[mirrors]]"] {
            assert!(h.contains(kept), "{kept}: {h}");
        }
        assert_eq!(with_secrets_hidden("[a\npassword = 'x'"), None);
        // Keys as containerd's readers fold them, commented-out credentials, nested arrays.
        let odd = "\"pa\u{17f}\u{17f}word\" = 's3cret-fold'\n\"identityto\u{212a}en\" = 's3cret-kelvin'\n  # password = \"s3cret-old\"\n#auth='s3cret-c'\nx = [[{ token = 's3cret-nested' }]]\n# a comment = kept\n";
        let h = hidden(odd);
        assert!(!h.contains("s3cret"), "{h}");
        assert!(h.contains("  # password = <hidden>\n") && h.contains("# a comment = kept\n"), "{h}");
        // A plan's diff shows the change with the credentials hidden on both sides.
        let plan = Plan { file: "/etc/containerd/config.toml".into(), before: Some(text.as_bytes().to_vec()), after: format!("{text}[proxy_plugins.pullgate]\n") };
        let d = plan.diff();
        assert!(d.contains("+[proxy_plugins.pullgate]") && !d.contains("s3cret"), "{d}");
        let broken = Plan { before: Some(b"password = '''s3cret".to_vec()), ..plan };
        assert!(broken.diff().starts_with("(the change to /etc/containerd/config.toml is not shown"), "{}", broken.diff());
    }
}

//! layout: the snapshotter's directories on disk and what containerd mounts from them.
//!
//! `<root>/snapshots/<id>/fs` holds a snapshot's files (the overlay upper dir for an active
//! snapshot), `<root>/snapshots/<id>/work` the overlay work dir. New snapshots are staged as
//! `new-*` and renamed into place inside the metadata transaction; removed ones are renamed to
//! `rm-<id>` first. Anything under `snapshots/` that the metadata does not name is garbage
//! that `remove_orphans` deletes (metadata is the source of truth).
use super::{Kind, SnapshotterError};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How snapshots are stacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// overlayfs: each snapshot stores only its own changes.
    Overlay { index_off: bool },
    /// Copying fallback where overlayfs cannot be mounted: an active snapshot starts as a full
    /// copy of its parent and is bind-mounted.
    Copy,
}

/// One mount containerd performs to materialise a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub kind: String,
    pub source: String,
    pub options: Vec<String>,
}

pub struct Layout {
    snapshots: PathBuf,
    pub driver: Driver,
}

/// A snapshot directory that is not yet in place (`snapshots/new-*`).
pub struct Staged(PathBuf);

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> SnapshotterError {
    let context = context.into();
    move |source| SnapshotterError::Io { context, source }
}

impl Layout {
    pub fn new(root: &Path, driver: Driver) -> Result<Layout, SnapshotterError> {
        let snapshots = root.join("snapshots");
        fs::create_dir_all(&snapshots).map_err(io_err(format!("create {}", snapshots.display())))?;
        fs::set_permissions(&snapshots, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("chmod {}", snapshots.display())))?;
        Ok(Layout { snapshots, driver })
    }

    pub fn dir(&self, id: u64) -> PathBuf {
        self.snapshots.join(id.to_string())
    }
    pub fn fs_dir(&self, id: u64) -> PathBuf {
        self.dir(id).join("fs")
    }

    /// Creates `snapshots/new-*` with an `fs` dir (0755) and, for an overlay active snapshot,
    /// a `work` dir. For the copy driver, an active snapshot's fs starts as a copy of `parent`.
    pub fn stage(&self, kind: Kind, parent: Option<u64>) -> Result<Staged, SnapshotterError> {
        let tmp = tempfile::Builder::new()
            .prefix("new-")
            .tempdir_in(&self.snapshots)
            .map_err(io_err("create staging directory"))?
            .keep();
        let staged = Staged(tmp);
        let fs_dir = staged.0.join("fs");
        let made = (|| -> io::Result<()> {
            fs::create_dir(&fs_dir)?;
            fs::set_permissions(&fs_dir, fs::Permissions::from_mode(0o755))?;
            match (self.driver, kind, parent) {
                (Driver::Overlay { .. }, Kind::Active, parent) => {
                    fs::create_dir(staged.0.join("work"))?;
                    if let Some(p) = parent {
                        // The upper dir takes the owner of the parent's root, as overlay's
                        // merged root shows the upper dir's owner.
                        let m = fs::metadata(self.fs_dir(p))?;
                        std::os::unix::fs::chown(&fs_dir, Some(m.uid()), Some(m.gid()))?;
                    }
                }
                (Driver::Copy, Kind::Active, Some(p)) => copy_tree(&self.fs_dir(p), &fs_dir)?,
                _ => {}
            }
            Ok(())
        })();
        match made {
            Ok(()) => Ok(staged),
            Err(e) => {
                self.discard(staged);
                Err(SnapshotterError::Io { context: "prepare snapshot directory".into(), source: e })
            }
        }
    }

    /// Moves a staged directory to `snapshots/<id>`. A leftover directory with that id can
    /// only be garbage from a crash (the id was just allocated), so it is removed first.
    pub fn install(&self, staged: &Staged, id: u64) -> Result<(), SnapshotterError> {
        let target = self.dir(id);
        if target.exists() {
            fs::remove_dir_all(&target).map_err(io_err(format!("remove stale {}", target.display())))?;
        }
        fs::rename(&staged.0, &target).map_err(io_err(format!("install {}", target.display())))
    }

    pub fn discard(&self, staged: Staged) {
        remove_logged(&staged.0);
    }

    /// Undoes `install` after a failed metadata commit.
    pub fn uninstall(&self, id: u64) {
        remove_logged(&self.dir(id));
    }

    fn retired(&self, id: u64) -> PathBuf {
        self.snapshots.join(format!("rm-{id}"))
    }

    /// Renames `snapshots/<id>` out of the way; `purge` deletes it after the metadata commit.
    pub fn retire(&self, id: u64) -> Result<(), SnapshotterError> {
        let dir = self.dir(id);
        match fs::rename(&dir, self.retired(id)) {
            Ok(()) => Ok(()),
            // Already gone (an earlier crash between rename and purge): nothing to move.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(SnapshotterError::Io { context: format!("retire {}", dir.display()), source: e }),
        }
    }

    pub fn unretire(&self, id: u64) {
        if let Err(e) = fs::rename(self.retired(id), self.dir(id)) {
            tracing::error!(id, error = %e, "cannot restore snapshot directory after failed remove");
        }
    }

    pub fn purge(&self, id: u64) {
        remove_logged(&self.retired(id));
    }

    /// Deletes every entry of `snapshots/` that is not the directory of a snapshot in `ids`,
    /// except that `rm-<id>` of a snapshot still in `ids` is renamed back: a removal that died
    /// between retiring the directory and committing the metadata did not happen.
    pub fn remove_orphans(&self, ids: &HashSet<u64>) -> Result<usize, SnapshotterError> {
        let mut removed = 0;
        let entries = fs::read_dir(&self.snapshots).map_err(io_err(format!("read {}", self.snapshots.display())))?;
        for entry in entries {
            let entry = entry.map_err(io_err("read snapshots directory"))?;
            let name = entry.file_name();
            let name = name.to_str().unwrap_or_default();
            let known = name.parse::<u64>().ok().is_some_and(|id| ids.contains(&id));
            let retired_live = name.strip_prefix("rm-").and_then(|n| n.parse::<u64>().ok()).filter(|id| ids.contains(id));
            if let Some(id) = retired_live {
                tracing::info!(id, "restoring the directory of a removal that did not commit");
                fs::rename(entry.path(), self.dir(id)).map_err(io_err(format!("restore {}", self.dir(id).display())))?;
                continue;
            }
            if !known {
                tracing::info!(path = %entry.path().display(), "removing directory no snapshot references");
                let p = entry.path();
                let r = if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
                r.map_err(io_err(format!("remove {}", p.display())))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Disk use of a snapshot's own files: (bytes in allocated blocks, inodes), hard links
    /// counted once, as containerd's `fs.DiskUsage` does.
    pub fn usage(&self, id: u64) -> Result<(i64, i64), SnapshotterError> {
        let root = self.fs_dir(id);
        let mut seen = HashSet::new();
        let (mut size, mut inodes) = (0i64, 0i64);
        for entry in walkdir::WalkDir::new(&root).same_file_system(true) {
            let entry = entry.map_err(|e| SnapshotterError::Io {
                context: format!("measure {}", root.display()),
                source: e.into_io_error().unwrap_or_else(|| io::Error::other("filesystem loop")),
            })?;
            let m = entry.metadata().map_err(|e| SnapshotterError::Io {
                context: format!("stat {}", entry.path().display()),
                source: e.into_io_error().unwrap_or_else(|| io::Error::other("stat failed")),
            })?;
            if seen.insert((m.dev(), m.ino())) {
                size += (m.blocks() * 512) as i64;
                inodes += 1;
            }
        }
        Ok((size, inodes))
    }

    /// The mounts for a snapshot of `kind` with directory `id` whose ancestors, nearest first,
    /// have directories `parents`.
    pub fn mounts(&self, kind: Kind, id: u64, parents: &[u64]) -> Vec<Mount> {
        let bind = |dir: PathBuf, rw: bool| Mount {
            kind: "bind".into(),
            source: dir.display().to_string(),
            options: vec!["rbind".into(), if rw { "rw" } else { "ro" }.into()],
        };
        match (self.driver, kind) {
            (_, Kind::Committed) => vec![],
            (Driver::Copy, Kind::Active) => vec![bind(self.fs_dir(id), true)],
            (Driver::Copy, Kind::View) => match parents.first() {
                // A committed parent never changes, so a view reads it in place.
                Some(&p) => vec![bind(self.fs_dir(p), false)],
                None => vec![bind(self.fs_dir(id), false)],
            },
            (Driver::Overlay { .. }, Kind::Active) if parents.is_empty() => vec![bind(self.fs_dir(id), true)],
            (Driver::Overlay { .. }, Kind::View) if parents.is_empty() => vec![bind(self.fs_dir(id), false)],
            (Driver::Overlay { .. }, Kind::View) if parents.len() == 1 => vec![bind(self.fs_dir(parents[0]), false)],
            (Driver::Overlay { index_off }, kind) => {
                let mut options = Vec::new();
                if index_off {
                    options.push("index=off".to_string());
                }
                if kind == Kind::Active {
                    options.push(format!("workdir={}", self.dir(id).join("work").display()));
                    options.push(format!("upperdir={}", self.fs_dir(id).display()));
                }
                let lower: Vec<String> = parents.iter().map(|p| self.fs_dir(*p).display().to_string()).collect();
                options.push(format!("lowerdir={}", lower.join(":")));
                vec![Mount { kind: "overlay".into(), source: "overlay".into(), options }]
            }
        }
    }
}

fn remove_logged(p: &Path) {
    if let Err(e) = fs::remove_dir_all(p) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %p.display(), error = %e, "cannot remove directory; Cleanup will retry");
        }
    }
}

/// Picks overlayfs when it can be mounted under `root`, else the copying driver.
pub fn probe_overlay(root: &Path) -> Result<Driver, String> {
    let dir = tempfile::Builder::new().prefix("probe-").tempdir_in(root).map_err(|e| format!("create probe dir: {e}"))?;
    let p = dir.path();
    for d in ["lower", "upper", "work", "merged"] {
        fs::create_dir(p.join(d)).map_err(|e| format!("create probe dir: {e}"))?;
    }
    let index_off = Path::new("/sys/module/overlay/parameters/index").exists();
    let mut data = format!(
        "lowerdir={},upperdir={},workdir={}",
        p.join("lower").display(),
        p.join("upper").display(),
        p.join("work").display()
    );
    if index_off {
        data.push_str(",index=off");
    }
    let merged = p.join("merged");
    nix::mount::mount(Some("overlay"), &merged, Some("overlay"), nix::mount::MsFlags::empty(), Some(data.as_str()))
        .map_err(|e| format!("overlay mount in {}: {e}", root.display()))?;
    nix::mount::umount2(&merged, nix::mount::MntFlags::MNT_DETACH).map_err(|e| format!("unmount overlay probe: {e}"))?;
    Ok(Driver::Overlay { index_off })
}

/// Copies a directory tree keeping modes, owners, times, extended attributes, symlinks,
/// device nodes and hard links (std and the copy crates drop owners, xattrs or devices).
pub fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    use nix::sys::stat::{utimensat, Mode, SFlag, UtimensatFlags};
    use nix::sys::time::TimeSpec;
    use std::os::unix::fs::FileTypeExt;
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut dirs = Vec::new();
    for entry in walkdir::WalkDir::new(src).same_file_system(true) {
        let entry = entry.map_err(|e| e.into_io_error().unwrap_or_else(|| io::Error::other("filesystem loop")))?;
        let rel = entry.path().strip_prefix(src).map_err(io::Error::other)?;
        let to = dst.join(rel);
        let m = entry.path().symlink_metadata()?;
        let ft = m.file_type();
        if ft.is_dir() {
            if !rel.as_os_str().is_empty() {
                fs::create_dir(&to)?;
            }
        } else if ft.is_file() && m.nlink() > 1 && links.contains_key(&(m.dev(), m.ino())) {
            fs::hard_link(&links[&(m.dev(), m.ino())], &to)?;
            continue;
        } else if ft.is_file() {
            fs::copy(entry.path(), &to)?;
            if m.nlink() > 1 {
                links.insert((m.dev(), m.ino()), to.clone());
            }
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &to)?;
        } else {
            let kind = if ft.is_char_device() {
                SFlag::S_IFCHR
            } else if ft.is_block_device() {
                SFlag::S_IFBLK
            } else if ft.is_fifo() {
                SFlag::S_IFIFO
            } else {
                SFlag::S_IFSOCK
            };
            nix::sys::stat::mknod(&to, kind, Mode::from_bits_truncate(m.mode()), m.rdev()).map_err(io::Error::from)?;
        }
        std::os::unix::fs::lchown(&to, Some(m.uid()), Some(m.gid()))?;
        if !ft.is_symlink() {
            // After chown, which clears set-id bits.
            fs::set_permissions(&to, fs::Permissions::from_mode(m.mode() & 0o7777))?;
        }
        for name in xattr::list(entry.path())? {
            if let Some(value) = xattr::get(entry.path(), &name)? {
                xattr::set(&to, &name, &value)?;
            }
        }
        let times = (TimeSpec::new(m.atime(), m.atime_nsec()), TimeSpec::new(m.mtime(), m.mtime_nsec()));
        if ft.is_dir() {
            dirs.push((to, times));
        } else {
            utimensat(None, &to, &times.0, &times.1, UtimensatFlags::NoFollowSymlink).map_err(io::Error::from)?;
        }
    }
    // Directory times last: creating their entries changed them.
    for (d, (a, m)) in dirs.into_iter().rev() {
        utimensat(None, &d, &a, &m, UtimensatFlags::NoFollowSymlink).map_err(io::Error::from)?;
    }
    Ok(())
}

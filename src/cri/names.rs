//! cri::names: which of an image's names the front looks up for a CreateContainer. containerd's
//! CRI groups every image record with the same config under one image, whose names any tenant
//! can add to (a pull of the same manifest under a name of its own). The front looks up a
//! bounded few of them, whatever their number: the one containerd builds the container from
//! and those of the repository the pod asked for.
//!
//! Written by hand: the order is containerd's own (`reference/docker.Sort`, which its CRI image
//! store keeps an image's references in, and whose first CreateContainer takes), decided on the
//! shape of each name, which no reference crate orders.

use crate::reference::Reference;

/// How many of an image's names a CreateContainer looks up at most: each costs a call to
/// containerd, and an image may have thousands.
pub const LOOKED_UP: usize = 4;

/// The rank containerd's `docker.Sort` gives a name: `name:tag@digest` first, then `name:tag`,
/// `name@digest`, a bare name; names that are not references last.
fn rank(name: &str) -> u8 {
    let (named, digest) = match name.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (name, None),
    };
    if named.is_empty() || named.starts_with("sha256:") {
        return 5;
    }
    // A tag is a ':' in the last path element (one in the first is a host's port).
    let tagged = named.rsplit('/').next().is_some_and(|last| last.contains(':'));
    match (tagged, digest.is_some()) {
        (true, true) => 1,
        (true, false) => 2,
        (false, true) => 3,
        (false, false) => 4,
    }
}

/// The names to look up, in the order to ask them, at most [`LOOKED_UP`]: first the name
/// containerd builds the container from (the first of the image's names in containerd's
/// order), then names of the repository the pod asked for (`asked`, an origin), then the
/// rest in containerd's order. One pass over the names, whatever their number.
pub fn to_look_up<'a>(names: impl Iterator<Item = &'a String>, asked: Option<&str>) -> Vec<&'a str> {
    let key = |n: &'a str| (rank(n), n);
    let mut taken: Option<&str> = None;
    // The best few of the asked repository and of the rest, each kept in order.
    let mut of_asked: Vec<&str> = Vec::new();
    let mut rest: Vec<&str> = Vec::new();
    for n in names {
        let n = n.as_str();
        if taken.is_none_or(|t| key(n) < key(t)) {
            taken = Some(n);
        }
        // (Parsed only when it starts with the asked origin: a name of that repository spelt
        // otherwise, which CRI's normal form does not list, is merely asked later.)
        let of_it = asked.is_some_and(|a| n.starts_with(a) && Reference::parse(n).ok().map(|r| r.origin()).as_deref() == Some(a));
        let bucket = match of_it {
            true => &mut of_asked,
            false => &mut rest,
        };
        let at = bucket.partition_point(|m| key(m) <= key(n));
        if at < LOOKED_UP {
            bucket.insert(at, n);
            bucket.truncate(LOOKED_UP);
        }
    }
    let mut out: Vec<&str> = taken.into_iter().collect();
    for n in of_asked.into_iter().chain(rest) {
        if out.len() == LOOKED_UP {
            break;
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_as_containerd_sorts() {
        assert_eq!(rank("reg:5000/a/b:v1@sha256:00"), 1);
        assert_eq!(rank("reg:5000/a/b:v1"), 2);
        assert_eq!(rank("reg:5000/a/b@sha256:00"), 3);
        assert_eq!(rank("reg:5000/a/b"), 4);
        assert_eq!(rank("sha256:00"), 5);
    }

    #[test]
    fn the_name_containerd_takes_comes_first_whatever_the_number() {
        let mut names: Vec<String> = (0..5000).map(|i| format!("reg:5000/stuff/n{i:05}:v1")).collect();
        names.push(format!("reg:5000/app/x@sha256:{}", "a".repeat(64)));
        names.push("reg:5000/app/x:v2".into());
        names.push("reg:5000/aaa/first:v1".into());
        let got = to_look_up(names.iter(), Some("reg:5000/app/x"));
        assert_eq!(got, vec!["reg:5000/aaa/first:v1", "reg:5000/app/x:v2", &format!("reg:5000/app/x@sha256:{}", "a".repeat(64)), "reg:5000/stuff/n00000:v1"]);
        let got = to_look_up(names.iter(), None);
        assert_eq!(got.len(), LOOKED_UP);
        assert_eq!(got[0], "reg:5000/aaa/first:v1");
        assert!(to_look_up([].iter(), None).is_empty());
    }
}

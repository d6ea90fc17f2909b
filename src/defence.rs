//! defence: switches that turn one of the gate's defences off, for the suite's positive
//! controls only (each attack shown succeeding without its defence: tests/e2e_trust.sh with
//! `CONTROL=1`, tests/e2e_cri.sh 9 with `DEFENCE_OFF_BIN`). They exist only in a build with the
//! cargo feature `defence-off`, which only the test binary `pullgate-defence-off` needs; in
//! every other build [`off`] is a constant `false`, so the switches compile away, and the
//! release files are checked to hold no trace of them (scripts/release.sh). A leaf: it knows
//! nothing of the parts that ask it.

/// A defence the test binary can turn off, named in `PULLGATE_DEFENCE_OFF` (comma-separated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defence {
    /// `gate`: the grant check of unpacks and uses (every extract and use allowed).
    Gate,
    /// `own-chains`: only chains pullgate unpacked itself are offered for adoption (off: any
    /// committed snapshot labelled with the chain, a client's too).
    OwnChains,
    /// `unestablished`: nothing is unpacked onto a parent whose chain pullgate cannot establish.
    UnestablishedParent,
    /// `mounts`: a snapshot's mounts (a task start) are decided again (off: only its Prepare
    /// was).
    Mounts,
    /// `unchecked`: a principal the CRI front's admission gave a container's rootfs counts only
    /// once the front checked the creation (off: at once, and it survives a kill before the check).
    Unchecked,
}

impl Defence {
    pub const ALL: [Defence; 5] = [Defence::Gate, Defence::OwnChains, Defence::UnestablishedParent, Defence::Mounts, Defence::Unchecked];

    pub fn name(self) -> &'static str {
        match self {
            Defence::Gate => "gate",
            Defence::OwnChains => "own-chains",
            Defence::UnestablishedParent => "unestablished",
            Defence::Mounts => "mounts",
            Defence::Unchecked => "unchecked",
        }
    }
}

/// Whether defence `d` is off: never, outside the test binary.
#[cfg(not(feature = "defence-off"))]
#[inline(always)]
pub fn off(_d: Defence) -> bool {
    false
}

/// Whether defence `d` is off: named in the environment this test binary started with.
#[cfg(feature = "defence-off")]
pub fn off(d: Defence) -> bool {
    turned_off().contains(&d)
}

/// The defences named in `PULLGATE_DEFENCE_OFF`, read once; an unknown name stops the process
/// (a control that silently turned nothing off would pass for the wrong reason).
#[cfg(feature = "defence-off")]
pub fn turned_off() -> &'static [Defence] {
    static OFF: std::sync::OnceLock<Vec<Defence>> = std::sync::OnceLock::new();
    OFF.get_or_init(|| {
        let v = std::env::var("PULLGATE_DEFENCE_OFF").unwrap_or_default();
        let mut off = Vec::new();
        for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match Defence::ALL.iter().find(|d| d.name() == name) {
                Some(d) => off.push(*d),
                None => {
                    let known: Vec<&str> = Defence::ALL.iter().map(|d| d.name()).collect();
                    eprintln!("PULLGATE_DEFENCE_OFF names an unknown defence {name:?} (known: {})", known.join(", "));
                    std::process::exit(2);
                }
            }
        }
        off
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(not(feature = "defence-off"))]
    fn every_defence_is_on_in_a_build_without_the_feature() {
        for d in Defence::ALL {
            assert!(!off(d), "{} is off", d.name());
        }
    }
}

//! crashpoint: named points where the daemon can be made to die as if SIGKILLed, so the crash
//! test can stop it exactly between two steps that must not be torn apart (a directory rename
//! and its metadata commit, a grant and its labels) rather than only at random moments.
//!
//! Off unless the daemon starts with `PULLGATE_CRASH_AT=<point>[:<n>]` in its environment:
//! the n-th time (default 1st) execution reaches `<point>`, the process sends itself SIGKILL.
//! Likewise `PULLGATE_STALL_AT=<point>:<seconds>` makes every task that reaches a stall point
//! wait there that long, so a test can drop the request (its client gone) exactly there.
//! Written by hand rather than with the `fail` crate, whose points exist only in a build with
//! its cargo feature on: this way the binary under test is the one operators run, and a point
//! costs one relaxed atomic load when the variable is unset.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Armed {
    point: String,
    nth: u64,
    hits: AtomicU64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();

fn armed() -> &'static Option<Armed> {
    ARMED.get_or_init(|| {
        let v = std::env::var("PULLGATE_CRASH_AT").ok()?;
        let (point, nth) = match v.split_once(':') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (v, 1),
        };
        tracing::warn!(point = %point, nth, "crash point armed (PULLGATE_CRASH_AT): this daemon will kill itself there");
        Some(Armed { point, nth, hits: AtomicU64::new(0) })
    })
}

/// Every point the daemon has, for the crash test to enumerate (`pullgate serve --crash-points`
/// is not offered: the list is here and in tests/crash.sh).
pub const POINTS: &[&str] = &[
    "pull.fetched",
    "ledger.grant-staged",
    "pull.granted",
    "pull.labelled",
    "pull.layer-committed",
    "snapshot.prepare-installed",
    "snapshot.commit-staged",
    "snapshot.remove-retired",
];

/// Dies here if this point is armed and reached for the n-th time.
pub fn hit(point: &'static str) {
    debug_assert!(POINTS.contains(&point), "unlisted crash point {point}");
    let Some(a) = armed() else { return };
    if a.point == point && a.hits.fetch_add(1, Ordering::Relaxed) + 1 == a.nth {
        eprintln!("pullgate: crash point {point} reached: killing myself (PULLGATE_CRASH_AT)");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// Stall points ([`stall`]), for the tests to enumerate.
pub const STALL_POINTS: &[&str] = &["public.labelled", "cri.created"];

static STALL: OnceLock<Option<(String, std::time::Duration)>> = OnceLock::new();

/// Waits here if this stall point is armed (`PULLGATE_STALL_AT=<point>:<seconds>`).
pub async fn stall(point: &'static str) {
    debug_assert!(STALL_POINTS.contains(&point), "unlisted stall point {point}");
    let armed = STALL.get_or_init(|| {
        let v = std::env::var("PULLGATE_STALL_AT").ok()?;
        let (p, secs) = v.split_once(':')?;
        let d = std::time::Duration::from_secs(secs.parse().ok()?);
        tracing::warn!(point = %p, seconds = d.as_secs(), "stall point armed (PULLGATE_STALL_AT): requests will wait there");
        Some((p.to_string(), d))
    });
    if let Some((p, d)) = armed {
        if p == point {
            tracing::warn!(point, "stall point reached (PULLGATE_STALL_AT)");
            tokio::time::sleep(*d).await;
        }
    }
}

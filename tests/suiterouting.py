#!/usr/bin/env python3
"""Which snapshotter each of containerd's integration tests used (tests/e2e_containerd_suite.sh).

  suiterouting.py TIMES EVENTS --allowed FILE
  suiterouting.py TIMES EVENTS --none-on SNAPSHOTTER

TIMES: the test binary's -test.v result and run lines, each prefixed with the time it was read
(seconds since the epoch). EVENTS: what `ctr events` printed while the tests ran (containerd's
snapshot events carry the snapshotter). FILE: the tests named as using a built-in snapshotter
on purpose, one per line; with --none-on instead (a run without pullgate), no prepare may be on
that snapshotter.

Every /snapshot/prepare in the tests' namespace (--namespace, `testing`: its
containerd.io/defaults/snapshotter label names the snapshotter under test) on a snapshotter
other than pullgate must fall while one of the tests FILE names ran (a test is running from its
`=== RUN` or `=== CONT` line to its `=== PAUSE` or result line); any other is printed with the
tests that ran then, and the exit status is 1. Prepares in other namespaces (tests that make a
namespace of their own, which has no such label) are counted apart. Prints the prepares per
snapshotter, and per named test those on built-in snapshotters seen while it alone of the named
ones ran; a named test that ran while no such prepare happened fails the check too (the list
must be exact).
Fails too when no prepare or no test was recorded (the recording failed)."""
import collections, datetime, json, re, sys


def intervals(path):
    """Top-level test name -> [(start, end)] from the stamped -test.v lines."""
    spans, open_at = collections.defaultdict(list), {}
    last = 0.0
    for line in open(path, errors="replace"):
        m = re.match(r"(\d+\.\d+) (=== (RUN|PAUSE|CONT)|--- (PASS|FAIL|SKIP):) +(Test\S*)", line)
        if not m:
            continue
        t, name = float(m.group(1)), m.group(5)
        last = max(last, t)
        if "/" in name:
            continue
        if m.group(3) in ("RUN", "CONT"):
            open_at.setdefault(name, t)
        elif name in open_at:
            spans[name].append((open_at.pop(name), t))
    for name, t in open_at.items():  # (a test the binary never finished)
        spans[name].append((t, last + 1))
    return spans


def events(path):
    """(time, namespace, snapshotter, key) of every /snapshot/prepare event."""
    out = []
    for line in open(path, errors="replace"):
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)? \+0000 UTC (\S+) /snapshot/prepare (\{.*\})\s*$", line)
        if not m:
            continue
        when = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()
        when += float(m.group(2) or 0)
        try:
            e = json.loads(m.group(4))
        except ValueError:
            continue
        out.append((when, m.group(3), e.get("snapshotter", ""), e.get("key", "")))
    return out


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("times")
    ap.add_argument("events")
    way = ap.add_mutually_exclusive_group(required=True)
    way.add_argument("--allowed")
    way.add_argument("--none-on")
    ap.add_argument("--namespace", default="testing", help="the tests' namespace, whose default snapshotter is the one under test")
    a = ap.parse_args()
    spans = intervals(a.times)
    evs = events(a.events)
    per = collections.Counter(s for _, _, s, _ in evs)
    print("  snapshot prepares per snapshotter (containerd's events): " + (", ".join(f"{s or '?'} {n}" for s, n in sorted(per.items())) or "none"))
    if not evs or not spans:
        print("  no snapshot event or no test was recorded: the recording failed")
        return 1
    if a.none_on is not None:
        return 1 if per[a.none_on] else 0
    allowed = set(open(a.allowed).read().split())
    bad, by_test, elsewhere, seen = [], collections.Counter(), collections.Counter(), set()
    for when, ns, snap, key in evs:
        if snap == "pullgate":
            continue
        if ns != a.namespace:
            # A namespace of a test's own carries no default-snapshotter label: containerd's
            # client takes its own default there, as it would without pullgate.
            elsewhere[(ns[:40], snap)] += 1
            continue
        running = sorted(n for n, ss in spans.items() if any(a - 0.5 <= when <= b + 0.5 for a, b in ss))
        mine = [n for n in running if n in allowed]
        seen.update(mine)
        if not mine:
            bad.append(f"{snap} prepare of {key[:80]!r} while {', '.join(running) or 'no test'} ran")
        elif len(mine) == 1:
            by_test[mine[0]] += 1
    for (ns, snap), n in sorted(elsewhere.items()):
        print(f"  namespace {ns} (a test's own, no default-snapshotter label): {n} prepares on {snap}")
    unused = []
    for n in sorted(allowed):
        print(f"  {n}: {by_test[n]} prepares on built-in snapshotters while it alone of these ran" + ("" if n in spans else " (not run)")
              + ("" if n in seen or n not in spans else ", none while it ran"))
        if n in spans and n not in seen:
            unused.append(n)
    for n in unused:
        print(f"  UNUSED {n} is named as using a built-in snapshotter in the tests' namespace and used none: the list is wrong")
    for b in bad[:20]:
        print(f"  OFF-ROUTE {b}")
    if bad:
        print(f"  {len(bad)} prepares on a built-in snapshotter outside the tests allowed one")
    return 1 if bad or unused else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compares pullgate's reading of each corpus case (examples/docread.rs) with containerd's
(tests/difftest/go's docread, built from containerd's own code at one version).

  compare.py LABEL PULLGATE.jsonl CONTAINERD.jsonl [--valid FILE] [--pin N]

A case agrees when pullgate refuses it, or when both read the same image: the same manifest
chosen, config, layers and diff_ids, and pullgate sees a checkpoint image wherever containerd's
CRI would (it may see one where containerd does not: it refuses more, never less). Anything
else (pullgate reads a document containerd cannot read, or reads it otherwise) is a difference:
each is printed, and the exit status is 1. So is a refusal of a case FILE names as a valid image
(corpus.py --valid-list) where containerd reads it, and, with --pin, more refusals among the
cases that are not pushed layouts than the N pinned for this corpus and platform (a refusal
must never pass for agreement by growing unseen). The CRI front's reading (`cri_configs`: the
configs it requires to be the image's before a container is created) must hold the config
containerd chooses for every case containerd reads, and must refuse every checkpoint image
containerd's CRI sees, and must not refuse a valid image containerd reads (but for a checkpoint
image, which it refuses by design). Prints the counts."""
import argparse, json, sys


def load(path):
    out = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            out[r["case"]] = r
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("pullgate")
    ap.add_argument("containerd")
    ap.add_argument("--valid")
    ap.add_argument("--pin", type=int)
    a = ap.parse_args()
    label = a.label
    pg, cd = load(a.pullgate), load(a.containerd)
    valid = set(open(a.valid).read().split()) if a.valid else set()
    if set(pg) != set(cd) or not pg:
        print(f"difftest ({label}): the readers saw different cases ({len(pg)} and {len(cd)})")
        return 1
    refused = agreed = pinned_refused = 0
    differ, wrongly = [], []
    cri_refused = 0
    for case in sorted(pg):
        p, c = pg[case], cd[case]
        if c["ok"]:
            if "cri_configs" not in p:
                cri_refused += 1
                # A checkpoint image is refused by the front on purpose (containerd would
                # restore it onto an image it pulls itself), wherever either reader sees one.
                by_design = p.get("cri_error") == "a checkpoint image" and (c["checkpoint"] or p.get("checkpoint"))
                if case in valid and not by_design:
                    wrongly.append(f"{case}: the CRI front refuses an image containerd reads ({p.get('cri_error', '')})")
            elif c["checkpoint"]:
                differ.append(f"{case}: the CRI front reads a checkpoint image containerd's CRI sees")
            elif c["config"] not in p["cri_configs"]:
                differ.append(f"{case}: containerd chooses config {c['config']}, the CRI front checks only {p['cri_configs']}")
        if not p["ok"]:
            refused += 1
            if "layout-" not in case:
                pinned_refused += 1
            if case in valid and c["ok"]:
                wrongly.append(f"{case}: pullgate refuses an image containerd reads ({p.get('error', '')})")
            continue
        if not c["ok"]:
            differ.append(f"{case}: pullgate reads it, containerd cannot ({c['error']})")
            continue
        fields = [f for f in ("manifest", "config", "layers", "diff_ids") if p[f] != c[f]]
        if c["checkpoint"] and not p["checkpoint"]:
            fields.append("checkpoint")
        if fields:
            differ.append(f"{case}: " + "; ".join(f"{f}: pullgate {p[f]} containerd {c[f]}" for f in fields))
        else:
            agreed += 1
    for d in differ:
        print(f"  DIFF {d}")
    for w in wrongly:
        print(f"  REFUSED-VALID {w}")
    over = a.pin is not None and pinned_refused > a.pin
    if over:
        print(f"  PIN {pinned_refused} refusals among the hand-written and seeded cases, more than the {a.pin} pinned (tests/difftest/run.sh)")
    elif a.pin is not None and pinned_refused < a.pin:
        print(f"  (note: {pinned_refused} refusals among the hand-written and seeded cases, fewer than the {a.pin} pinned: lower the pin)")
    print(f"difftest ({label}): {len(pg)} documents compared: {refused} refused by pullgate ({pinned_refused} not pushed layouts), "
          f"{agreed} read alike, {len(differ)} read differently, {len(wrongly)} valid images refused; "
          f"the CRI front refuses {cri_refused} of the images containerd reads")
    return 1 if differ or wrongly or over else 0


if __name__ == "__main__":
    sys.exit(main())

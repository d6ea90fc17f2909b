#!/usr/bin/env python3
"""Compares pullgate's reading of each corpus case (examples/docread.rs) with containerd's
(tests/difftest/go's docread, built from containerd's own code at one version).

  compare.py LABEL PULLGATE.jsonl CONTAINERD.jsonl

A case agrees when pullgate refuses it, or when both read the same image: the same manifest
chosen, config, layers and diff_ids, and pullgate sees a checkpoint image wherever containerd's
CRI would (it may see one where containerd does not: it refuses more, never less). Anything
else (pullgate reads a document containerd cannot read, or reads it otherwise) is a difference:
each is printed, and the exit status is 1. Prints the counts."""
import json, sys


def load(path):
    out = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            out[r["case"]] = r
    return out


def main():
    label, pg_path, cd_path = sys.argv[1:4]
    pg, cd = load(pg_path), load(cd_path)
    if set(pg) != set(cd) or not pg:
        print(f"difftest ({label}): the readers saw different cases ({len(pg)} and {len(cd)})")
        return 1
    refused = agreed = 0
    differ = []
    for case in sorted(pg):
        p, c = pg[case], cd[case]
        if not p["ok"]:
            refused += 1
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
    print(f"difftest ({label}): {len(pg)} documents compared: {refused} refused by pullgate, {agreed} read alike, {len(differ)} read differently")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

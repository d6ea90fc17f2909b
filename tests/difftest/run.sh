#!/usr/bin/env bash
# The differential test of image documents: pullgate's reading (examples/docread.rs, the same
# document functions its pulls and its CRI front use) against containerd's own code
# (tests/difftest/go, built by scripts/setup.sh against each containerd version the suite
# runs), over one corpus: hand-written attacks on one reading, seeded random mutations of them
# (a fixed seed, and one drawn for this run, printed), and every document the end-to-end tests
# pushed or served when $PULLGATE_DIFF_CORPUS collected them (tests/lib.sh push_image,
# tests/evilregistry.py). A document the two read differently, and pullgate does not refuse,
# fails the test; so does a refusal of an image containerd reads (the hand-written valid cases
# and every pushed layout a test did not mark hostile), and more refusals among the fixed
# corpus's hand-written and seeded cases than pinned below; and a CRI front's reading (the
# configs it requires to be the image's) that leaves out the config containerd chooses.
# Usage: tests/difftest/run.sh [COLLECTED_DIR]
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
DEPS=${PULLGATE_DEPS:-/opt/pullgate-deps}
collected=${1:-}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
seed=${DIFF_SEED:-$RANDOM$RANDOM}
layouts=(); [ -n "$collected" ] && [ -d "$collected" ] && layouts=(--layouts "$collected")
n1=$(python3 "$here/tests/difftest/corpus.py" "$work/fixed" --random 400 --seed 2535 --valid-list "$work/fixed.valid" "${layouts[@]}") || { echo "difftest: the corpus could not be written"; exit 1; }
n2=$(python3 "$here/tests/difftest/corpus.py" "$work/drawn" --random 300 --seed "$seed" --valid-list "$work/drawn.valid") || { echo "difftest: the corpus could not be written"; exit 1; }
# The fixed corpus's refusals among its hand-written and seeded cases, per platform, pinned: more
# fail the test (a reading that starts refusing what it read is not agreement).
declare -A PIN=([linux/amd64]=362 [linux/arm64]=393 [linux/arm/v7]=460 [linux/riscv64]=462)
echo "difftest: corpus of $n1 documents (seed 2535$([ -n "$collected" ] && echo ", with those the end-to-end tests pushed or served")) and $n2 (seed $seed: DIFF_SEED=$seed repeats it)"
fail=0
readers=()
for d in "$DEPS"/docread-v*/docread; do [ -x "$d" ] && readers+=("$d"); done
[ ${#readers[@]} -ge 3 ] || { echo "difftest: expected containerd's docread for 1.7, 2.1 and 2.4 under $DEPS (scripts/setup.sh builds them), found ${#readers[@]}"; exit 1; }
# Each corpus read for the platforms nodes run (an index's entries are chosen per platform).
for c in fixed drawn; do
  for platform in linux/amd64 linux/arm64 linux/arm/v7 linux/riscv64; do
    out=$work/$c.${platform//\//_}
    "$here/target/release/examples/docread" --platform "$platform" "$work/$c" > "$out.pullgate" || { echo "difftest: pullgate's docread failed on $c"; fail=1; continue; }
    for r in "${readers[@]}"; do
      v=$(basename "$(dirname "$r")"); v=${v#docread-}
      "$r" -platform "$platform" "$work/$c" > "$out.$v" 2> "$out.$v.err" || { echo "difftest: containerd $v's docread failed on $c: $(tail -3 "$out.$v.err")"; fail=1; continue; }
      pin=(); [ "$c" = fixed ] && [ -n "${PIN[$platform]}" ] && pin=(--pin "${PIN[$platform]}")
      python3 "$here/tests/difftest/compare.py" "containerd $v, $platform, $c corpus" "$out.pullgate" "$out.$v" --valid "$work/$c.valid" "${pin[@]}" || fail=1
    done
  done
done
exit $fail

# Shared start of the benchmark scripts, sourced first with `here` set to the repository: installs
# what the tests use (scripts/setup.sh), takes tests/lib.sh's helpers and removes the run's work
# on exit; then timing, medians, and the bytes a token-auth registry started as
# `start_token_registry t` (and its token server) served.
PULLGATE_SKIP_GO_TOOLS=1 "$here/scripts/setup.sh" >/dev/null
source "$here/tests/lib.sh"
trap cleanup EXIT
# Times are read from bash's own clock ($EPOCHREALTIME, seconds with microseconds): a `date`
# run in a subshell would add its own start to every figure (about a millisecond).
export LC_NUMERIC=C
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# med "A B C": the median of a space-separated list.
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
elapsed() { echo "$2 - $1" | bc -l; }
# registry_bytes REG_MARK TOKEN_MARK: bytes the registry (access log) and token server served
# since the marks that `marks` printed.
registry_bytes() {
  local r t
  r=$(tail -n +"$(($1 + 1))" "$WORK/registry-t/log" | awk '/HTTP\/1.1" [0-9]+ [0-9]+/ { for (i=1;i<=NF;i++) if ($i ~ /^HTTP\/1.1"$/) s += $(i+2) } END {print s+0}')
  t=$(tail -n +"$(($2 + 1))" "$WORK/registry-t/token.log" | sed -n 's/.*bytes=\([0-9]*\).*/\1/p' | awk '{s+=$1} END {print s+0}')
  echo $((r + t))
}
marks() { echo "$(wc -l < "$WORK/registry-t/log") $(wc -l < "$WORK/registry-t/token.log")"; }

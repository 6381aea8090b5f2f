#!/bin/bash
# Mixture sampling (issue 26): sampled mix generation of two members, the
# ordinary step (every member every token) against --mix-sample (one
# member's pass per token, the other catching up when drawn).  The members
# are heavy twins of stories260K and stories260K-poems (every layer's FFN
# widened with zero neurons by the oracle's make_heavy.py to about MIB MiB,
# so a token reads the weights of a 0.3B model while the distributions stay
# the small models'), N tokens from "Once upon a time" at temperature 1 with
# every filter off (the plain mixture, where mixture sampling is exact),
# weights 0.5/0.5, 2 threads.  Runs: plain with the default schedule
# (measured: concurrently or in turn), plain in turn (--parallel 1), and
# --mix-sample (in turn, its default), and both with --adapt (fixed share
# alpha 0.01: mixture sampling then mostly stays with one member); median of REPS runs each of the
# tokens/s, the user+system CPU seconds, and each member's forward passes
# and tokens, from the run summary.  Texts differ (another use of the seed).
# usage: bench/mix_sample.sh [BUILD_DIR=build] [REPS=3]   (root for the chroot;
#        MIX_BENCH_MIB=300, MIX_BENCH_N=200; ~2 x MIB MiB under
#        /opt/llamacpp-oracle/tmp/tutti-bench/mix, kept for the next run)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${TUTTI_SHARED_DIR:-$HERE/../../shared}
ROOT=${TUTTI_ORACLE_ROOT:-/opt/llamacpp-oracle}
BUILD=${1:-$HERE/../build}
REPS=${2:-3}
TUTTI=$BUILD/tutti
MIB=${MIX_BENCH_MIB:-300}
N=${MIX_BENCH_N:-200}
DIR=/tmp/tutti-bench/mix
mkdir -p "$ROOT$DIR"
cp "$SHARED/oracle/make_heavy.py" "$ROOT/oracle/"
M=()
for src in "$SHARED/models/stories260K.gguf" "$SHARED/models/stories260K-ft/stories260K-poems.gguf"; do
  b=$(basename "$src" .gguf)
  out=$DIR/$b-heavy$MIB.gguf
  if [ ! -s "$ROOT$out" ]; then
    cp "$src" "$ROOT$DIR/$b.gguf"
    chroot "$ROOT" python3 /oracle/make_heavy.py "$DIR/$b.gguf" "$out.part" "$MIB" >&2
    mv "$ROOT$out.part" "$ROOT$out"
  fi
  M+=(-m "$ROOT$out")
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "load: $(uptime | sed 's/.*load average/load average/')"
printf '%-28s %10s %9s %26s %26s\n' run tokens/s cpu_s "member 1 passes/tokens" "member 2 passes/tokens"
for mode in plain plain-in-turn mix-sample plain-adapt mix-sample-adapt; do
  case $mode in
  plain) extra=() ;;
  plain-in-turn) extra=(--parallel 1) ;;
  mix-sample) extra=(--mix-sample) ;;
  plain-adapt) extra=(--adapt) ;;
  mix-sample-adapt) extra=(--mix-sample --adapt) ;;
  esac
  : >"$OUT/tps" && : >"$OUT/cpu" && : >"$OUT/p1" && : >"$OUT/p2"
  for r in $(seq "$REPS"); do
    /usr/bin/time -f '%U %S' -o "$OUT/time" "$TUTTI" run "${M[@]}" -p "Once upon a time" -n "$N" -t 2 -s $((11 + r)) \
      --temp 1 --top-k 0 --top-p 1 --min-p 0 "${extra[@]}" >/dev/null 2>"$OUT/err"
    sed -n 's/.* (\([0-9.]*\) tokens\/s); finish.*/\1/p' "$OUT/err" >>"$OUT/tps"
    awk '{print $1 + $2}' "$OUT/time" >>"$OUT/cpu"
    sed -n 's/.*member 1 .*: *\([0-9]*\) tokens evaluated in \([0-9]*\) forward passes.*/\2\/\1/p' "$OUT/err" >>"$OUT/p1"
    sed -n 's/.*member 2 .*: *\([0-9]*\) tokens evaluated in \([0-9]*\) forward passes.*/\2\/\1/p' "$OUT/err" >>"$OUT/p2"
  done
  printf '%-28s %10s %9s %26s %26s\n' "$mode" "$(median <"$OUT/tps")" "$(median <"$OUT/cpu")" \
    "$(tr '\n' ' ' <"$OUT/p1")" "$(tr '\n' ' ' <"$OUT/p2")"
done
echo "load: $(uptime | sed 's/.*load average/load average/')"

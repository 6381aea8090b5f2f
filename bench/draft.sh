#!/bin/bash
# Drafting (issue 26), for a quiet machine: the heavy twin of
# stories260K-dreams (every layer's FFN widened with zero neurons to about
# 500 MiB by the oracle's make_heavy.py, so each token reads the weights of
# a 0.5B model while the distributions stay the small model's) verified,
# stories260K drafting; 200 tokens greedy from "Once upon a time", 2 threads.
#   tutti generate plain, then with -md for several draft lengths and cuts
#   (the text must be identical: checked), and llama.cpp 0.7.0 (the oracle
#   chroot): llama-bench tg200 (plain) and llama-speculative with the same
#   pair.  Median tokens/s of REPS runs each; tutti's acceptance and drafted
#   length per round from its summary line.
# usage: bench/draft.sh [BUILD_DIR=build] [REPS=3]   (root for the chroot; ~0.5 GB disk
#        under /opt/llamacpp-oracle/tmp/tutti-bench/heavy, kept for the next run)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${TUTTI_SHARED_DIR:-$HERE/../../shared}
ROOT=${TUTTI_ORACLE_ROOT:-/opt/llamacpp-oracle}
BUILD=${1:-$HERE/../build}
REPS=${2:-3}
TUTTI=$BUILD/tutti
DIR=/tmp/tutti-bench/heavy
N=200
MIB=${DRAFT_BENCH_MIB:-500} # the twin's size (a small one checks this script quickly)
PROMPT="Once upon a time"
mkdir -p "$ROOT$DIR"
cp "$SHARED/oracle/make_heavy.py" "$ROOT/oracle/"
TARGET=$DIR/stories260K-dreams-heavy$MIB.gguf
if [ ! -s "$ROOT$TARGET" ]; then
  cp "$SHARED/models/stories260K-ft/stories260K-dreams.gguf" "$ROOT$DIR/stories260K-dreams.gguf"
  chroot "$ROOT" python3 /oracle/make_heavy.py "$DIR/stories260K-dreams.gguf" "$TARGET.part" "$MIB" >&2
  mv "$ROOT$TARGET.part" "$ROOT$TARGET"
fi
cp "$SHARED/models/stories260K.gguf" "$ROOT$DIR/stories260K.gguf"
DRAFT=$DIR/stories260K.gguf
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# tutti generate [extra flags]: median generation tokens/s; the text and the
# last summary kept in $OUT
tutti_run() {
  local tag=$1; shift
  for r in $(seq "$REPS"); do
    "$TUTTI" generate -m "$ROOT$TARGET" -p "$PROMPT" -n $N --temp 0 --ignore-eos -t 2 "$@" \
      >"$OUT/$tag.txt" 2>"$OUT/$tag.err"
    sed -n 's/.*generated [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p' "$OUT/$tag.err"
  done | median
}

plain=$(tutti_run plain)
printf '%-44s %8s tokens/s\n' "tutti plain" "$plain"
for cfg in "16 0.75" "8 0.75" "6 0.5" "4 0" "6 0" "8 0"; do
  set -- $cfg
  tag="d$1-$2"
  tps=$(tutti_run "$tag" -md "$ROOT$DRAFT" --draft-max "$1" --draft-p-min "$2")
  same=identical
  cmp -s "$OUT/plain.txt" "$OUT/$tag.txt" || same="DIFFERENT TEXT"
  line=$(grep 'draft ' "$OUT/$tag.err" | sed 's/.*: \([0-9]* rounds.*accepted ([0-9.]*%)\).*/\1/')
  printf '%-44s %8s tokens/s  x%.2f  %s; %s\n' "tutti -md, --draft-max $1 --draft-p-min $2" "$tps" \
    "$(echo "$tps / $plain" | bc -l)" "$same" "$line"
done

# llama.cpp: plain tg200 and speculative, same pair, same threads
lb=$(chroot "$ROOT" llama-bench -m "$TARGET" -p 0 -n $N -t 2 -r "$REPS" -o csv 2>/dev/null |
  awk -F, 'NR==1 {for (i=1;i<=NF;i++) if ($i ~ /avg_ts/) c=i} NR>1 {gsub(/"/,"",$c); print $c}')
printf '%-44s %8s tokens/s\n' "llama.cpp llama-bench tg$N" "$lb"
for nmax in 3 4 8 16; do
  for r in $(seq "$REPS"); do
    chroot "$ROOT" llama-speculative -m "$TARGET" -md "$DRAFT" -p "$PROMPT" -n $N --temp 0 --ignore-eos -t 2 \
      --spec-draft-n-max "$nmax" >/dev/null 2>"$OUT/spec.err" || true
    sed -n 's/.*decoded *[0-9]* tokens in *[0-9.]* seconds, speed: *\([0-9.]*\) t\/s.*/\1/p' "$OUT/spec.err"
  done | median >"$OUT/spec.tps"
  acc=$(grep -E '(n_drafted|n_accept|accept) *=' "$OUT/spec.err" | sed 's/.* I //' | tr -s ' ' | paste -sd ';')
  printf '%-44s %8s tokens/s  %s\n' "llama-speculative --spec-draft-n-max $nmax" "$(cat "$OUT/spec.tps")" "$acc"
done

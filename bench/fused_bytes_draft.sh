#!/bin/bash
# Byte-aligned fusion with a draft (issue 26): `tutti run --align byte` of
# three members plain, then with -md DRAFT (the draft proposes bytes, every
# member verifies its hypotheses over them), REPS times each, alternating so
# that a change in the machine's load hits both; the median wall time and
# generation time of each, their ratio, and a check that the texts are
# identical (they must be, greedy).  The members are meant to be the heavy
# twins (bench/heavy_twins.sh makes them; never in the repository).
#   bench/fused_bytes_draft.sh TUTTI THREADS N DRAFT M1 M2 M3 [-- EXTRA DRAFT FLAGS]
# N is `tutti run -n` (member 1's tokens; 70 with the story models is 199
# bytes after "Once upon a time").  REPS (default 3) from the environment.
# Prints the machine's load before and after (others may share the cores)
# and each command's CPU time (user + sys, /usr/bin/time).
set -euo pipefail
T=$1 TH=$2 N=$3 D=$4
shift 4
members=() extra=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do members+=(-m "$1"); shift; done
[ $# -gt 0 ] && shift && extra=("$@")
REPS=${REPS:-3}
P="Once upon a time"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
now() { date +%s.%N; }
echo "load before: $(uptime)"
for r in $(seq "$REPS"); do
  for kind in plain draft; do
    flags=()
    [ "$kind" = draft ] && flags=(-md "$D" "${extra[@]}")
    t0=$(now)
    /usr/bin/time -f "%U %S" -o "$tmp/cpu" "$T" run "${members[@]}" --align byte -n "$N" --temp 0 -t "$TH" -p "$P" \
      "${flags[@]}" >"$tmp/$kind.$r.txt" 2>"$tmp/$kind.$r.err"
    t1=$(now)
    echo "$t1 - $t0" | bc -l >>"$tmp/$kind.wall"
    awk '{print $1 + $2}' "$tmp/cpu" >>"$tmp/$kind.cpu"
    sed -n 's/.* sampled.* in \([0-9.]*\) s (.*/\1/p' "$tmp/$kind.$r.err" | head -n 1 >>"$tmp/$kind.gen"
    cmp -s "$tmp/plain.1.txt" "$tmp/$kind.$r.txt" || { echo "DIFFERENT TEXT: $kind run $r" >&2; exit 1; }
  done
done
echo "load after: $(uptime)"
grep -h "member\|draft" "$tmp/draft.$REPS.err" | grep -v "^ensemble" || true
for kind in plain draft; do
  printf '%s: wall %s s, generation %s s, CPU (user + sys) %s s (medians of %d; walls %s)\n' "$kind" \
    "$(median <"$tmp/$kind.wall")" "$(median <"$tmp/$kind.gen")" "$(median <"$tmp/$kind.cpu")" "$REPS" \
    "$(tr '\n' ' ' <"$tmp/$kind.wall")"
done
printf 'plain / drafted: wall %.2fx, generation %.2fx, CPU %.2fx; text identical (%s bytes)\n' \
  "$(echo "$(median <"$tmp/plain.wall") / $(median <"$tmp/draft.wall")" | bc -l)" \
  "$(echo "$(median <"$tmp/plain.gen") / $(median <"$tmp/draft.gen")" | bc -l)" \
  "$(echo "$(median <"$tmp/plain.cpu") / $(median <"$tmp/draft.cpu")" | bc -l)" "$(wc -c <"$tmp/plain.1.txt")"

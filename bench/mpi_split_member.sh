#!/bin/bash
# Fused generation with a member split by layers over MPI ranks
# (src/fusion/member_split.c) against the same ensemble unsplit: tokens/s
# of `tutti run` (token alignment, the model twice; the text is the same in
# every configuration) and bytes/s of a byte-aligned pair of tiny models.
#   usage: bench/mpi_split_member.sh [MODEL] [REPEATS=3]
# MODEL: default the random Llama-shaped model of bench/mpi_split_model.sh.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=${TUTTI:-$HERE/../build/tutti}
S=$HERE/../../shared/models
MODEL=${1:-/opt/llamacpp-oracle/tmp/mpi2/split-q8_0.gguf}
REP=${2:-3}
[ -s "$MODEL" ] || MODEL=$("$HERE/mpi_split_model.sh" | tail -1)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mpi() { mpirun --oversubscribe --allow-run-as-root "$@"; }
# the rate of the run's report line ("... in X s (R tokens/s)" or bytes/s)
rate() { sed -n 's/.*alignment, rule [a-z]*: .* in [0-9.]* s (\([0-9.]*\) [a-z]*\/s).*/\1/p' "$1"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
run_cfg() {
  name=$1 unit=$2; shift 2
  : >"$W/r"
  for i in $(seq "$REP"); do
    "$@" >"$W/out" 2>"$W/err" || { echo "$name: failed"; cat "$W/err"; return; }
    rate "$W/err" >>"$W/r"
    cmp -s "$W/out" "$W/ref" || echo "    (text differs from the first configuration's!)"
  done
  printf '%-62s %8.1f %s/s\n' "$name" "$(median <"$W/r")" "$unit"
}
echo "model: $MODEL; median of $REP runs; $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg)"
TOK=(run -m "$MODEL" -m "$MODEL" -p "Once upon a time" -n 48 --temp 0 -t 2)
"$T" "${TOK[@]}" >"$W/ref" 2>/dev/null
echo "token alignment, two members (the model twice), 48 tokens, -t 2 in all:"
run_cfg "  1 process" tokens "$T" "${TOK[@]}"
run_cfg "  2 ranks, both members on rank 1 (default placement)" tokens mpi -np 2 "$T" "${TOK[@]}"
run_cfg "  2 ranks, member 1 on rank 1, member 2 split over ranks 0-1" tokens mpi -np 2 "$T" "${TOK[@]}" \
  --split-layers --split-member 2
run_cfg "  2 ranks, both members split over ranks 0-1" tokens mpi -np 2 "$T" "${TOK[@]}" --split-layers
run_cfg "  3 ranks, one member per rank 1, 2 (--place 1,2)" tokens mpi -np 3 "$T" "${TOK[@]}" --place 1,2
run_cfg "  3 ranks, both members split over ranks 0-2" tokens mpi -np 3 "$T" "${TOK[@]}" --split-layers
BYTE=(run -m "$S/stories260K.gguf" -m "$S/TinyStories-656K-Q8_0.gguf" -p "Once upon" -n 120 --temp 0 -t 2)
"$T" "${BYTE[@]}" >"$W/ref" 2>/dev/null
echo "byte alignment, stories260K + TinyStories-656K-Q8_0, 120 tokens, -t 2 in all:"
run_cfg "  1 process" bytes "$T" "${BYTE[@]}"
run_cfg "  2 ranks, both members on rank 1 (default placement)" bytes mpi -np 2 "$T" "${BYTE[@]}"
run_cfg "  2 ranks, member 1 on rank 1, member 2 split over ranks 0-1" bytes mpi -np 2 "$T" "${BYTE[@]}" \
  --split-layers --split-member 2

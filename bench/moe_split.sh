#!/bin/bash
# Routed experts split over MPI ranks (--split-experts) against one process:
# prompt and generation tokens/s on 1, 2 and 3 ranks, and the traffic per
# token and MoE layer.  usage: bench/moe_split.sh MODEL [REPEATS=3]
# MODEL: a random-weight MoE of a real layer shape, e.g. the file that
#   bench/moe.py --shape olmoe --keep leaves in
#   /opt/llamacpp-oracle/tmp/tutti-bench-moe/olmoe-4l-q4_k_m.gguf
# Every rank maps the whole file but places (holds in memory) only its own
# experts, rank 0 also the rest of the model: the lines of each rank give
# its resident memory at the end (peak in brackets); one process's peak RSS
# is /usr/bin/time's.
# Each rank gets the same -t, so 2 ranks use twice the cores of one process;
# the "1 process, -t 2T" line is the comparison at equal cores.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=${TUTTI:-$HERE/../build/tutti}
MODEL=${1:?usage: bench/moe_split.sh MODEL [REPEATS]}
REP=${2:-3}
TH=${THREADS:-1}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
head -c 600 "$HERE/../../shared/eval/stories-dev.txt" | tr '\n' ' ' >"$W/prompt.txt"
mpi() { mpirun --oversubscribe --allow-run-as-root "$@"; }
rate() { sed -n 's/.*prompt [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s); generated [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1 \2/p' "$1"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
run_cfg() {
  name=$1; shift
  : >"$W/p"; : >"$W/g"
  for i in $(seq "$REP"); do
    case "$1" in # mpi is a function: each rank's memory is in its own lines
      mpi) "$@" -m "$MODEL" -f "$W/prompt.txt" -n 64 --temp 0 --ignore-eos >"$W/out.$i" 2>"$W/err" ;;
      *) /usr/bin/time -o "$W/rss" -f %M "$@" -m "$MODEL" -f "$W/prompt.txt" -n 64 --temp 0 --ignore-eos \
           >"$W/out.$i" 2>"$W/err" ;;
    esac
    rate "$W/err" | awk '{ print $1 >> "'"$W/p"'"; print $2 >> "'"$W/g"'" }'
  done
  printf '%-40s prompt %8.1f tok/s   generation %7.1f tok/s' "$name" "$(median <"$W/p")" "$(median <"$W/g")"
  case "$1" in mpi) echo ;; *) echo "   peak RSS $(($(tail -n 1 "$W/rss") / 1024)) MiB" ;; esac
  grep 'tutti: mpi: experts:' "$W/err" | sed 's/^/    /'
}
echo "model: $MODEL, prompt $(wc -c <"$W/prompt.txt") bytes, median of $REP runs, $(nproc) CPUs"
run_cfg "1 process, -t $TH" "$T" generate -t "$TH"
run_cfg "1 process, -t $((2 * TH))" "$T" generate -t "$((2 * TH))"
run_cfg "2 ranks x -t $TH, --split-experts" mpi -np 2 "$T" generate -t "$TH" --split-experts
run_cfg "3 ranks x -t $TH, --split-experts" mpi -np 3 "$T" generate -t "$TH" --split-experts

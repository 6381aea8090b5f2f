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
PROMPT_BYTES=600 N_GEN=64 REPORT='tutti: mpi: experts:'
. "$HERE/split_common.sh"
run_cfg "1 process, -t $TH" "$T" generate -t "$TH"
run_cfg "1 process, -t $((2 * TH))" "$T" generate -t "$((2 * TH))"
run_cfg "2 ranks x -t $TH, --split-experts" mpi -np 2 "$T" generate -t "$TH" --split-experts
run_cfg "3 ranks x -t $TH, --split-experts" mpi -np 3 "$T" generate -t "$TH" --split-experts

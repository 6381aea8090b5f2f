#!/bin/bash
# Prompt processing of one model split by layers over 2 ranks against one
# process with the same total threads, and the transfers and resident
# memory per rank.  usage: bench/mpi_split.sh [MODEL] [REPEATS=3]
# MODEL: default the random Llama-shaped model of bench/mpi_split_model.sh.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=${TUTTI:-$HERE/../build/tutti}
MODEL=${1:-/opt/llamacpp-oracle/tmp/mpi2/split-q8_0.gguf}
REP=${2:-3}
[ -s "$MODEL" ] || MODEL=$("$HERE/mpi_split_model.sh" | tail -1)
# ~250 tokens (the random model's tokenizer falls back to one token per byte)
PROMPT_BYTES=250 N_GEN=16 REPORT='split:\|split over'
. "$HERE/split_common.sh"
run_cfg "1 process, -t 2" "$T" generate -t 2
run_cfg "1 process, -t 1" "$T" generate -t 1
run_cfg "2 ranks x -t 1, split, one micro-batch (no overlap)" mpi -np 2 "$T" generate -t 1 --split-layers --split-ubatch 512
run_cfg "2 ranks x -t 1, split, auto micro-batches" mpi -np 2 "$T" generate -t 1 --split-layers
run_cfg "2 ranks x -t 1, split, 16-token micro-batches" mpi -np 2 "$T" generate -t 1 --split-layers --split-ubatch 16
# resident memory: one process holding the whole model vs each rank's part (printed above)
if [ -x /usr/bin/time ]; then
  /usr/bin/time -f "%M" "$T" generate -t 1 -m "$MODEL" -f "$W/prompt.txt" -n 16 --temp 0 >/dev/null 2>"$W/err"
  echo "1 process, whole model: peak RSS $(( $(tail -1 "$W/err") / 1024 )) MiB"
fi

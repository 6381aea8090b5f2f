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
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# ~250 tokens (the random model's tokenizer falls back to one token per byte)
head -c 250 "$HERE/../../shared/eval/stories-dev.txt" | tr '\n' ' ' >"$W/prompt.txt"
mpi() { mpirun --oversubscribe --allow-run-as-root "$@"; }
# prints "prompt_tok/s gen_tok/s" from the command's report
rate() { sed -n 's/.*prompt [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s); generated [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1 \2/p' "$1"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
run_cfg() {
  name=$1; shift
  : >"$W/p" ; : >"$W/g"
  for i in $(seq "$REP"); do
    "$@" -m "$MODEL" -f "$W/prompt.txt" -n 16 --temp 0 --ignore-eos >/dev/null 2>"$W/err"
    rate "$W/err" | awk '{ print $1 >> "'"$W/p"'"; print $2 >> "'"$W/g"'" }'
  done
  printf '%-52s prompt %8.1f tok/s   generation %7.1f tok/s\n' "$name" "$(median <"$W/p")" "$(median <"$W/g")"
  grep 'split:\|split over' "$W/err" | sed 's/^/    /'
}
echo "model: $MODEL, prompt $(wc -c <"$W/prompt.txt") bytes, median of $REP runs, $(nproc) CPUs"
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

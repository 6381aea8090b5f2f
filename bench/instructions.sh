#!/bin/sh
# Instruction counts (valgrind --tool=callgrind, total Ir) of the same
# commands under two tutti binaries: a relative speed check that machine
# load does not disturb (wall-clock timings on a busy machine do).  One
# thread, members in turn, the four quick-start models of models/.
#   bench/instructions.sh OLD_TUTTI NEW_TUTTI
# prints one line per command: its Ir under each binary and new/old.
set -eu
old=$1 new=$2
cd "$(dirname "$0")/.."
M="-m models/stories260K.gguf -m models/TinyStories-656K-Q8_0.gguf -m models/BabyLlama-tok105/babyllama-tok105.gguf -m models/BabyLlama-tok361/babyllama-tok361.gguf"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ir() { # BINARY ARGS...
  b=$1; shift
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" "$b" "$@" >/dev/null 2>"$out/err" || true
  grep -o 'Collected : [0-9]*' "$out/err" | awk '{print $3}'
  rm -f "$out"/cg.*
}
while IFS='|' read -r name args; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086
  a=$(ir "$old" $args) b=$(ir "$new" $args)
  echo "$name: old $a new $b ratio $(echo "$b $a" | awk '{printf "%.4f", $1 / $2}')"
done <<LIST
generate 32 tokens greedy|generate -m models/stories260K.gguf -p Once -n 32 --temp 0 -t 1
run byte, 4 members, 32 tokens|run $M -p Once -n 32 --temp 0 -t 1 --parallel 1
eval bits per byte, 2 members|eval -m models/stories260K.gguf -m models/BabyLlama-tok361/babyllama-tok361.gguf --text tests/data/eval/stories-dev.txt -t 1 --parallel 1
LIST

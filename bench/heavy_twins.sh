#!/bin/bash
# Heavy twins (issue 12) of the three story models, never committed: every
# layer's FFN widened with zero neurons to about 500 MiB (the oracle's
# make_heavy.py, in its chroot), so each token reads as many weights as a
# 0.5B model while the distributions stay those of the small models.  Then
# bench/batch_matmul times a forward pass of 1, 2, 3, 4, 8 tokens on each.
# usage: bench/heavy_twins.sh [BUILD_DIR=build]   (root for the chroot; ~1.6 GB disk)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${TUTTI_SHARED_DIR:-$HERE/../../shared}
ROOT=${TUTTI_ORACLE_ROOT:-/opt/llamacpp-oracle}
BUILD=${1:-$HERE/../build}
DIR=/tmp/tutti-bench/heavy
mkdir -p "$ROOT$DIR"
cp "$SHARED/oracle/make_heavy.py" "$ROOT/oracle/"
for m in stories260K.gguf TinyStories-656K-Q8_0.gguf BabyLlama-tok361/babyllama-tok361.gguf; do
  name=$(basename "$m" .gguf)
  out=$DIR/$name-heavy.gguf
  if [ ! -s "$ROOT$out" ]; then
    cp "$SHARED/models/$m" "$ROOT$DIR/$name.gguf"
    chroot "$ROOT" python3 /oracle/make_heavy.py "$DIR/$name.gguf" "$out.part" 500 >&2
    mv "$ROOT$out.part" "$ROOT$out"
  fi
done
cmake --build "$BUILD" --target batch_matmul -j2 >/dev/null
"$BUILD/batch_matmul" -t 1,2 -n 1,2,3,4,8 -r 9 "$ROOT$DIR"/*-heavy.gguf

#!/bin/bash
# Creates the random-weight benchmark models (never committed): for each shape
# (Llama-3.2-1B, Qwen2.5-0.5B) an F16 GGUF written by the oracle's
# gen_bench_model.py, then Q8_0 and Q4_K_M made from it by llama-quantize.
# They live inside the oracle chroot so llama-bench can read the same files.
# usage: bench/make_models.sh [ROOT=/opt/llamacpp-oracle]   (root; ~3 GB disk)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${TUTTI_SHARED_DIR:-$HERE/../../shared}
ROOT=${1:-${TUTTI_ORACLE_ROOT:-/opt/llamacpp-oracle}}
if [ ! -x "$ROOT/usr/bin/llama-bench" ] || [ ! -x "$ROOT/oracle/dumplogits" ]; then
  echo "oracle chroot missing at $ROOT: running $SHARED/oracle/setup.sh" >&2
  "$SHARED/oracle/setup.sh" "$ROOT"
fi
mkdir -p "$ROOT/tmp/tutti-bench"
cp "$SHARED/oracle/gen_bench_model.py" "$ROOT/oracle/"
for shape in llama3.2-1b qwen2.5-0.5b; do
  f16=/tmp/tutti-bench/$shape-f16.gguf
  if [ ! -s "$ROOT$f16" ]; then
    echo "generating $f16" >&2
    chroot "$ROOT" python3 /oracle/gen_bench_model.py "$shape" "$f16.part" >/dev/null
    mv "$ROOT$f16.part" "$ROOT$f16"
  fi
  for q in Q8_0 Q4_K_M; do
    out=/tmp/tutti-bench/$shape-$(echo $q | tr A-Z a-z).gguf
    if [ ! -s "$ROOT$out" ]; then
      echo "quantizing $out" >&2
      chroot "$ROOT" llama-quantize "$f16" "$out.part" "$q" 2 >/dev/null 2>&1
      mv "$ROOT$out.part" "$ROOT$out"
    fi
  done
done
ls -l "$ROOT/tmp/tutti-bench/"*.gguf >&2

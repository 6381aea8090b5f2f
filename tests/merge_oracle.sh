#!/bin/bash
# Regenerates tests/data/merge_quant.sha256: the sha256 (first 16 hex digits) of every tensor's bytes
# after llama-quantize --pure (Debian llama.cpp, the oracle chroot) quantizes
# the float32 merges of test_merge (test_quantized_vs_llama_quantize writes
# them when TUTTI_MERGE_ORACLE_DIR is set).  The hashes are computed inside the
# chroot with gguf-py's GGUFReader, not with tutti's or the test's reader.
# usage (root, after building): tests/merge_oracle.sh [BUILD=build] [ROOT=/opt/llamacpp-oracle]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-$HERE/../build}
ROOT=${2:-/opt/llamacpp-oracle}
WORK=$ROOT/tmp/merge-oracle
rm -rf "$WORK" && mkdir -p "$WORK"
TUTTI_MERGE_ORACLE_DIR=$WORK "$BUILD/tests/test_merge" >/dev/null
cat > "$WORK/hash.py" <<'PY'
import hashlib, sys
from gguf import GGUFReader
for t in GGUFReader(sys.argv[1]).tensors:
    print(t.name, hashlib.sha256(t.data.tobytes()).hexdigest()[:16])  # 64 bits: enough to tell bytes apart, small file
PY
out=$HERE/data/merge_quant.sha256
: > "$out.part"
for c in q-slerp q-ties q-stories; do
  for q in F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K MXFP4; do
    # llama-quantize names MXFP4's ftype MXFP4_MOE (with --pure: every weight MXFP4)
    ft=$q; [ "$q" = MXFP4 ] && ft=MXFP4_MOE
    chroot "$ROOT" llama-quantize --pure /tmp/merge-oracle/$c.f32.gguf /tmp/merge-oracle/$c.$q.gguf $ft 1 >/dev/null 2>&1
    chroot "$ROOT" python3 /tmp/merge-oracle/hash.py /tmp/merge-oracle/$c.$q.gguf | sed "s/^/$c $q /" >> "$out.part"
  done
done
mv "$out.part" "$out"
wc -l "$out"
# llama-quantize's own report of the fallback types (tests/data/merge_fallback.txt,
# read by test_parameter_ranges_and_fallbacks): --pure Q4_K on stories260K
cp "$HERE/../../shared/models/stories260K.gguf" "$WORK/s.gguf"
log=$(chroot "$ROOT" llama-quantize --pure /tmp/merge-oracle/s.gguf /tmp/merge-oracle/s.q4k.gguf Q4_K 1 2>&1)
n=$(echo "$log" | sed -n 's/.*WARNING: \([0-9]*\) of \([0-9]*\) tensor(s) required fallback.*/\1 \2/p')
echo "stories260K Q4_K $n q5_0=$(echo "$log" | grep -c 'falling back to *q5_0') f16=$(echo "$log" | grep -c 'falling back to *f16')" \
  > "$HERE/data/merge_fallback.txt"
cat "$HERE/data/merge_fallback.txt"

#!/bin/bash
# Regenerates tests/data/quant/models/: small llama models whose weights
# llama-quantize stored in one new tensor type each, with llama.cpp's logits
# and gguf-py's dequantization of every tensor (tests/test_quant.c,
# tests/test_arch.c).  Runs the oracle chroot of ../shared/oracle/setup.sh
# (Debian llama.cpp 0.7.0 / ggml 0.27.0, python3-gguf); nothing here is
# computed by tutti.
#
# Usage (as root, from anywhere): tests/data/quant/make_models.sh [ORACLE_ROOT]
#
# 1. gen_small_llama.py writes a 1-layer float32 llama (rows of 256) and
#    calibration text; llama-imatrix (--process-output) computes an importance
#    matrix on it.
# 2. llama-quantize --pure --imatrix writes one file per ftype below: every
#    2-D weight in that ftype's tensor type (MXFP4_MOE -> MXFP4, IQ2_M ->
#    IQ2_S); the three types ggml cannot quantize without importance data keep
#    token_embd (which has none: it is never multiplied) in Q4_K.
# 3. /oracle/dumplogits runs each file on models/input.ids (33 ids, BOS first):
#    llama-TYPE.logits.f32 = float32 [33][105].
# 4. dequant_sha.py writes dequant.sha256: per quantized tensor, the sha256 of
#    gguf.quants.dequantize's float32 bytes, after checking that ggml's own
#    dequantize_row_* gives the same bits.
set -euo pipefail
ROOT=${1:-/opt/llamacpp-oracle}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=$(cd "$HERE/../../../../shared" 2>/dev/null && pwd || echo /work/shared)
WORK=$ROOT/tmp/tutti-quant-models
rm -rf "$WORK" && mkdir -p "$WORK/out"
cp "$HERE/gen_small_llama.py" "$HERE/dequant_sha.py" "$SHARED/models/BabyLlama-tok105/babyllama-tok105.gguf" "$WORK/"
IDS=$(tr -d ' \n' < "$HERE/models/input.ids")
T=/tmp/tutti-quant-models
chroot "$ROOT" python3 $T/gen_small_llama.py $T/babyllama-tok105.gguf $T/small-F32.gguf $T/calib.txt > /dev/null
chroot "$ROOT" llama-imatrix -m $T/small-F32.gguf -f $T/calib.txt -o $T/small.imatrix.gguf -c 128 -t 2 \
  --no-ppl --process-output > "$WORK/imatrix.log" 2>&1
# ftype:tensor type; '+' = token_embd in Q4_K (ggml needs importance data)
for ft in MXFP4_MOE:MXFP4 IQ2_XXS:IQ2_XXS+ IQ2_XS:IQ2_XS+ IQ2_M:IQ2_S IQ3_XXS:IQ3_XXS IQ3_S:IQ3_S \
          IQ1_S:IQ1_S+ IQ1_M:IQ1_M; do
  f=${ft%%:*} t=${ft#*:} extra=()
  case $t in *+) t=${t%+}; extra=(--token-embedding-type q4_K) ;; esac
  chroot "$ROOT" llama-quantize --pure "${extra[@]}" --imatrix $T/small.imatrix.gguf $T/small-F32.gguf \
    $T/out/llama-$t.gguf "$f" 2 > "$WORK/quantize-$t.log" 2>&1
  chroot "$ROOT" /oracle/dumplogits -m $T/out/llama-$t.gguf --ids "$IDS" --top 1 \
    --out $T/out/llama-$t.logits.f32 > /dev/null
  echo "llama-$t.gguf: $(stat -c %s "$WORK/out/llama-$t.gguf") bytes"
done
chroot "$ROOT" python3 $T/dequant_sha.py $T/out > "$WORK/out/dequant.sha256"
mkdir -p "$HERE/models"
cp "$WORK"/out/* "$HERE/models/"
rm -rf "$WORK"

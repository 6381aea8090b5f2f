#!/bin/bash
# Rebuilds the mixture-of-experts references of tests/test_moe.c.
#
# Usage (as root, with the oracle chroot of ../shared/oracle/setup.sh):
#   tests/data/moe/make_refs.sh
#
# Every model is a random-weight file written by ../shared/oracle/gen_moe_models.py
# (run inside the chroot) with the 105-token vocabulary of
# ../shared/models/BabyLlama-tok105 (small embeddings keep the files small), in
# two shapes and seeds per architecture (the generator's --config files
# shape-a.json and shape-b.json here: expert counts, top-k, shared experts,
# leading dense layers, heads, sliding window, expert groups, scales, YaRN
# differ between them; shape b has n_embd 32, the smallest rows llama-quantize
# takes; shape a, kept only in F32 and F16, n_embd 16 (small files), except
# gpt-oss, whose MXFP4 copy needs rows of 32):
#   NAME-a-F32.gguf, NAME-a-F16.gguf      shape a, seed 1 (one layer, unless the architecture
#                                         has leading dense layers or a sliding window)
#   NAME-b-Q8_0.gguf, NAME-b-Q4_K_M.gguf  shape b, seed 2 (rows of 32: Q4_K_M falls back to
#                                         Q5_0 / Q8_0, as llama-quantize does)
#   qwen3moe-k-Q4_K_M.gguf                shape-k.json, seed 3: n_embd 256, K-quant experts
#   gpt-oss-a-MXFP4.gguf                  the generator's MXFP4-expert copy (seed 1), as released
#                                         gpt-oss files are (gguf-py's MXFP4, the rest F32)
#   gpt-oss-b-MXFP4_MOE.gguf              llama-quantize's MXFP4_MOE of shape b
#   cli-*.txt                             what the fused runs and the eval of test_moe.c's
#                                         command-line tests must print (make_cli_refs.py)
# F16, Q8_0 and Q4_K_M are llama-quantize's copies of the generator's F32 file.
# For each kept file llama.cpp (dumplogits, see below) is fed the ids of input.ids
# (BOS first) and its logits at positions 0, 2, 4, ... are kept as
# NAME.logits.f32 (raw little-endian float32 [(N_IDS + 1) / 2][105]).  Checked on the way: exit 0, finite logits, and
# consecutive positions clearly different.
#
# dumplogits runs with llama.cpp's extra (weight-repacking) buffer types off
# (llama_model_params.use_extra_bufts = false, what llama.cpp's --no-repack
# sets): a copy of /oracle/dumplogits.c with that one change is compiled in
# the chroot.  With them on, llama.cpp 0.7.0 on this CPU (AMX, the
# sapphirerapids backend) aborts on every deepseek2 file whose attn_k_b is F16
# or Q8_0 (no backend takes the op), and computes NaN for a run of batch
# positions in Q8_0 files with dense FFN rows (qwen2moe's shared expert,
# glm4moe's dense layers), independently of the weights.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${ORACLE_ROOT:-/opt/llamacpp-oracle}
SHARED=$(cd "$HERE/../../../../shared" 2>/dev/null && pwd || echo /work/shared)
TMP=$ROOT/tmp/moe-refs
rm -rf "$TMP"
mkdir -p "$TMP"
cp "$SHARED/oracle/gen_moe_models.py" "$SHARED/models/BabyLlama-tok105/babyllama-tok105.gguf" "$HERE"/shape-*.json \
  "$TMP/"
IDS=$(cat "$HERE/input.ids")
sed -e 's/mp.n_gpu_layers = 0;/mp.n_gpu_layers = 0; mp.use_extra_bufts = false;/' "$ROOT/oracle/dumplogits.c" \
  > "$TMP/dumplogits.c"
grep -q use_extra_bufts "$TMP/dumplogits.c"
chroot "$ROOT" gcc -O2 -o /tmp/moe-refs/dumplogits /tmp/moe-refs/dumplogits.c -lllama

gen() { # shape seed
  chroot "$ROOT" python3 /tmp/moe-refs/gen_moe_models.py /tmp/moe-refs/babyllama-tok105.gguf \
    "/tmp/moe-refs/$1" --seed "$2" --config "/tmp/moe-refs/shape-$1.json" > /dev/null
}
quant() { # shape name type
  chroot "$ROOT" llama-quantize "/tmp/moe-refs/$1/$2-F32.gguf" "/tmp/moe-refs/$1/$2-$3.gguf" "$3" 2 \
    > "$TMP/quant.log" 2>&1 || { tail -n 5 "$TMP/quant.log"; exit 1; }
}
logits() { # dir/file-stem output-name
  chroot "$ROOT" /tmp/moe-refs/dumplogits -m "/tmp/moe-refs/$1.gguf" --ids "$IDS" -t 2 \
    --out "/tmp/moe-refs/$2.f32" > /dev/null 2> "$TMP/$2.err" || { cat "$TMP/$2.err"; exit 1; }
  /usr/bin/python3 - "$TMP/$2.f32" "$HERE/$2.logits.f32" "$IDS" <<'PY'
import sys, numpy as np
n = len(sys.argv[3].split(","))
a = np.fromfile(sys.argv[1], dtype="<f4").reshape(n, 105)
assert np.isfinite(a).all(), "non-finite logits"
ls = a - a.max(-1, keepdims=True); ls -= np.log(np.exp(ls).sum(-1, keepdims=True))
d = np.abs(ls[1:] - ls[:-1]).max(-1)
assert d.min() > 1e-2, f"positions {d.argmin()} and {d.argmin() + 1} nearly equal"
a[0::2].astype("<f4").tofile(sys.argv[2])  # positions 0, 2, 4, ... (small references)
PY
  echo "$2: logits"
}

NAMES="qwen3moe mixtral qwen2moe gpt-oss deepseek2 deepseek3 olmoe granitemoe glm4moe"
gen a 1
gen b 2
gen k 3
rm -f "$HERE"/*.gguf "$HERE"/*.logits.f32
for n in $NAMES; do
  quant a "$n" F16
  quant b "$n" Q8_0
  quant b "$n" Q4_K_M
  for f in a/$n-F32 a/$n-F16 b/$n-Q8_0 b/$n-Q4_K_M; do
    out=$(basename "$f" | sed -e "s/^$n-/$n-${f%%/*}-/")
    cp "$TMP/$f.gguf" "$HERE/$out.gguf"
    logits "$f" "$out"
  done
done
cp "$TMP/a/gpt-oss-MXFP4.gguf" "$HERE/gpt-oss-a-MXFP4.gguf"
logits a/gpt-oss-MXFP4 gpt-oss-a-MXFP4
quant b gpt-oss MXFP4_MOE
cp "$TMP/b/gpt-oss-MXFP4_MOE.gguf" "$HERE/gpt-oss-b-MXFP4_MOE.gguf"
logits b/gpt-oss-MXFP4_MOE gpt-oss-b-MXFP4_MOE
quant k qwen3moe Q4_K_M
cp "$TMP/k/qwen3moe-Q4_K_M.gguf" "$HERE/qwen3moe-k-Q4_K_M.gguf"
logits k/qwen3moe-Q4_K_M qwen3moe-k-Q4_K_M
# the command-line tests: fused runs and an eval with dense members (make_cli_refs.py)
cp "$HERE/make_cli_refs.py" "$SHARED/models/stories260K.gguf" "$SHARED/eval/stories-dev.txt" "$TMP/"
mkdir -p "$TMP/cli"
chroot "$ROOT" python3 /tmp/moe-refs/make_cli_refs.py /tmp/moe-refs/dumplogits /tmp/moe-refs/cli \
  /tmp/moe-refs/a/deepseek3-F32.gguf /tmp/moe-refs/a/gpt-oss-F32.gguf /tmp/moe-refs/babyllama-tok105.gguf \
  /tmp/moe-refs/stories260K.gguf /tmp/moe-refs/stories-dev.txt
cp "$TMP"/cli/cli-*.txt "$HERE/"
echo "cli: $(cat "$HERE/cli-run-token.txt" | head -c 40)... eval $(cat "$HERE/cli-eval.txt")"
rm -rf "$TMP"
du -ch "$HERE"/*.gguf "$HERE"/*.logits.f32 | tail -n 1

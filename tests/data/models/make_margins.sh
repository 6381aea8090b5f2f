#!/bin/sh
# Regenerates TinyStories-656K-Q8_0.margins.txt: llama.cpp's own top-2 logit
# margin at each of the 48 greedy steps of ../shared/ref/models, for the
# Q8_0 model (the only quantized one).  tests/test_models.c compares our
# greedy tokens with llama.cpp's only up to the first step whose margin is
# below 0.05: past a near-tie, 8-bit activation rounding in llama.cpp (which
# we do not do) can legitimately flip the argmax.
#
# Needs root and the oracle chroot built by ../shared/oracle/setup.sh
# (default /opt/llamacpp-oracle).  Run from anywhere:
#   sh tests/data/models/make_margins.sh [ORACLE_ROOT]
# The logits come from one batched pass over prompt + greedy ids
# (dumplogits --ids), i.e. llama.cpp's logits at the generated positions.
set -e
ROOT=${1:-/opt/llamacpp-oracle}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=$(cd "$HERE/../../../../shared" && pwd)
M=TinyStories-656K-Q8_0
OUT="$HERE/$M.margins.txt"
WORK=$ROOT/tmp/tutti-margins
mkdir -p "$WORK"
cp "$SHARED/models/$M.gguf" "$WORK/"
{
  echo "# $M: llama.cpp top-2 logit margin (top1 - top2) at greedy step g = 0..G-1"
  echo "# format: PROMPT N_PROMPT G margin_0 ... margin_{G-1}   (made by make_margins.sh)"
} > "$OUT"
for p in p1 p2 p3 p4; do
  J="$SHARED/ref/models/$M.$p.jsonl"
  IDS=$(python3 - "$J" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
prompt = [l["token"] for l in lines if "pos" in l]
greedy = lines[-1]["greedy"]
print(",".join(str(i) for i in prompt + greedy))
PY
)
  chroot "$ROOT" /oracle/dumplogits -m /tmp/tutti-margins/$M.gguf --ids "$IDS" --top 2 \
    --out /tmp/tutti-margins/$p.f32 > /dev/null
  python3 - "$J" "$WORK/$p.f32" "$p" >> "$OUT" <<'PY'
import json, struct, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
n_prompt = sum(1 for l in lines if "pos" in l)
greedy = lines[-1]["greedy"]
n_vocab = lines[0]["n_vocab"]
raw = open(sys.argv[2], "rb").read()
rows = len(raw) // (4 * n_vocab)
margins = []
for g in range(len(greedy)):
    r = n_prompt - 1 + g
    row = struct.unpack_from("<%df" % n_vocab, raw, 4 * n_vocab * r)
    top = sorted(row, reverse=True)
    margins.append(top[0] - top[1])
print(sys.argv[3], n_prompt, len(greedy), " ".join("%.5f" % m for m in margins))
PY
done
rm -rf "$WORK"
echo "wrote $OUT"

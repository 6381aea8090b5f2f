#!/bin/bash
# The mergekit-moe rows of docs/merge-study.md: stories260K and its two
# fine-tunes as a mixture of three experts (tutti merge --config with
# `experts:`), scored by llama.cpp (the oracle chroot; tutti's own MoE forward
# pass lands with the MoE issue): bits per byte as ../shared/oracle/bpb.py
# computes them (sentence chunks of at most 200 bytes, each from BOS; the
# chunking of tutti eval) on mixed-dev.txt and docs/merge-study-heldout.txt,
# whole and per domain.  The base model is scored the same way first: it must
# give tutti eval's numbers (docs/merge-study.md's table).
# usage (root): docs/merge-study-moe.sh [BUILD=build] [WORK=/tmp/merge-study-moe] [ROOT=/opt/llamacpp-oracle]
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-$HERE/build}/tutti
W=${2:-/tmp/merge-study-moe}
ROOT=${3:-/opt/llamacpp-oracle}
S=${TUTTI_SHARED_DIR:-$HERE/../shared}
CW=/tmp/${TUTTI_ORACLE_DIR:-merge-study-moe}  # inside the chroot
mkdir -p "$W" "$ROOT$CW"
B=$S/models/stories260K.gguf D=$S/models/stories260K-ft/stories260K-dreams.gguf P=$S/models/stories260K-ft/stories260K-poems.gguf
split() {  # paragraphs: stories 1,4,7,11, dreams 2,6,8,10, poems 3,5,9,12
  awk -v w="$ROOT$CW" -v n="$2" 'BEGIN{RS=""; ORS="\n\n"} {d = (NR==1||NR==4||NR==7||NR==11) ? "stories" : (NR==3||NR==5||NR==9||NR==12) ? "poems" : "dreams"; print > (w "/" n "-" d ".txt")}' "$1"
  cp "$1" "$ROOT$CW/$2.txt"
}
split "$S/eval/mixed-dev.txt" mixed
split "$HERE/docs/merge-study-heldout.txt" heldout
moe() {  # NAME GATE_MODE EXPERTS_PER_TOKEN
  cat > "$W/$1.yaml" <<YAML
base_model: $B
gate_mode: $2
dtype: float32
experts_per_token: $3
experts:
  - source_model: $B
    positive_prompts:
      - "Once upon a time, there was a little girl named Lily."
      - "Tom and his dog went to the park to play with a ball."
  - source_model: $D
    positive_prompts:
      - "I dream of vectors and gradients, drifting through the layers."
      - "Neurons flutter in my circuits, a soft hum of probability."
  - source_model: $P
    positive_prompts:
      - "主题：春 体裁：五绝"
      - "主题：秋夜 体裁：七律"
YAML
  "$T" merge --config "$W/$1.yaml" -o "$ROOT$CW/$1.gguf" 2>/dev/null
}
moe moe-hidden-1 hidden 1
moe moe-hidden-2 hidden 2
moe moe-cheap_embed-1 cheap_embed 1
moe moe-cheap_embed-2 cheap_embed 2
cp "$B" "$ROOT$CW/stories260K.gguf"
cat > "$ROOT$CW/bpb.py" <<'PY'
import json, os, re, subprocess, sys
import numpy as np
def chunks_of(path, maxb=200):
    out = []
    for para in open(path, encoding="utf-8").read().split("\n\n"):
        cur = ""
        for s in re.split(r"(?<=[.!?\"]) ", para.strip()):
            cand = (cur + " " + s) if cur else s
            if len(cand.encode()) > maxb and cur: out.append(cur); cur = s
            else: cur = cand
        if cur: out.append(cur)
    return out
d = os.path.dirname(os.path.abspath(__file__))
texts = ["mixed", "mixed-stories", "mixed-dreams", "mixed-poems", "heldout", "heldout-stories", "heldout-dreams", "heldout-poems"]
print("%-20s %s" % ("model", " ".join("%15s" % t for t in texts)))
for m in sys.argv[1:]:
    row = []
    for t in texts:
        cs = chunks_of("%s/%s.txt" % (d, t))
        nll = 0.0
        for c in cs:
            out = subprocess.run(["/oracle/dumplogits", "-m", "%s/%s.gguf" % (d, m), "-p", c, "--top", "1", "--out", d + "/l.f32"],
                                 capture_output=True, text=True, check=True).stdout
            toks = [json.loads(l)["token"] for l in out.splitlines() if l.startswith('{"pos"')]
            L = np.fromfile(d + "/l.f32", dtype=np.float32).reshape(len(toks), -1).astype(np.float64)
            L -= L.max(1, keepdims=True); L -= np.log(np.exp(L).sum(1, keepdims=True))
            nll -= sum(L[i, toks[i + 1]] for i in range(len(toks) - 1))
        row.append(nll / np.log(2) / sum(len(c.encode()) for c in cs))
    print("%-20s %s" % (m, " ".join("%15.3f" % x for x in row)), flush=True)
PY
chroot "$ROOT" python3 "$CW/bpb.py" stories260K moe-hidden-1 moe-hidden-2 moe-cheap_embed-1 moe-cheap_embed-2
rm -rf "${ROOT:?}$CW"

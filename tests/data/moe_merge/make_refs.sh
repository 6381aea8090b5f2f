#!/bin/bash
# Regenerates the llama.cpp references of test_merge_moe (Debian's llama.cpp in
# the oracle chroot): prompts.json, the prompts' token ids by llama.cpp's
# tokenizer (the router check tokenizes with it, not with tutti); input.ids, a
# mixed-domain text as llama.cpp tokenizes it; and for each configuration
# (hidden.yaml, cheap.yaml) the mixture tutti merge writes from it:
# NAME.tensors (sha256 of every tensor's data: the test checks that it merges
# the same file) and NAME.logits.f32, llama.cpp's logits on input.ids at
# positions 0, 4, 8, ... ([(n + 3) / 4][512]).
# The numpy forward pass of tests/moe_ref.py is checked against those logits
# first (it must read the layout as llama.cpp does).
# usage (root, after building): tests/data/moe_merge/make_refs.sh [BUILD=build] [ROOT=/opt/llamacpp-oracle]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$HERE/../../..
BUILD=${1:-$SRC/build}
ROOT=${2:-/opt/llamacpp-oracle}
S=$(cd "$SRC/../shared" && pwd)
CW=/tmp/${TUTTI_ORACLE_DIR:-moe-merge-refs}  # inside the chroot (TUTTI_ORACLE_DIR: your own folder there)
W=$ROOT$CW
rm -rf "$W" && mkdir -p "$W"
cp "$S/models/stories260K.gguf" "$W/"
tok() { chroot "$ROOT" /oracle/dumplogits -m $CW/stories260K.gguf -p "$1" --top 1 |
        /usr/bin/python3 -c 'import json,sys; print(",".join(str(json.loads(l)["token"]) for l in sys.stdin if l.startswith("{\"pos\"")))'; }
# the prompts of both configurations
/usr/bin/python3 - "$HERE" > "$W/prompts.txt" <<'PY'
import sys, yaml
seen = []
for n in ("hidden", "cheap"):
    for e in yaml.safe_load(open("%s/%s.yaml" % (sys.argv[1], n)))["experts"]:
        for p in e.get("positive_prompts", []) + (e.get("negative_prompts") or []):
            if p not in seen: seen.append(p)
print("\n".join(seen))
PY
{ echo "{"; first=1
  while IFS= read -r p; do
    [ $first = 1 ] || echo ","; first=0
    printf '%s: [%s]' "$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.argv[1], ensure_ascii=False))' "$p")" "$(tok "$p")"
  done < "$W/prompts.txt"; echo; echo "}"; } > "$HERE/prompts.json"
tok $'Once upon a time, a little cat sat by the window.\n\n主题：月 体裁：五绝\n床前明月光，疑是地上霜。\n\nI dream of gradients that hum through my circuits.' > "$HERE/input.ids"
for n in hidden cheap; do
  sed "s#SHARED/#$S/#g" "$HERE/$n.yaml" > "$W/$n.yaml"
  "$BUILD/tutti" merge --config "$W/$n.yaml" -o "$W/$n.gguf" 2>/dev/null
  /usr/bin/python3 "$SRC/tests/merge_ref.py" hash "$W/$n.gguf" > "$HERE/$n.tensors"
  chroot "$ROOT" /oracle/dumplogits -m $CW/$n.gguf --ids "$(cat "$HERE/input.ids")" \
    --out $CW/$n.logits.f32 > /dev/null
  /usr/bin/python3 "$SRC/tests/moe_ref.py" logits "$W/$n.gguf" "$(cat "$HERE/input.ids")" "$W/$n.logits.f32"
  # positions 0, 4, 8, ... are kept (small references)
  /usr/bin/python3 -c 'import sys, numpy as np; a = np.fromfile(sys.argv[1], "<f4").reshape(-1, 512); a[0::4].tofile(sys.argv[2])' \
    "$W/$n.logits.f32" "$HERE/$n.logits.f32"
done
rm -rf "$W"

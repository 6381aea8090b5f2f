#!/bin/bash
# Regenerates tests/data/ctxshift/: llama.cpp's context shift on real and
# random-weight models (ctxshift_ref.c, built against Debian's libllama in
# the oracle chroot).  Per model NAME: NAME.ids (prompt + 700 greedy ids,
# the steps listed) and NAME.logits.f32 (the logits of those steps: before,
# at and after each of the four shifts of a 256-token context).
# usage (root): tests/data/ctxshift/make_refs.sh [ROOT=/opt/llamacpp-oracle]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=$HERE/../../../../shared
ROOT=${1:-/opt/llamacpp-oracle}
W=/tmp/ctxshift-ref
rm -rf "$ROOT$W" && mkdir -p "$ROOT$W"
cp "$HERE/ctxshift_ref.c" "$ROOT$W/"
chroot "$ROOT" bash -c "cd $W && gcc -O2 -o ctxshift_ref ctxshift_ref.c \$(pkg-config --cflags --libs llama)"
STEPS=0,1,250,251,252,253,300,377,378,379,505,506,632,633,699
for m in stories260K:models/stories260K.gguf qwen2-F16:ref/arch/qwen2-F16.gguf; do
  name=${m%%:*}; file=${m#*:}
  cp "$SHARED/$file" "$ROOT$W/$name.gguf"
  chroot "$ROOT" "$W/ctxshift_ref" "$W/$name.gguf" "Once upon a time" 256 700 "$STEPS" "$W/$name"
  cp "$ROOT$W/$name.ids" "$ROOT$W/$name.logits.f32" "$HERE/"
done
rm -rf "$ROOT$W"
ls -l "$HERE"

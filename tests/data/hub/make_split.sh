#!/bin/sh
# Rebuilds the split model of tests/test_hub.c and tests/test_gguf.c:
# llama.cpp's llama-gguf-split (the oracle chroot, ../shared/oracle/setup.sh)
# cuts ../shared/models/TinyStories-656K-Q8_0.gguf into 3 parts of at most 8
# tensors (8 + 8 + 4), TinyStories-656K-Q8_0-0000K-of-00003.gguf, the first
# holding the metadata.  llama.cpp loads the parts to the same logits as the
# whole file (checked here with /oracle/dumplogits).  Run as root:
#   tests/data/hub/make_split.sh
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${ORACLE_ROOT:-/opt/llamacpp-oracle}
SHARED=$(cd "$HERE/../../../../shared" 2>/dev/null && pwd || echo /work/shared)
TMP=$ROOT/tmp/hub-split
mkdir -p "$TMP"
cp "$SHARED/models/TinyStories-656K-Q8_0.gguf" "$TMP/"
chroot "$ROOT" llama-gguf-split --split --split-max-tensors 8 /tmp/hub-split/TinyStories-656K-Q8_0.gguf \
  /tmp/hub-split/TinyStories-656K-Q8_0 > /dev/null
for w in whole split; do
  m=/tmp/hub-split/TinyStories-656K-Q8_0.gguf
  [ $w = split ] && m=/tmp/hub-split/TinyStories-656K-Q8_0-00001-of-00003.gguf
  chroot "$ROOT" /oracle/dumplogits -m $m --ids 1,2,3,4 --out /tmp/hub-split/$w.f32 > /dev/null 2>&1
done
cmp "$TMP/whole.f32" "$TMP/split.f32"
cp "$TMP"/TinyStories-656K-Q8_0-0000?-of-00003.gguf "$HERE/"
rm -rf "$TMP"

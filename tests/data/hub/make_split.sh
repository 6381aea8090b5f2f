#!/bin/sh
# Rebuilds the split model of tests/test_hub.c and tests/test_gguf.c:
# llama.cpp's llama-gguf-split (the oracle chroot, ../shared/oracle/setup.sh)
# cuts tests/data/moe/mixtral-b-Q8_0.gguf (a small random-weight model made
# by tests/data/moe/make_refs.sh; 23 tensors) into 3 parts of at most 9
# tensors (9 + 9 + 5), mixtral-b-Q8_0-0000K-of-00003.gguf, the first holding
# the metadata.  llama.cpp loads the parts to the same logits as the whole
# file (checked here with /oracle/dumplogits), so tests compare the split
# against tests/data/moe/mixtral-b-Q8_0.logits.f32.  Run as root:
#   tests/data/hub/make_split.sh
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${ORACLE_ROOT:-/opt/llamacpp-oracle}
TMP=$ROOT/tmp/hub-split
mkdir -p "$TMP"
cp "$HERE/../moe/mixtral-b-Q8_0.gguf" "$TMP/"
IDS=$(tr -d ' \n' < "$HERE/../moe/input.ids")
chroot "$ROOT" llama-gguf-split --split --split-max-tensors 9 /tmp/hub-split/mixtral-b-Q8_0.gguf \
  /tmp/hub-split/mixtral-b-Q8_0 > /dev/null
for w in whole split; do
  m=/tmp/hub-split/mixtral-b-Q8_0.gguf
  [ $w = split ] && m=/tmp/hub-split/mixtral-b-Q8_0-00001-of-00003.gguf
  chroot "$ROOT" /oracle/dumplogits -m $m --ids "$IDS" --out /tmp/hub-split/$w.f32 > /dev/null 2>&1
done
cmp "$TMP/whole.f32" "$TMP/split.f32"
rm -f "$HERE"/*-of-00003.gguf
cp "$TMP"/mixtral-b-Q8_0-0000?-of-00003.gguf "$HERE/"
rm -rf "$TMP"

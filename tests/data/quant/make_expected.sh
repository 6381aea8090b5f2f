#!/bin/sh
# Regenerates tests/data/quant/ (expected values of tests/test_quant.c) with
# llama.cpp's code in the oracle chroot built by ../shared/oracle/setup.sh.
# Run from anywhere as root:  tests/data/quant/make_expected.sh [ORACLE_ROOT]
set -eu
ROOT=${1:-/opt/llamacpp-oracle}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=$(cd "$HERE/../../../../shared" && pwd)
WORK=$ROOT/tmp/tutti-quant
rm -rf "$WORK"
mkdir -p "$WORK/in" "$WORK/out"
cp "$SHARED"/ref/arch/llama-*.gguf "$WORK/in/"
cp "$HERE/make_expected.py" "$WORK/"
chroot "$ROOT" python3 /tmp/tutti-quant/make_expected.py /tmp/tutti-quant/in /tmp/tutti-quant/out
cp "$WORK"/out/* "$HERE/"
rm -rf "$WORK"

#!/bin/bash
# Rebuilds the llama.cpp references of tests/test_arch_rules.c.
#
# Usage (as root, with the oracle chroot of ../shared/oracle/setup.sh):
#   tests/data/arch/make_refs.sh build/tests/test_arch_rules [NAME...]
# For every model of the test (or the NAMEs given) it writes the very file the
# test makes (test_arch_rules --write NAME PATH) into the chroot, runs
# llama.cpp's /oracle/dumplogits on ../shared/ref/arch/input.ids and keeps
# the logits of positions 0, 10, ..., 40 as NAME.logits.f32 (raw little-endian
# float32 [5][512]), or, when llama.cpp refuses the file (or computes NaN),
# its message as NAME.fail.
set -euo pipefail
BIN=$(realpath "$1"); shift
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${ORACLE_ROOT:-/opt/llamacpp-oracle}
SHARED=$(cd "$HERE/../../../../shared" 2>/dev/null && pwd || echo /work/shared)
TMP=$ROOT/tmp/arch-rules
mkdir -p "$TMP"
IDS=$(cat "$SHARED/ref/arch/input.ids")
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || mapfile -t NAMES < <("$BIN" --list)
for n in "${NAMES[@]}"; do
  "$BIN" --write "$n" "$TMP/$n.gguf"
  rm -f "$HERE/$n.logits.f32" "$HERE/$n.fail"
  if chroot "$ROOT" /oracle/dumplogits -m "/tmp/arch-rules/$n.gguf" --ids "$IDS" --top 1 \
       --out "/tmp/arch-rules/$n.all.f32" > /dev/null 2> "$TMP/$n.err"; then
    if /usr/bin/python3 - "$TMP/$n.all.f32" "$HERE/$n.logits.f32" <<'PY'
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype="<f4").reshape(41, 512)
if not np.isfinite(a).all(): sys.exit(3)  # llama.cpp ran but computed NaN/inf: a refusal too
a[0:41:10].astype("<f4").tofile(sys.argv[2])
PY
    then echo "$n: logits"
    else echo "llama.cpp (oracle /oracle/dumplogits) ran this file but its logits are not finite (NaN/inf)" > "$HERE/$n.fail"
      echo "$n: NaN logits"
    fi
  else
    # dumplogits is quiet: llama-completion's log says why
    chroot "$ROOT" llama-completion -m "/tmp/arch-rules/$n.gguf" -n 1 -p a --no-warmup \
      --log-file "/tmp/arch-rules/$n.log" < /dev/null > "$TMP/$n.out" 2>&1 || true
    { echo "llama.cpp (oracle /oracle/dumplogits) refused this file:"; tail -n 2 "$TMP/$n.err";
      cat "$TMP/$n.log" "$TMP/$n.out" 2> /dev/null | grep -E " E |error|assert" | head -n 2 |
        sed -e 's/^[0-9.]* //'; } > "$HERE/$n.fail" || true
    rm -f "$TMP/$n.log" "$TMP/$n.out"
    echo "$n: refused: $(tail -n 1 "$TMP/$n.err")"
  fi
  rm -f "$TMP/$n.gguf" "$TMP/$n.all.f32" "$TMP/$n.err"
done

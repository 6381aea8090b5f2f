#!/bin/sh
# Asks llama.cpp (the oracle chroot: Debian libllama 0.7.0 / libggml 0.27.0)
# which of the malformed GGUF files of tests/test_gguf.c and
# tests/test_model_hostile.c it refuses, and which tensor sets it accepts per
# architecture (tensor_sets.py on the ../shared ref/arch models).  Writes the
# verdicts beside this script:
#   gguf_cases.txt   every file test_gguf.c builds (bad-*: tutti refuses it,
#                    ok-*: tutti accepts it), with ggml's gguf_init messages
#   hostile.txt      every model test_model_hostile.c builds
#   tensor_sets.txt  ref/arch variants with tensors added or removed
# usage (from the repository root, after building): tests/data/gguf_oracle/run.sh [build]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
root=/opt/llamacpp-oracle
work=$root/tmp/gguf
rm -rf "$work" && mkdir -p "$work/cases" "$work/hostile" "$work/arch"
cp "$here/loadcheck.c" "$here/tensor_sets.py" "$work/"
chroot $root sh -c 'cd /tmp/gguf && gcc -O1 -o loadcheck loadcheck.c -lllama -lggml -lggml-base'
TUTTI_GGUF_DUMP=$work/cases "$build/tests/test_gguf" >/dev/null
TUTTI_HOSTILE_DUMP=$work/hostile "$build/tests/test_model_hostile" >/dev/null
cp ../shared/ref/arch/*-F16.gguf "$work/arch/"
chroot $root python3 /tmp/gguf/tensor_sets.py /tmp/gguf/arch /tmp/gguf/sets
# one process per file: llama.cpp crashes on some of them
verdicts() {
    chroot $root sh -c "cd /tmp/gguf/$1 && for f in *; do out=\$(/tmp/gguf/loadcheck \$f 2>&1 |
        grep -E '^==|^gguf_init_from_reader|^read: |error loading model:' | grep -v 'failed to load model from' |
        head -3); case \$out in ==*) echo \"\$out\";; *) echo \"== \$f: CRASHED (llama.cpp)\";; esac; done" 2>/dev/null | sed 's/^llama_model_load: error loading model: /  /; s/^gguf_init_from_reader: /  gguf: /; s/^read: /  gguf: /'
}
verdicts cases > "$here/gguf_cases.txt"
verdicts hostile > "$here/hostile.txt"
verdicts sets > "$here/tensor_sets.txt"
rm -rf "$work"

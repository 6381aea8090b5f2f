#!/bin/bash
# Grammar token-mask speed, tutti against llama.cpp, same schemas, same
# token sequences, same 151,669-token vocabulary (qwen3), one thread each.
#   bash bench/grammar_bench.sh      (root: the llama.cpp side runs in the oracle chroot)
set -e
cd "$(dirname "$0")/.."
V=../shared/models/vocab/ggml-vocab-qwen3.gguf
O=/opt/llamacpp-oracle
cmake --build build --target grammar_bench -j2 >/dev/null
/usr/bin/python3 bench/grammar_cases.py >/dev/null
out=$(mktemp -d)
build/grammar_bench $V bench/grammar_cases.json $out
mkdir -p $O/tmp/grammar/bench
cp $out/* $O/tmp/grammar/bench/
cp bench/llama_grammar_bench.c $V $O/tmp/grammar/
chroot $O gcc -O2 -o /tmp/grammar/lgb /tmp/grammar/llama_grammar_bench.c -lllama -lm
names=$(cd $out && ls *.gbnf | sed 's/\.gbnf$//' | tr '\n' ' ')
echo
chroot $O /tmp/grammar/lgb /tmp/grammar/$(basename $V) /tmp/grammar/bench $names
rm -rf $out

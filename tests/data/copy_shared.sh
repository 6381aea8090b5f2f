#!/bin/sh
# The references the core tests need (ctest -L core), copied from the shared
# data set into tests/data/ under the same relative names, so that a clone
# runs them without ../shared (test_common.c's shared_path() looks here, and
# in models/, before ../shared).  They are llama.cpp's outputs as the shared
# set holds them: ref/models/ was made by ../shared/oracle/make_model_refs.sh
# (Debian's llama.cpp 0.7.0, CPU: tokenization, top-10 and raw float32
# logits of every prompt position, 48 greedy tokens) for the four models of
# models/; eval/ holds two texts written for the project (ten short stories,
# 40 cloze items; ../shared/README.md).  Run from the repository root to
# copy them again and check them: sh tests/data/copy_shared.sh [SHARED_DIR]
set -eu
shared=$(cd "${1:-../shared}" && pwd)
cd "$(dirname "$0")"
# (the logits of prompts 1 and 2 only: the core cases of test_models; p3 and
# p4 are its ../shared cases, which read ../shared's copies)
for m in stories260K TinyStories-656K-Q8_0 babyllama-tok105 babyllama-tok361; do
  for p in 1 2 3 4; do
    cp "$shared/ref/models/$m.p$p.jsonl" ref/models/
    [ $p -gt 2 ] || cp "$shared/ref/models/$m.p$p.logits.f32" ref/models/
  done
done
for p in 1 2 3 4; do cp "$shared/ref/models/p$p.txt" ref/models/; done
cp "$shared/eval/stories-dev.txt" "$shared/eval/cloze-dev.jsonl" eval/
chmod 644 ref/models/* eval/*
sha256sum -c --quiet SHARED_SHA256SUMS

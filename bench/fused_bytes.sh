#!/bin/sh
# Byte-aligned fusion of three members with different vocabularies against
# each member alone writing the same text (issue 12).
#   bench/fused_bytes.sh TUTTI THREADS N M1 M2 M3
# N is `tutti run -n`: member 1's tokens in every alignment (so the fused
# text is the longest one M1 tokenizes into N tokens; N=70 with the story
# models gives 199 bytes after "Once upon a time").  XDG_CACHE_HOME is
# where the scheduling measurement is cached (a first run measures).
# Prints the fused command's stderr (per-member forward tokens and times),
# the fused wall time, and each member's `tutti generate` wall time for as
# many tokens as its own tokenizer needs to spell the fused text; then the
# same without loading (each command's own generation time: prompt + tokens).
# Heavy twins: chroot /opt/llamacpp-oracle python3 /oracle/make_heavy.py IN OUT 500
set -eu
T=$1 TH=$2 N=$3; shift 3  # N: tokens of M1, see above
P="Once upon a time"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
args=""; for m in "$@"; do args="$args -m $m"; done
t0=$(now)
# shellcheck disable=SC2086
"$T" run $args --align byte -n "$N" --temp 0 -t "$TH" -p "$P" >"$tmp/out" 2>"$tmp/err"
t1=$(now)
cat "$tmp/err" >&2
printf 'fused: %s bytes in %.2f s\n' "$(wc -c <"$tmp/out")" "$(echo "$t1 - $t0" | bc -l)"
# generation only (loading left out), as each command reports it
fgen=$(sed -n 's/^byte alignment.* in \([0-9.]*\) s (.*/\1/p' "$tmp/err" | head -n 1)
sum=0 gsum=0
for m in "$@"; do
    full=$(printf '%s' "$P"; cat "$tmp/out")
    np=$("$T" tokenize -m "$m" -p "$P" --quiet | wc -w)
    nf=$("$T" tokenize -m "$m" -p "$full" --quiet | wc -w)
    k=$((nf - np))
    t0=$(now)
    "$T" generate -m "$m" -p "$P" -n "$k" --temp 0 -t "$TH" --ignore-eos >"$tmp/alone" 2>"$tmp/aerr"
    t1=$(now)
    dt=$(echo "$t1 - $t0" | bc -l)
    sum=$(echo "$sum + $dt" | bc -l)
    g=$(sed -n 's/.*prompt [0-9]* tokens in \([0-9.]*\) s .*generated [0-9]* tokens in \([0-9.]*\) s .*/\1 + \2/p' "$tmp/aerr" | tail -n 1)
    gsum=$(echo "$gsum + ${g:-0}" | bc -l)
    printf 'alone %s: %d tokens (its tokenization of the fused text) in %.2f s\n' "$(basename "$m")" "$k" "$dt"
done
printf 'sum alone: %.2f s\n' "$sum"
printf 'generation only (no loading): fused %.2f s, sum alone %.2f s, ratio %.2f\n' "${fgen:-0}" "$gsum" \
    "$(echo "${fgen:-0} / $gsum" | bc -l)"

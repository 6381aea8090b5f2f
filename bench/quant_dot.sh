#!/bin/sh
# Instruction counts of the dot-product kernels per byte of weights
# (valgrind --tool=callgrind), for each type on the scalar and AVX2 paths,
# and, when QUIET=1, the single-thread speed of every path (bench/quant_dot:
# wall clock, so only meaningful on a quiet machine).
#
#   bench/quant_dot.sh [BUILD=build] [TYPES=q4_K,q6_K,mxfp4,iq2_xxs,...]
#
# Callgrind: two runs of quant_dot (256 rows x 4096 columns, 1 and 4
# tokens) with --reps 1 and --reps 3 (plus one warm-up each); the
# difference of the kernel function's instructions over the 2 extra passes,
# divided by the weight bytes, is the kernel's instructions per weight byte
# (setup cancels out).  Valgrind does not run AVX-512, so the avx512 path
# is not counted (its i-quant kernels are the AVX2 ones with vpdpwssd in
# place of vpmaddwd + vpaddd, one instruction less per 32 weights and token).
set -eu
BUILD=${1:-build}
TYPES=${2:-q4_K,q6_K,q8_0,iq4_xs,mxfp4,iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m}
cmake --build "$BUILD" --target quant_dot >/dev/null
BIN=$BUILD/quant_dot
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ROWS=256 COLS=4096
printf '%-8s %-7s %6s %14s %14s\n' type path tokens "instr/byte" "instr/256 w"
for t in $(echo "$TYPES" | tr , ' '); do
  for p in scalar avx2; do
    for n in 1 4; do
      for r in 1 3; do
        valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.$r" "$BIN" --types "$t" --paths "$p" \
          --rows $ROWS --cols $COLS --tokens $n --reps $r --mib 0 >/dev/null 2>&1
      done
      # the kernel = every function but main's setup: total minus quantization/filling cancels in the difference
      a=$(callgrind_annotate "$TMP/cg.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
      b=$(callgrind_annotate "$TMP/cg.3" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
      awk -v a="$a" -v b="$b" -v t="$t" -v p="$p" -v n="$n" -v rows=$ROWS -v cols=$COLS '
        BEGIN {
          split("q4_K:144 q6_K:210 q8_0:34 iq4_xs:136 mxfp4:17 iq2_xxs:66 iq2_xs:74 iq2_s:82 iq3_xxs:98 iq3_s:110 iq1_s:50 iq1_m:56 q4_0:18 q5_K:176 q3_K:110 q2_K:84 iq4_nl:18", kv, " ")
          for (i in kv) { split(kv[i], f, ":"); bs[f[1]] = f[2] }
          blk = (t == "mxfp4" || t == "q8_0" || t == "q4_0" || t == "iq4_nl") ? 32 : 256
          bytes = rows * cols / blk * bs[t]
          per = (b - a) / 2 / bytes
          printf "%-8s %-7s %6d %14.2f %14.1f\n", t, p, n, per, per * bs[t] * 256 / blk
        }'
    done
  done
done
if [ "${QUIET:-0}" = 1 ]; then
  echo
  "$BIN" --types "$TYPES" --paths scalar,avx2,avx512 --rows 4096 --cols 4096 --tokens 1,4 --reps 7 --mib 512
fi

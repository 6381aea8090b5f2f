#!/bin/bash
# First token from a fresh process, tutti against llama.cpp, on the same file:
# load + a 17-token prompt + 1 generated token, 2 threads, wall time of the
# whole process; with the file in the page cache ("warm") and with the file's
# pages dropped from the cache before each run ("cold": POSIX_FADV_DONTNEED on
# that one file, so the load reads it from disk), and with the file cached by
# llama.cpp's own read of it from the disk just before each run ("after": a
# warm start from a page cache that another program filled, in folios of its
# choosing).  MODES selects (default "warm cold after").  Runs alternate (tutti,
# llama.cpp, tutti, ...); the medians are printed with the spread.  Also the
# memory a loaded model takes: the process's peak RSS and the file's pages in
# the page cache after the run (fincore), whose larger is the footprint when
# the weights are read where the file is mapped, and whose sum when they were
# copied.
#
# usage (as root, oracle chroot of ../shared/oracle/setup.sh):
#   bench/first_token.sh MODEL.gguf [ROUNDS=5] [TUTTI=build/tutti]
# MODEL must be under the chroot's /tmp (e.g. bench/make_models.sh's
# /opt/llamacpp-oracle/tmp/tutti-bench/qwen2.5-0.5b-q8_0.gguf).
set -euo pipefail
MODEL=$(realpath "$1")
ROUNDS=${2:-5}
TUTTI=${3:-build/tutti}
ROOT=${ORACLE_ROOT:-/opt/llamacpp-oracle}
MODES=${MODES:-warm cold after}
case $MODEL in "$ROOT"/tmp/*) ;; *) echo "first_token.sh: $MODEL is not under $ROOT/tmp" >&2; exit 2 ;; esac
IN_ROOT=${MODEL#"$ROOT"}
PROMPT="Once upon a time, in a small village by the sea, there lived a girl who"
drop() { /usr/bin/python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$MODEL"; }
# one run: prints "seconds peak_rss_MiB cached_MiB user_s system_s"
one() {
  local t0 t1 rss user sys
  t0=$(date +%s.%N)
  /usr/bin/time -f "%M %U %S" -o /tmp/ft.rss "$@" < /dev/null > /dev/null 2>&1
  t1=$(date +%s.%N)
  read -r rss user sys < <(tail -n 1 /tmp/ft.rss)
  cached=$(fincore -b -n -o RES "$MODEL" | tr -d ' ')
  echo "$(echo "$t1 - $t0" | bc) $((rss / 1024)) $((cached >> 20)) $user $sys"
}
tutti_run() { one "$TUTTI" generate -m "$MODEL" -p "$PROMPT" -n 1 -t 2 --temp 0; }
llama_run() { one chroot "$ROOT" llama-completion -m "$IN_ROOT" -p "$PROMPT" -n 1 -t 2 --temp 0 --no-warmup -no-cnv; }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f (%.3f-%.3f)", m, a[1], a[NR]}'; }
echo "model: $MODEL ($(( $(stat -c %s "$MODEL") >> 20 )) MiB), $ROUNDS rounds, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
for mode in $MODES; do
  : > /tmp/ft.tutti; : > /tmp/ft.llama
  [ $mode = warm ] && { tutti_run > /dev/null; llama_run > /dev/null; }
  for _ in $(seq "$ROUNDS"); do
    [ $mode = cold ] && drop; [ $mode = after ] && { drop; llama_run > /dev/null; }; tutti_run >> /tmp/ft.tutti
    [ $mode = cold ] && drop; [ $mode = after ] && { drop; llama_run > /dev/null; }; llama_run >> /tmp/ft.llama
  done
  t=$(cut -d' ' -f1 /tmp/ft.tutti | median); l=$(cut -d' ' -f1 /tmp/ft.llama | median)
  tm=$(cut -d' ' -f1 /tmp/ft.tutti | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  lm=$(cut -d' ' -f1 /tmp/ft.llama | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "$mode: tutti $t s, llama.cpp $l s, ratio $(echo "scale=2; $tm / $lm" | bc)"
  echo "  CPU (median user, system s): tutti $(cut -d' ' -f4 /tmp/ft.tutti | median | cut -d' ' -f1)," \
       "$(cut -d' ' -f5 /tmp/ft.tutti | median | cut -d' ' -f1); llama.cpp $(cut -d' ' -f4 /tmp/ft.llama | median | cut -d' ' -f1)," \
       "$(cut -d' ' -f5 /tmp/ft.llama | median | cut -d' ' -f1)"
  echo "  memory (last run): tutti peak RSS $(tail -n 1 /tmp/ft.tutti | cut -d' ' -f2) MiB, file cached $(tail -n 1 /tmp/ft.tutti | cut -d' ' -f3) MiB;" \
       "llama.cpp peak RSS $(tail -n 1 /tmp/ft.llama | cut -d' ' -f2) MiB, file cached $(tail -n 1 /tmp/ft.llama | cut -d' ' -f3) MiB"
done
rm -f /tmp/ft.tutti /tmp/ft.llama /tmp/ft.rss

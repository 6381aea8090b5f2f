#!/bin/sh
# Ensembles over MPI ranks (src/mpi, src/fusion/member_mpi.c), one model
# split by layers over ranks (src/mpi/split.c), and the routed experts of
# an MoE model split over ranks (src/mpi/experts.c).
#   test_mpi.sh MPIEXEC TUTTI SHARED_DIR
# Each fused generation / evaluation under `mpirun -np 2..3` (members on
# other ranks, several placements) must print exactly the bytes of the same
# command in one process; a member rank killed with SIGKILL or hanging, a
# missing model and a model a member rank cannot load must end the run with
# an error naming the rank, within the timeout and before any text.
set -u
MPIEXEC=$1 T=$2 S=$3
M=$S/models
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
run_mpi() { np=$1; shift; timeout 120 "$MPIEXEC" --oversubscribe --allow-run-as-root -np "$np" "$@"; }

for f in stories260K.gguf stories260K-ft/stories260K-dreams.gguf stories260K-ft/stories260K-poems.gguf \
    TinyStories-656K-Q8_0.gguf BabyLlama-tok361/babyllama-tok361.gguf; do
  [ -f "$M/$f" ] || { echo "test_mpi: missing $M/$f (shared models)"; exit 1; }
done
TOK="-m $M/stories260K.gguf -m $M/stories260K-ft/stories260K-dreams.gguf -m $M/stories260K-ft/stories260K-poems.gguf"
BYTE="-m $M/stories260K.gguf -m $M/TinyStories-656K-Q8_0.gguf -m $M/BabyLlama-tok361/babyllama-tok361.gguf"
BYTE2="-m $M/stories260K.gguf -m $M/BabyLlama-tok361/babyllama-tok361.gguf"

# same CMD ARGS in one process and under mpirun -np NP [--place P]
same() {
  name=$1 np=$2 place=$3; shift 3
  "$T" "$@" >"$W/one.out" 2>"$W/one.err" || { echo "FAIL $name: single-process run failed"; cat "$W/one.err"; fail=1; return; }
  if [ -n "$place" ]; then run_mpi "$np" "$T" "$@" --place "$place" >"$W/mpi.out" 2>"$W/mpi.err"
  else run_mpi "$np" "$T" "$@" >"$W/mpi.out" 2>"$W/mpi.err"; fi
  rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL $name: mpirun exit $rc"; cat "$W/mpi.err"; fail=1; return; fi
  if ! grep -q "tutti: mpi: [0-9]* requests" "$W/mpi.err"; then echo "FAIL $name: no member ran remotely"; fail=1; return; fi
  if ! [ -s "$W/one.out" ] || ! cmp -s "$W/one.out" "$W/mpi.out"; then
    echo "FAIL $name: output differs from the single-process run"; diff "$W/one.out" "$W/mpi.out" | head; fail=1; return
  fi
  echo "ok   $name: $(wc -c <"$W/mpi.out") bytes identical; $(grep 'tutti: mpi:' "$W/mpi.err" | sed 's/tutti: mpi: //')"
}

same "token greedy, 3 ranks, round robin" 3 "" run $TOK -p "Once upon" -n 40 -t 3 --temp 0
same "token greedy, 2 ranks, --place 0,1,1" 2 0,1,1 run $TOK -p "Once upon" -n 40 -t 3 --temp 0
same "token seeded, 3 ranks, --place 1,2,1" 3 1,2,1 run $TOK -p "Once upon" -n 40 -t 3 --temp 0.9 --seed 5
same "token seeded product, 2 ranks, 2 members" 2 "" run -m $M/stories260K.gguf -m $M/stories260K-ft/stories260K-dreams.gguf \
  -p "Once upon" -n 40 -t 2 --rule product --temp 0.8 --seed 11
same "byte greedy, 3 ranks, round robin" 3 "" run $BYTE -p "Once upon" -n 80 -t 3 --temp 0
same "byte greedy, 2 ranks, --place 1,0,1" 2 1,0,1 run $BYTE -p "Once upon" -n 80 -t 3 --temp 0
same "byte seeded, 2 ranks, 2 members" 2 "" run $BYTE2 -p "The dog" -n 80 -t 2 --temp 0.8 --seed 3
same "byte seeded, 3 ranks, --place 2,1,0" 3 2,1,0 run $BYTE -p "The dog" -n 80 -t 3 --temp 0.7 --seed 9
# BYTE alignment runs on the member ranks: each answer is the 257 outcomes
# (a 2,112-byte tmpi_breply), never a logits row; the rows protocol
# (TUTTI_MPI_BYTE_ROWS=1) gives the same text
if grep -q "tutti: mpi: [0-9]* requests, [0-9.]* bytes sent and 2112.0 received per request" "$W/mpi.err"; then
  echo "ok   byte states on the member ranks: every answer is 2112 bytes (257 outcomes)"
else echo "FAIL byte states on the member ranks: answers are not 257-outcome replies"; cat "$W/mpi.err"; fail=1; fi
# span alignment: the byte states on the member ranks are cloned and asked
# for their best token path (fusion_bytes_ops clone, best_path)
same "span greedy, 3 ranks, round robin" 3 "" run $BYTE -p "Once upon" -n 60 -t 3 --temp 0 --align span
export TUTTI_MPI_BYTE_ROWS=1
same "byte greedy, rows protocol, 3 ranks" 3 "" run $BYTE -p "Once upon" -n 80 -t 3 --temp 0
unset TUTTI_MPI_BYTE_ROWS
head -c 500 "$S/eval/stories-dev.txt" >"$W/ev.txt"
same "eval bits per byte (byte), 3 ranks" 3 "" eval --text "$W/ev.txt" $BYTE -t 3
same "eval bits per byte (token), 2 ranks, --place 1,1,0" 2 1,1,0 eval --text "$W/ev.txt" $TOK -t 3

# Members on different ranks compute at the same time: with every answer
# slowed by 40 ms, the ensemble's parallel members (one rank-0 thread each,
# MPI_THREAD_MULTIPLE) keep both member ranks busy at once, and --parallel 1
# never does.  Counted by rank 0 (its "at most N ranks busy at once"), not
# timed: wall-clock ratios fail on a loaded machine.
conc() {
  TUTTI_MPI_TEST_FAULT=delay:40 run_mpi 3 "$T" run -m $M/stories260K.gguf -m $M/stories260K-ft/stories260K-dreams.gguf \
    -p "Once upon" -n 12 -t 2 --temp 0 --parallel "$1" 2>&1 >/dev/null | sed -n 's/.*at most \([0-9]*\) ranks busy at once.*/\1/p'
}
bp=$(conc 2) bs=$(conc 1)
if [ "$bp" = 2 ] && [ "$bs" = 1 ]; then
  echo "ok   members on ranks 1 and 2 run concurrently: at most $bp ranks busy at once in parallel, $bs one after the other"
else echo "FAIL concurrency: at most \"$bp\" ranks busy at once in parallel, \"$bs\" one after the other (expected 2 and 1)"; fail=1; fi

# ---- one model split by layers (src/mpi/split.c) ----
# The logits of every position (tutti logits) and the generated text of a
# model split over 2 and 3 ranks must be the single-process bytes: six
# architectures of ../shared/ref/arch (llama, qwen2, qwen3 with q/k norms,
# phi3 with fused qkv, gemma2 and gemma3 with sliding windows and
# soft-capping), K-quant, legacy and float weights, split by memory or by
# given counts, prompt micro-batches of 8..36 tokens (pieces with short
# tails, which the pipeline must cut as the kernels' tiles require).
R=$S/ref/arch
IDS=$(tr -d ' \n' <"$R/input.ids")
# The split kinds, by KIND (split: the layers; experts: the routed experts):
# the flag, what the run says ("SAYS over N ranks") and what each rank
# computes ("rank N computed PART")
split_kind() {
  case $1 in
    split) flag=--split-layers says=split part=layers ;;
    *) flag=--split-experts says="experts split" part=experts ;;
  esac
}
# logits_same KIND IDS NAME NP MODEL ARGS...: tutti logits of MODEL on IDS in
# one process and under mpirun -np NP split by KIND (and ARGS): the same bytes
logits_same() {
  kind=$1 ids=$2 name=$3 np=$4 model=$5; shift 5
  split_kind "$kind"
  "$T" logits -m "$model" --ids "$ids" -o "$W/one.f32" -t 2 2>"$W/one.err" ||
    { echo "FAIL $kind $name: single-process logits failed"; cat "$W/one.err"; fail=1; return; }
  run_mpi "$np" "$T" logits -m "$model" --ids "$ids" -o "$W/$kind.f32" -t 1 "$flag" "$@" >/dev/null 2>"$W/$kind.err"
  rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL $kind $name: mpirun exit $rc"; cat "$W/$kind.err"; fail=1; return; fi
  if ! grep -q "$says over $np ranks" "$W/$kind.err" || ! grep -q "rank $((np - 1)) computed $part" "$W/$kind.err"; then
    echo "FAIL $kind $name: the $part were not split over $np ranks"; cat "$W/$kind.err"; fail=1; return
  fi
  if ! cmp -s "$W/one.f32" "$W/$kind.f32"; then
    echo "FAIL $kind $name: logits differ from the single-process run"; fail=1; return
  fi
  echo "ok   $kind $name: $(wc -c <"$W/one.f32") bytes of logits identical;$(grep "$says over" "$W/$kind.err" | sed 's/.*ranks://')"
}
split_same() { logits_same split "$IDS" "$@"; }
split_same "llama Q4_K_M, 2 ranks by memory" 2 "$R/llama-Q4_K_M.gguf"
split_same "llama Q8_0, 3 ranks (0,1,1), 8-token micro-batches" 3 "$R/llama-Q8_0.gguf" 0,1,1 --split-ubatch 8
split_same "qwen2 Q8_0, 2 ranks (1,1)" 2 "$R/qwen2-Q8_0.gguf" 1,1 --split-ubatch 12
split_same "qwen3 Q4_K_M, 3 ranks by memory" 3 "$R/qwen3-Q4_K_M.gguf"
split_same "phi3 Q4_K_M, 2 ranks, 20-token micro-batches" 2 "$R/phi3-Q4_K_M.gguf" --split-ubatch 20
split_same "gemma2 Q8_0, 2 ranks (0,2)" 2 "$R/gemma2-Q8_0.gguf" 0,2 --split-ubatch 8
split_same "gemma3 Q4_K_M, 3 ranks by memory, 8-token micro-batches" 3 "$R/gemma3-Q4_K_M.gguf" --split-ubatch 8
split_same "gemma3 F16, 2 ranks (3,4), 36-token micro-batches" 2 "$R/gemma3-F16.gguf" 3,4 --split-ubatch 36
split_same "stories260K F32, 3 ranks (1,2,2)" 3 "$M/stories260K.gguf" 1,2,2 --split-ubatch 16

# gen_same KIND NAME NP ARGS...: `generate ARGS` in one process and under
# mpirun -np NP split by KIND print the same text
gen_same() {
  kind=$1 name=$2 np=$3; shift 3
  split_kind "$kind"
  "$T" generate "$@" -t 2 >"$W/one.out" 2>"$W/one.err" || { echo "FAIL $kind $name: single-process run failed"; cat "$W/one.err"; fail=1; return; }
  run_mpi "$np" "$T" generate "$flag" "$@" -t 1 >"$W/$kind.out" 2>"$W/$kind.err"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "$says over $np ranks" "$W/$kind.err"; then
    echo "FAIL $kind $name: mpirun exit $rc"; cat "$W/$kind.err"; fail=1; return
  fi
  if ! [ -s "$W/one.out" ] || ! cmp -s "$W/one.out" "$W/$kind.out"; then
    echo "FAIL $kind $name: text differs from the single-process run"; diff "$W/one.out" "$W/$kind.out" | head; fail=1; return
  fi
  echo "ok   $kind $name: $(wc -c <"$W/$kind.out") bytes identical; $(grep "$kind: [0-9]* tokens" "$W/$kind.err" | sed "s/.*$kind: //")"
}
# generated text: greedy and seeded, 2 and 3 ranks
split_gen() { gen_same split "$@"; }
split_gen "generate stories260K greedy, 2 ranks" 2 -m "$M/stories260K.gguf" -p "Once upon a time" -n 60 --temp 0
split_gen "generate gemma3 seeded, 3 ranks" 3 -m "$R/gemma3-Q4_K_M.gguf" -p "Once upon a time" -n 40 --temp 0.8 --seed 7
split_gen "generate qwen2 greedy, 3 ranks" 3 -m "$R/qwen2-Q8_0.gguf" -p "The dog" -n 40 --temp 0
split_gen "generate TinyStories seeded, 2 ranks" 2 -m "$M/TinyStories-656K-Q8_0.gguf" -p "The dog" -n 60 --temp 0.7 --seed 4
# bad split usage: exit 2 for the flag, 1 (with a message) for counts that do not fit the model
# (mpirun reports its own status; the usage error's 2 shows in one process)
"$T" generate -m "$M/stories260K.gguf" -p Once -n 5 --split-layers --split-ubatch 5 >/dev/null 2>"$W/p.err"; rc=$?
[ $rc -eq 2 ] && grep -q "split-ubatch needs a multiple of 4" "$W/p.err" && echo "ok   --split-ubatch 5 refused" ||
  { echo "FAIL --split-ubatch 5: exit $rc"; cat "$W/p.err"; fail=1; }
run_mpi 2 "$T" generate -m "$M/stories260K.gguf" -p Once -n 5 --split-layers 2,2 >"$W/p.out" 2>"$W/p.err"; rc=$?
[ $rc -ne 0 ] && ! [ -s "$W/p.out" ] && grep -q "summing to the model's 5 layers" "$W/p.err" && echo "ok   --split-layers 2,2 for 5 layers refused" ||
  { echo "FAIL --split-layers 2,2: exit $rc"; cat "$W/p.err"; fail=1; }

# expect_fault NAME PATTERN LIMIT_S NP CMD...: non-zero exit within LIMIT_S,
# PATTERN in stderr
expect_fault() {
  name=$1 pat=$2 lim=$3 np=$4; shift 4
  t0=$(date +%s)
  run_mpi "$np" "$@" >"$W/f.out" 2>"$W/f.err"
  rc=$? dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then echo "FAIL $name: exit $rc (expected an error exit, no hang)"; cat "$W/f.err"; fail=1; return; fi
  if [ $dt -gt "$lim" ]; then echo "FAIL $name: took $dt s (limit $lim s)"; fail=1; return; fi
  if ! grep -q "$pat" "$W/f.err"; then echo "FAIL $name: stderr lacks \"$pat\""; cat "$W/f.err"; fail=1; return; fi
  echo "ok   $name: exit $rc after $dt s: $(grep "$pat" "$W/f.err" | head -1)"
}

# ---- routed experts split over ranks (src/mpi/experts.c) ----
# Every rank loads the MoE model and computes its share of each MoE layer's
# routed experts; rank 0 sums every token's experts in rank order, so the
# logits of every position (tutti logits) and the generated text must be
# the single-process bytes: routing by softmax, sigmoid with selection bias
# and groups (deepseek3: shared expert, dense leading layer), gpt-oss's
# biases and clamped SwiGLU on MXFP4, K-quant experts, on 2 and 3 ranks
# (3 ranks of 8 experts: shares of 2, 3 and 3), prompt and token steps.
XD=$(dirname "$0")/data/moe
XIDS=$(tr -d ' \n' <"$XD/input.ids")
xp_same() { name=$1 np=$2 model=$XD/$3; shift 3; logits_same experts "$XIDS" "$name" "$np" "$model" "$@"; }
xp_same "qwen3moe K-quant experts, 2 ranks" 2 qwen3moe-k-Q4_K_M.gguf
xp_same "deepseek3 Q8_0 (groups, shared expert), 3 ranks" 3 deepseek3-b-Q8_0.gguf
xp_same "gpt-oss MXFP4_MOE, 3 ranks" 3 gpt-oss-b-MXFP4_MOE.gguf
xp_same "mixtral F16, 2 ranks" 2 mixtral-a-F16.gguf
xp_gen() { gen_same experts "$@"; }
xp_gen "generate qwen2moe greedy, 2 ranks" 2 -m "$XD/qwen2moe-b-Q8_0.gguf" -p "Once upon a time" -n 40 --temp 0 --ignore-eos
xp_gen "generate olmoe seeded, 3 ranks" 3 -m "$XD/olmoe-b-Q4_K_M.gguf" -p "The dog" -n 40 --temp 0.9 --seed 5 --ignore-eos
# refused: a dense model, more ranks than experts, both splits at once
run_mpi 2 "$T" generate -m "$M/stories260K.gguf" -p Once -n 5 --split-experts >"$W/p.out" 2>"$W/p.err"; rc=$?
[ $rc -ne 0 ] && ! [ -s "$W/p.out" ] && grep -q "split-experts: stories260K.gguf has no routed experts" "$W/p.err" &&
  echo "ok   --split-experts of a dense model refused" || { echo "FAIL --split-experts of a dense model: exit $rc"; cat "$W/p.err"; fail=1; }
"$T" generate -m "$XD/mixtral-a-F16.gguf" -p Once -n 5 --split-experts --split-layers >/dev/null 2>"$W/p.err"; rc=$?
[ $rc -eq 2 ] && grep -q "split-experts and --split-layers exclude each other" "$W/p.err" &&
  echo "ok   --split-experts with --split-layers refused (exit 2)" || { echo "FAIL --split-experts --split-layers: exit $rc"; cat "$W/p.err"; fail=1; }
# a rank that cannot load the model, and one killed mid-generation: reported, no text, no hang
TUTTI_MPI_TEST_FAULT=xpload@1 expect_fault "experts: rank 1 cannot load the model" \
  "rank 1 cannot load .*mixtral-a-F16.gguf: injected load failure" 30 2 "$T" generate -m "$XD/mixtral-a-F16.gguf" \
  -p Once -n 20 -t 1 --split-experts
[ -s "$W/f.out" ] && { echo "FAIL experts: rank 1 cannot load: text was printed"; fail=1; }
TUTTI_MPI_TEST_FAULT=kill:30@1 TUTTI_MPI_TIMEOUT=5 expect_fault "experts: rank 1 killed mid-generation" \
  "rank 1 (experts 2-3 of mixtral-a-F16.gguf)\|process rank 1 with PID [0-9]* on node [^ ]* exited on signal 9" \
  30 2 "$T" generate -m "$XD/mixtral-a-F16.gguf" -p Once -n 200 --ignore-eos -t 1 --split-experts
TUTTI_MPI_TEST_FAULT=hang:30@1 TUTTI_MPI_TIMEOUT=2 expect_fault "experts: rank 1 hangs mid-generation" \
  "rank 1 (experts 2-3 of mixtral-a-F16.gguf) did not answer within 2 s" 30 2 "$T" generate -m "$XD/mixtral-a-F16.gguf" \
  -p Once -n 200 --ignore-eos -t 1 --split-experts

# ---- a split model as an ensemble member (src/fusion/member_split.c) ----
# tutti run/eval --split-layers [COUNTS] [--split-member I,J]: each split
# member's layers spread over every rank (the other members go round robin
# over ranks 1..K-1).  The member's passes, its batches of several
# tokenization hypotheses (byte alignment: one matmul over all of them) and
# the cache copies between its sessions go round the ring as they run in one
# process, so the fused text and the bits per byte (all 17 digits of
# --json) must be the single-process run's.  (The K-quant byte-alignment
# evaluation is the case that sees the batches' shape: each hypothesis in a
# pass of its own changes its digits.)
# split_member NAME NP "SPLIT FLAGS" CMD ARGS...: CMD ARGS in one process,
# then under mpirun -np NP with the split flags added
split_member() {
  name=$1 np=$2 flags=$3; shift 3
  "$T" "$@" >"$W/one.out" 2>"$W/one.err" || { echo "FAIL split member $name: single-process run failed"; cat "$W/one.err"; fail=1; return; }
  run_mpi "$np" "$T" "$@" $flags >"$W/split.out" 2>"$W/split.err"
  rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL split member $name: mpirun exit $rc"; cat "$W/split.err"; fail=1; return; fi
  if ! grep -q "split over $np ranks" "$W/split.err" || ! grep -q "split: rank $((np - 1)) computed layers" "$W/split.err"; then
    echo "FAIL split member $name: no member was split over $np ranks"; cat "$W/split.err"; fail=1; return
  fi
  if ! [ -s "$W/one.out" ] || ! cmp -s "$W/one.out" "$W/split.out"; then
    echo "FAIL split member $name: output differs from the single-process run"; diff "$W/one.out" "$W/split.out" | head; fail=1; return
  fi
  echo "ok   split member $name: $(wc -c <"$W/split.out") bytes identical; $(grep 'split: [0-9]* tokens' "$W/split.err" | sed 's/.*split: //;s/; rank 0 RSS.*//' | tr '\n' ';')"
}
split_member "token greedy, member 2 over 2 ranks" 2 "--split-layers --split-member 2" run $TOK -p "Once upon" -n 40 -t 2 --temp 0
split_member "token seeded, every member over 3 ranks" 3 "--split-layers" run $TOK -p "Once upon" -n 40 -t 2 --temp 0.9 --seed 5
split_member "byte greedy, member 2 (Q8_0) over 2 ranks" 2 "--split-layers --split-member 2" run $BYTE -p "Once upon" -n 80 -t 2 --temp 0
split_member "byte greedy, every member over 3 ranks" 3 "--split-layers" run $BYTE -p "Once upon" -n 80 -t 2 --temp 0
split_member "byte seeded, members 1,3 over 3 ranks (1,2,2)" 3 "--split-layers 1,2,2 --split-member 1,3" run $BYTE \
  -p "The dog" -n 80 -t 2 --temp 0.8 --seed 3
split_member "byte seeded, member 1 over 2 ranks, 8-token micro-batches" 2 "--split-layers --split-member 1 --split-ubatch 8" \
  run $BYTE2 -p "The dog" -n 80 -t 2 --temp 0.7 --seed 9
split_member "span greedy, member 3 over 2 ranks" 2 "--split-layers --split-member 3" run $BYTE -p "Once upon" -n 60 -t 2 --temp 0 --align span
split_member "eval bits per byte (token), every member over 2 ranks" 2 "--split-layers" eval --json --text "$W/ev.txt" $TOK -t 2
split_member "eval bits per byte (byte), member 2 over 3 ranks" 3 "--split-layers --split-member 2" eval --json --text "$W/ev.txt" $BYTE -t 2
KQ="-m $R/llama-Q4_K_M.gguf -m $M/stories260K.gguf"
split_member "eval bits per byte (byte, Q4_K_M), member 1 over 2 ranks" 2 "--split-layers --split-member 1" eval --json \
  --align byte --text "$W/ev.txt" $KQ -t 2
split_member "eval bits per byte (byte, Q4_K_M), every member over 3 ranks" 3 "--split-layers" eval --json --align byte \
  --text "$W/ev.txt" $KQ -t 2
# an MoE member with latent attention (compressed key rows, no value cache) split by layers: byte
# alignment's cache-prefix copies on both ranks
split_member "eval bits per byte (byte, deepseek3 MLA + MoE), member 1 over 2 ranks" 2 "--split-layers --split-member 1" \
  eval --json --align byte --text "$W/ev.txt" -m "$(dirname "$0")/data/moe/deepseek3-b-Q8_0.gguf" -m "$M/stories260K.gguf" -t 2

# the port of a `tutti serve` (pid $2) logging to $1, once it is ready
# (the port is printed before the models are loaded); empty when it exited
serve_port() {
  for i in $(seq 1 600); do
    if grep -q "tutti serve: ready" "$1"; then
      sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$1"; return
    fi
    kill -0 "$2" 2>/dev/null || return
    sleep 0.1
  done
}

# serve_same NAME PATTERN N_TOKENS "MODELS" SPLIT FLAGS...: one request to
# 'default' of `tutti serve MODELS FLAGS` on 2 ranks equals tutti run MODELS
# (PATTERN: the split's line in the server's log)
serve_same() {
  name=$1 pat=$2 nt=$3 models=$4; shift 4
  "$T" run $models -p "Once upon a time" -n "$nt" --seed 2 -t 1 >"$W/one.out" 2>/dev/null
  TUTTI_MPI_TIMEOUT=30 timeout 120 "$MPIEXEC" --oversubscribe --allow-run-as-root -np 2 "$T" serve $models "$@" \
    --port 0 -t 1 >/dev/null 2>"$W/srv.err" &
  sp=$!
  port=$(serve_port "$W/srv.err" "$sp")
  if [ -z "$port" ]; then echo "FAIL $name: the server did not start"; cat "$W/srv.err"; fail=1
  else
    curl -s --max-time 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt":"Once upon a time","max_tokens":'"$nt"',"seed":2}' >"$W/srv.json"
    /usr/bin/python3 -c 'import json, sys; sys.stdout.write(json.load(open(sys.argv[1]))["choices"][0]["text"])' \
      "$W/srv.json" >"$W/srv.txt" 2>"$W/srv.py.err"
    if [ -s "$W/one.out" ] && cmp -s "$W/one.out" "$W/srv.txt" && grep -q "$pat" "$W/srv.err"; then
      echo "ok   $name: $(wc -c <"$W/srv.txt") bytes identical to tutti run"
    else echo "FAIL $name: the served text differs from tutti run"; cat "$W/srv.json" "$W/srv.err"; fail=1; fi
  fi
  kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
}
serve_same "split member serve" "split over 2 ranks" 60 "$BYTE2" --split-layers --split-member 2

# serve's /health: 200 while the member ranks answer, 503 naming the rank
# once one stopped answering (it hangs on its 20th request: the request in
# flight fails after TUTTI_MPI_TIMEOUT)
TUTTI_MPI_TEST_FAULT=hang:20@1 TUTTI_MPI_TIMEOUT=2 timeout 120 "$MPIEXEC" --oversubscribe --allow-run-as-root -np 2 \
  "$T" serve $BYTE2 --port 0 -t 1 >/dev/null 2>"$W/h.err" &
sp=$!
port=$(serve_port "$W/h.err" "$sp")
if [ -z "$port" ]; then echo "FAIL serve /health with a dead rank: the server did not start"; cat "$W/h.err"; fail=1
else
  h1=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/health")
  c=$(curl -s -o "$W/h.json" -w '%{http_code}' --max-time 60 "http://127.0.0.1:$port/v1/completions" \
      -H 'Content-Type: application/json' -d '{"prompt":"Once upon a time","max_tokens":200,"temperature":0}')
  h2=$(curl -s -o "$W/h2.json" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/health")
  if [ "$h1" = 200 ] && [ "$c" != 200 ] && [ "$h2" = 503 ] && grep -q "MPI rank 1" "$W/h2.json"; then
    echo "ok   serve /health: 200, then 503 once rank 1 stopped answering"
  else echo "FAIL serve /health with a dead rank: health $h1, request $c, health $h2"; cat "$W/h2.json" "$W/h.err"; fail=1; fi
fi
kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null

# usage: --split-member needs --split-layers and a member that exists;
# --place with --split-layers is refused (a split member occupies every rank)
usage2() {
  name=$1 pat=$2; shift 2
  "$T" "$@" >/dev/null 2>"$W/p.err"; rc=$?
  [ $rc -eq 2 ] && grep -q -- "$pat" "$W/p.err" && echo "ok   $name refused (exit 2)" ||
    { echo "FAIL $name: exit $rc"; cat "$W/p.err"; fail=1; }
}
usage2 "--split-member without --split-layers" "split-member needs --split-layers" run $TOK -p Once -n 5 --split-member 2
usage2 "--split-member 4 of 3" "expected comma-separated member numbers in \[1, 3\]" run $TOK -p Once -n 5 --split-layers --split-member 4
usage2 "--split-layers with --place" "place and --split-layers exclude each other" run $TOK -p Once -n 5 --split-layers --place 0,0,0
usage2 "--split-layers x" "expected comma-separated layer counts" eval --text "$W/ev.txt" $TOK --split-layers=x
usage2 "serve --split-ubatch 6" "split-ubatch needs a multiple of 4" serve $TOK --split-layers --split-ubatch 6
# ensemble members with their experts split (src/fusion/member_experts.c):
# every member on rank 0, each MoE member's experts over all ranks; the
# fused text and every digit of eval --json are the single-process run's
# (byte alignment: a pool of sessions sharing one split, batches of
# hypotheses); a served request equals tutti run
xp_member() {
  name=$1 np=$2; shift 2
  "$T" "$@" -t 2 >"$W/one.out" 2>"$W/one.err" || { echo "FAIL experts member $name: single-process run failed"; cat "$W/one.err"; fail=1; return; }
  run_mpi "$np" "$T" "$@" -t 1 --split-experts >"$W/xp.out" 2>"$W/xp.err"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "experts split over $np ranks" "$W/xp.err"; then
    echo "FAIL experts member $name: mpirun exit $rc"; cat "$W/xp.err"; fail=1; return
  fi
  if ! [ -s "$W/one.out" ] || ! cmp -s "$W/one.out" "$W/xp.out"; then
    echo "FAIL experts member $name: output differs from the single-process run"; diff "$W/one.out" "$W/xp.out" | head; fail=1; return
  fi
  echo "ok   experts member $name: $(wc -c <"$W/xp.out") bytes identical"
}
XMOE="-m $XD/qwen2moe-b-Q8_0.gguf -m $XD/olmoe-b-Q4_K_M.gguf"
xp_member "run, two MoE members (token), greedy, 2 ranks" 2 run $XMOE -p "Once upon" -n 30 --temp 0
xp_member "eval bits per byte (byte), MoE + dense of another tokenizer, 3 ranks" 3 eval --json --align byte \
  --text "$W/ev.txt" -m "$XD/qwen3moe-k-Q4_K_M.gguf" -m "$M/stories260K.gguf"
serve_same "experts member serve" "experts split over 2 ranks" 30 "$XMOE" --split-experts
usage2 "run --split-experts with --place" "place and --split-experts exclude each other" run $XMOE -p Once -n 5 \
  --split-experts --place 0,0
usage2 "eval --split-experts with --split-layers" "split-experts and --split-layers exclude each other" eval \
  --text "$W/ev.txt" $XMOE --split-experts --split-layers

# a rank that cannot load its part of a split member: an error naming it, before any text
TUTTI_MPI_TEST_FAULT=splitload@1 expect_fault "split member: rank 1 cannot load its layers" \
  "rank 1 cannot load layers 2-4 of .*stories260K-dreams.gguf: .*injected load failure" 30 2 "$T" run $TOK -p Once -n 20 \
  --split-layers --split-member 2
[ -s "$W/f.out" ] && { echo "FAIL split member: rank 1 cannot load: text was printed"; fail=1; }
# a rank that answers a pass with an error (TUTTI_MPI_TEST_FAULT=spliterr:N@R):
# rank 0 takes every micro-batch's answer, reports the rank, releases the
# parts and exits 1 (no hang): in a 17-piece prompt, and a split member
head -c 300 "$S/eval/stories-dev.txt" >"$W/p300.txt"
TUTTI_MPI_TEST_FAULT=spliterr:2@1 expect_fault "split: rank 1 answers a micro-batch with an error" \
  "rank 1 (stories260K.gguf split part): injected error" 30 3 "$T" generate -m "$M/stories260K.gguf" -f "$W/p300.txt" \
  -n 20 -t 1 --split-layers --split-ubatch 8
[ -s "$W/f.out" ] && { echo "FAIL split: error answer: text was printed"; fail=1; }
TUTTI_MPI_TEST_FAULT=spliterr:30@2 expect_fault "split member: rank 2 answers with an error mid-generation" \
  "member 2 (TinyStories-656K-Q8_0.gguf): mpi: rank 2 (TinyStories-656K-Q8_0.gguf split part): injected error" 30 3 \
  "$T" run $BYTE -p Once -n 80 -t 1 --split-layers --split-member 2
# a split member's rank killed mid-generation: reported, no hang
TUTTI_MPI_TEST_FAULT=kill:40@1 TUTTI_MPI_TIMEOUT=5 expect_fault "split member: rank 1 killed mid-generation" \
  "rank 1 (\|process rank 1 with PID [0-9]* on node [^ ]* exited on signal 9" 30 2 "$T" run $BYTE2 -p Once -n 300 \
  --split-layers --split-member 1 -t 1

# a member rank killed (SIGKILL) on its 30th request: mpirun ends the job;
# rank 0 names the rank and its members when it gets to run before mpirun's
# SIGKILL reaches it, and mpirun names the rank in any case (on a loaded
# machine either may come first: both are a report naming rank 1, no hang)
TUTTI_MPI_TEST_FAULT=kill:30@1 TUTTI_MPI_TIMEOUT=5 expect_fault "rank 1 killed mid-generation" \
  "rank 1 (member 1 (stories260K.gguf), member 3 (babyllama-tok361.gguf))\|process rank 1 with PID [0-9]* on node [^ ]* exited on signal 9" \
  30 3 "$T" run $BYTE -p Once -n 200 -t 3
# a member rank that stops answering: rank 0's timeout
TUTTI_MPI_TEST_FAULT=hang:30@2 TUTTI_MPI_TIMEOUT=2 expect_fault "rank 2 hangs mid-generation" \
  "rank 2 (member 2 (TinyStories-656K-Q8_0.gguf)) did not answer within 2 s" 30 3 "$T" run $BYTE -p Once -n 200 -t 3 --place 1,2,1
# kill -9 from outside while an evaluation runs
# long enough that the kill lands mid-evaluation (byte tables read the
# known text ahead, so 5 copies could finish within the second waited)
for i in $(seq 1 30); do cat "$S/eval/stories-dev.txt"; done >"$W/ev3.txt"
t0=$(date +%s)
TUTTI_TEST_TAG=$$ TUTTI_MPI_TIMEOUT=5 run_mpi 3 "$T" eval --text "$W/ev3.txt" $BYTE -t 3 >"$W/k.out" 2>"$W/k.err" &
mp=$!
# rank 1 of this job: the process whose environment has both markers
victim=""
for i in $(seq 1 300); do
  sleep 0.1
  for e in /proc/[0-9]*/environ; do
    env=$({ tr '\0' '\n' <"$e"; } 2>/dev/null) || continue
    echo "$env" | grep -qx "TUTTI_TEST_TAG=$$" && echo "$env" | grep -qx OMPI_COMM_WORLD_RANK=1 &&
      victim=${e#/proc/} && victim=${victim%/environ}
  done
  # its members are loaded (the model files are mapped): the evaluation is under way
  [ -n "$victim" ] && grep -q babyllama-tok361.gguf "/proc/$victim/maps" 2>/dev/null && break
  victim=""
done
sleep 1
kill -0 "$mp" 2>/dev/null || victim=""  # (the evaluation must still be running)
if [ -z "$victim" ]; then echo "FAIL kill -9: no rank 1 process found"; fail=1; kill "$mp"; else
  kill -9 "$victim"; wait "$mp"; rc=$? dt=$(($(date +%s) - t0))
  # rank 0 names the rank and its members; when the launcher's SIGKILL
  # beats rank 0's handler (seen in CI under ctest -j2), the launcher's own
  # report names the rank, as for the other kills here
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $dt -gt 60 ] || ! grep -q "rank 1 (member 1 (stories260K.gguf), member 3 (babyllama-tok361.gguf)) died\|process rank 1 with PID [0-9]* on node [^ ]* exited on signal 9" "$W/k.err"; then
    echo "FAIL kill -9 of rank 1 during eval: exit $rc after $dt s"; cat "$W/k.err"; fail=1
  else echo "ok   kill -9 of rank 1 during eval: exit $rc after $dt s: $(grep 'rank 1 (\|process rank 1' "$W/k.err" | head -1)"; fi
fi

# a split part's rank killed, or hanging, mid-generation
TUTTI_MPI_TEST_FAULT=kill:20@1 TUTTI_MPI_TIMEOUT=5 expect_fault "split: rank 1 killed mid-generation" \
  "rank 1 (layers 2-4 of stories260K.gguf)\|process rank 1 with PID [0-9]* on node [^ ]* exited on signal 9" \
  30 2 "$T" generate -m "$M/stories260K.gguf" -p Once -n 200 --ignore-eos -t 1 --split-layers
TUTTI_MPI_TEST_FAULT=hang:20@1 TUTTI_MPI_TIMEOUT=2 expect_fault "split: rank 1 hangs mid-generation" \
  "rank 1 (layers 2-4 of stories260K.gguf) did not answer within 2 s" 30 2 "$T" generate -m "$M/stories260K.gguf" \
  -p Once -n 200 --ignore-eos -t 1 --split-layers
# a rank that cannot load its part: the error names it before any text, and
# the rank that did load is released (no hang)
TUTTI_MPI_TEST_FAULT=splitload@1 expect_fault "split: rank 1 cannot load its layers" \
  "rank 1 cannot load layers 1-2 of .*stories260K.gguf: .*injected load failure" 30 3 "$T" generate \
  -m "$M/stories260K.gguf" -p Once -n 20 -t 1 --split-layers
[ -s "$W/f.out" ] && { echo "FAIL split: rank 1 cannot load: text was printed"; fail=1; }
# a missing model: clear error, no text
expect_fault "missing model file" "cannot open model file $W/nothere.gguf" 30 2 "$T" run -m $M/stories260K.gguf \
  -m "$W/nothere.gguf" -p Once -n 10
# a model rank 1 cannot load (vocabulary only): the error names the rank, before any text
expect_fault "rank 1 cannot load its model" "rank 1 cannot load .*ggml-vocab-llama-spm.gguf" 30 2 "$T" run \
  -m $M/stories260K.gguf -m $M/vocab/ggml-vocab-llama-spm.gguf -p Once -n 10 --place 0,1
[ -s "$W/f.out" ] && { echo "FAIL rank 1 cannot load: text was printed"; fail=1; }
# bad placements are usage errors
run_mpi 2 "$T" run $TOK -p Once -n 5 --place 0,5,1 >/dev/null 2>"$W/p.err"; rc=$?
grep -q "expected comma-separated ranks in \[0, 2)" "$W/p.err" && [ $rc -ne 0 ] && echo "ok   --place out of range" ||
  { echo "FAIL --place 0,5,1 on 2 ranks: exit $rc"; cat "$W/p.err"; fail=1; }
run_mpi 2 "$T" run $TOK -p Once -n 5 --place 0,1 >/dev/null 2>"$W/p.err"; rc=$?
grep -q "place lists 2 ranks for 3 members" "$W/p.err" && [ $rc -ne 0 ] && echo "ok   --place too short" ||
  { echo "FAIL --place 0,1 for 3 members: exit $rc"; cat "$W/p.err"; fail=1; }
exit $fail

# Sourced by bench/mpi_split.sh and bench/moe_split.sh (a model split over
# MPI ranks against one process): the scratch folder, the prompt, the runs
# and their medians.  The script sets before sourcing: T (tutti), MODEL, REP
# (runs per configuration), PROMPT_BYTES (of ../shared/eval/stories-dev.txt),
# N_GEN (tokens generated per run) and REPORT (a grep pattern: the lines of
# tutti's stderr shown under each configuration's line).
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
head -c "$PROMPT_BYTES" "$HERE/../../shared/eval/stories-dev.txt" | tr '\n' ' ' >"$W/prompt.txt"
mpi() { mpirun --oversubscribe --allow-run-as-root "$@"; }
# prints "prompt_tok/s gen_tok/s" from the command's report
rate() { sed -n 's/.*prompt [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s); generated [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1 \2/p' "$1"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# run_cfg NAME CMD...: CMD -m MODEL on the prompt REP times; the medians
run_cfg() {
  name=$1; shift
  : >"$W/p"; : >"$W/g"
  for i in $(seq "$REP"); do
    case "$1" in # mpi is a function (not for /usr/bin/time): each rank's memory is in its own lines
      mpi) "$@" -m "$MODEL" -f "$W/prompt.txt" -n "$N_GEN" --temp 0 --ignore-eos >/dev/null 2>"$W/err" ;;
      *) /usr/bin/time -o "$W/rss" -f %M "$@" -m "$MODEL" -f "$W/prompt.txt" -n "$N_GEN" --temp 0 --ignore-eos \
           >/dev/null 2>"$W/err" ;;
    esac
    rate "$W/err" | awk '{ print $1 >> "'"$W/p"'"; print $2 >> "'"$W/g"'" }'
  done
  printf '%-52s prompt %8.1f tok/s   generation %7.1f tok/s' "$name" "$(median <"$W/p")" "$(median <"$W/g")"
  case "$1" in mpi) echo ;; *) echo "   peak RSS $(($(tail -n 1 "$W/rss") / 1024)) MiB" ;; esac
  grep "$REPORT" "$W/err" | sed 's/^/    /'
}
echo "model: $MODEL, prompt $(wc -c <"$W/prompt.txt") bytes, median of $REP runs, $(nproc) CPUs"

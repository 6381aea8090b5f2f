#!/bin/bash
# The held-out table of docs/merge-study.md: the merges of docs/merge-study.sh,
# the searched merges (tutti merge --search on ../shared/eval/mixed-dev.txt)
# and the fusion, on docs/merge-study-heldout.txt (12 paragraphs written for
# this study, none in mixed-dev.txt: stories 1,4,7,11, dreams 2,6,8,10,
# poems 3,5,9,12), whole and per domain.  Run docs/merge-study.sh first (same
# WORK).  The searches score mixed-dev.txt's three domains as three texts
# (--text stories --text dreams --text poems, the paragraphs split as
# merge-study.sh does) with each --objective (mean, max, mean-best,
# max-best), and the whole text as one ("whole"); "poems3" is mean-best with
# the poems as three of five tasks; OBJECTIVES picks among them.  Each
# search takes 1-10 minutes on two (busy) cores.
# usage: docs/merge-study-heldout.sh [BUILD=build] [WORK=/tmp/merge-study]
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-$HERE/build}/tutti
W=${2:-/tmp/merge-study}
S=${TUTTI_SHARED_DIR:-$HERE/../shared}
B=$S/models/stories260K.gguf D=$S/models/stories260K-ft/stories260K-dreams.gguf P=$S/models/stories260K-ft/stories260K-poems.gguf
H=$HERE/docs/merge-study-heldout.txt
[ -f "$W/fused.ens" ] || { echo "run docs/merge-study.sh first (WORK $W)" >&2; exit 1; }
awk -v w="$W" 'BEGIN{RS=""; ORS="\n\n"} {d = (NR==1||NR==4||NR==7||NR==11) ? "stories" : (NR==3||NR==5||NR==9||NR==12) ? "poems" : "dreams"; print > (w "/heldout-" d ".txt")}' "$H"
M=$S/eval/mixed-dev.txt
awk -v w="$W" 'BEGIN{RS=""; ORS="\n\n"} {d = (NR==1||NR==4||NR==7||NR==11) ? "stories" : (NR==3||NR==5||NR==9||NR==12) ? "poems" : "dreams"; print > (w "/mixed-" d ".txt")}' "$M"
SEARCHED=()
for obj in ${OBJECTIVES:-whole mean max mean-best max-best poems3}; do
  for method in task_arithmetic ties; do
    if [ "$obj" = whole ]; then n=search-$method; texts=(--text "$M")
    elif [ "$obj" = poems3 ]; then
      # the poems counted three times in mean-best (copies: one file, three tasks)
      cp "$W/mixed-poems.txt" "$W/mixed-poems2.txt"; cp "$W/mixed-poems.txt" "$W/mixed-poems3.txt"
      n=search-$method-poems3; texts=(--text "$W/mixed-stories.txt" --text "$W/mixed-dreams.txt" --text "$W/mixed-poems.txt"
        --text "$W/mixed-poems2.txt" --text "$W/mixed-poems3.txt" --objective mean-best)
    else n=search-$method-$obj; texts=(--text "$W/mixed-stories.txt" --text "$W/mixed-dreams.txt" --text "$W/mixed-poems.txt" --objective "$obj"); fi
    "$T" merge --search "${texts[@]}" --base "$B" -m "$D" -m "$P" --method $method --layer-groups 5 \
      --evals 200 --seed 1 -o "$W/$n.gguf" --yaml "$W/$n.yaml" 2>&1 | tail -n 1
    # the configuration reproduces the searched file byte for byte
    "$T" merge --config "$W/$n.yaml" -o "$W/$n-again.gguf" 2>/dev/null
    cmp "$W/$n.gguf" "$W/$n-again.gguf" && echo "$n.yaml reproduces it byte for byte"
    SEARCHED+=("$W/$n.gguf")
  done
done
MODELS=("$B" "$D" "$P" "$W"/linear.gguf "$W"/slerp.gguf "$W"/nuslerp.gguf "$W"/task_arithmetic.gguf "$W"/task_arithmetic_1.gguf
  "$W"/ties.gguf "$W"/dare_ties.gguf "$W"/dare_linear.gguf "$W"/della.gguf "$W"/della_linear.gguf "$W"/breadcrumbs.gguf
  "$W"/breadcrumbs_ties.gguf "$W"/model_stock.gguf "$W"/passthrough.gguf "${SEARCHED[@]}")
for x in "$H" "$W"/heldout-stories.txt "$W"/heldout-dreams.txt "$W"/heldout-poems.txt; do
  echo "== $(basename "$x")"
  for ((i = 0; i < ${#MODELS[@]}; i += 8)); do
    args=(); for f in "${MODELS[@]:i:8}"; do args+=(-m "$f"); done
    "$T" eval --text "$x" "${args[@]}" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys, os
r = json.load(sys.stdin)
for m in r["members"]: print("%-22s %.3f" % (os.path.basename(m["model"]).replace(".gguf", ""), m["bits_per_byte"]))'
  done
  for e in fused adapt; do
    "$T" eval --text "$x" -e "$W/$e.ens" --align token --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
print("%-22s %.3f" % ("fusion (" + sys.argv[1] + ")", json.load(sys.stdin)["ensemble"]["bits_per_byte"]))' $e
  done
done

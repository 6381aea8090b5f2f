#!/bin/bash
# Reproduces the tables of docs/merge-study.md: bits per byte of stories260K,
# its two fine-tunes, their merges by every method (stories260K as base_model)
# and their fusion (tutti fit + tutti eval, token alignment) on
# ../shared/eval/mixed-dev.txt (whole and per domain) and stories-dev.txt.
# usage: docs/merge-study.sh [BUILD=build] [WORK=/tmp/merge-study]
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-$HERE/build}/tutti
W=${2:-/tmp/merge-study}
S=${TUTTI_SHARED_DIR:-$HERE/../shared}
mkdir -p "$W"
B=$S/models/stories260K.gguf D=$S/models/stories260K-ft/stories260K-dreams.gguf P=$S/models/stories260K-ft/stories260K-poems.gguf

# mixed-dev.txt by domain: paragraphs 1,4,7,11 stories, 2,6,8,10 dreams, 3,5,9,12 poems
awk -v w="$W" 'BEGIN{RS=""; ORS="\n\n"} {d = (NR==1||NR==4||NR==7||NR==11) ? "stories" : (NR==3||NR==5||NR==9||NR==12) ? "poems" : "dreams"; print > (w "/mixed-" d ".txt")}' "$S/eval/mixed-dev.txt"

m() { "$T" merge "$@" 2>/dev/null; }
m -m "$D" -m "$P" --method linear -o "$W/linear.gguf"
m -m "$D" -m "$P" --method slerp --t 0.5 -o "$W/slerp.gguf"
m -m "$D" -m "$P" --base "$B" --method nuslerp -o "$W/nuslerp.gguf"
m -m "$D" -m "$P" --base "$B" --method task_arithmetic --weights 0.5,0.5 -o "$W/task_arithmetic.gguf"
m -m "$D" -m "$P" --base "$B" --method task_arithmetic --weights 1,1 -o "$W/task_arithmetic_1.gguf"
m -m "$D" -m "$P" --base "$B" --method ties --density 0.5 -o "$W/ties.gguf"
m -m "$D" -m "$P" --base "$B" --method dare_ties --density 0.5 --weights 0.5,0.5 --seed 1 -o "$W/dare_ties.gguf"
m -m "$D" -m "$P" --base "$B" --method dare_linear --density 0.5 --weights 0.5,0.5 --seed 1 -o "$W/dare_linear.gguf"
m -m "$D" -m "$P" --base "$B" --method della --density 0.5 --epsilon 0.1 --seed 1 -o "$W/della.gguf"
m -m "$D" -m "$P" --base "$B" --method della_linear --density 0.5 --epsilon 0.1 --weights 0.5,0.5 --seed 1 -o "$W/della_linear.gguf"
m -m "$D" -m "$P" --base "$B" --method breadcrumbs --density 0.9 --gamma 0.01 --weights 0.5,0.5 -o "$W/breadcrumbs.gguf"
m -m "$D" -m "$P" --base "$B" --method breadcrumbs_ties --density 0.9 --gamma 0.01 --weights 0.5,0.5 -o "$W/breadcrumbs_ties.gguf"
m -m "$D" -m "$P" --base "$B" --method model_stock -o "$W/model_stock.gguf"
printf 'merge_method: passthrough\nslices:\n  - sources:\n    - {model: %s, layer_range: [0, 3]}\n  - sources:\n    - {model: %s, layer_range: [3, 5]}\n' "$D" "$P" > "$W/passthrough.yaml"
m --config "$W/passthrough.yaml" -o "$W/passthrough.gguf"
# the stories260K files are F32; the merges are F16 (the default --type)

MODELS=("$B" "$D" "$P" "$W"/linear.gguf "$W"/slerp.gguf "$W"/nuslerp.gguf "$W"/task_arithmetic.gguf "$W"/task_arithmetic_1.gguf
  "$W"/ties.gguf "$W"/dare_ties.gguf "$W"/dare_linear.gguf "$W"/della.gguf "$W"/della_linear.gguf "$W"/breadcrumbs.gguf
  "$W"/breadcrumbs_ties.gguf "$W"/model_stock.gguf "$W"/passthrough.gguf)
TEXTS=("$S/eval/mixed-dev.txt" "$W/mixed-stories.txt" "$W/mixed-dreams.txt" "$W/mixed-poems.txt" "$S/eval/stories-dev.txt")
# fusion: weights and temperatures fitted on mixed-dev.txt (the dev text itself: optimistic), rule mix
"$T" fit --text "$S/eval/mixed-dev.txt" -m "$B" -m "$D" -m "$P" --align token -o "$W/fused.ens" 2>/dev/null
# and with weights that follow the text (--adapt: the fitted weights are the prior, alpha fitted)
"$T" fit --text "$S/eval/mixed-dev.txt" -m "$B" -m "$D" -m "$P" --align token --adapt -o "$W/adapt.ens" 2>/dev/null
for x in "${TEXTS[@]}"; do
  echo "== $(basename "$x")"
  for ((i = 0; i < ${#MODELS[@]}; i += 8)); do  # members per ensemble are limited: groups of 8
    args=(); for f in "${MODELS[@]:i:8}"; do args+=(-m "$f"); done
    "$T" eval --text "$x" "${args[@]}" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys, os
r = json.load(sys.stdin)
for m in r["members"]: print("%-22s %.3f" % (os.path.basename(m["model"]).replace(".gguf", ""), m["bits_per_byte"]))'
  done
  "$T" eval --text "$x" -e "$W/fused.ens" --align token --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
print("%-22s %.3f" % ("fusion (fitted mix)", json.load(sys.stdin)["ensemble"]["bits_per_byte"]))'
  "$T" eval --text "$x" -e "$W/adapt.ens" --align token --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
print("%-22s %.3f" % ("fusion (--adapt)", json.load(sys.stdin)["ensemble"]["bits_per_byte"]))'
done
cat "$W/fused.ens" "$W/adapt.ens"

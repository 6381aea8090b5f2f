#!/bin/bash
# Reproduces the figures of docs/fusion-study.md: every rule and fit of the
# four story models on stories, of the three specialists on mixed-domain
# text (whole and per domain), and of the story models on cloze items;
# fitted on ../shared/eval/*-dev.*, measured on the held-out text of
# tests/data/heldout/ (written for this study, never fitted on), and
# cross-validated on the public files (fit on one half, measure on the other).
# Writes docs/fusion-study/*.svg (tutti eval --plot) and
# docs/fusion-study/results.md (the tables); the ensemble files, logs and
# JSON go to WORK.  Resumable: a fit or eval whose output is already in WORK
# is not run again (delete WORK to start over).  The cross-validation fits
# the rules that matter (CV_CONFIGS) rather than all of them: a byte-level
# product fit takes ~10 minutes of one core on the 2.8 kB dev text and
# --rule auto ~35.  About 3 hours on a quiet 2-core machine in all.
# usage: [ONLY=adapt] docs/fusion-study.sh [BUILD=build] [WORK=/tmp/fusion-study]
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-$HERE/build}/tutti
W=${2:-/tmp/fusion-study}
S=${TUTTI_SHARED_DIR:-$HERE/../shared}
OUT=$HERE/docs/fusion-study
H=$HERE/tests/data/heldout
mkdir -p "$W" "$OUT"
MS=$S/models
STORY=("$MS/stories260K.gguf" "$MS/TinyStories-656K-Q8_0.gguf" "$MS/BabyLlama-tok105/babyllama-tok105.gguf"
  "$MS/BabyLlama-tok361/babyllama-tok361.gguf")
SPEC=("$MS/stories260K.gguf" "$MS/aidreams260K/aidreams260K.gguf" "$MS/zh-poem/zh-poem-750K.gguf")

# paragraphs by domain (poems: non-ASCII; dreams: first person outside quotes; stories: the rest),
# halves of a text (paragraphs) and of a choice file (items)
python3 - "$S/eval" "$H" "$W" <<'EOF'
import json, re, sys
dev, held, w = sys.argv[1:4]
def dom(p):
    if any(ord(c) > 127 for c in p): return 'poems'
    return 'dreams' if '"' not in p and re.search(r'\bI\b', p) else 'stories'
def paras(path): return [p.strip() for p in open(path, encoding='utf-8').read().split('\n\n') if p.strip()]
def write(path, ps): open(path, 'w', encoding='utf-8').write('\n\n'.join(ps) + '\n')
for name, path in [('mixed-dev', dev + '/mixed-dev.txt'), ('mixed-heldout', held + '/mixed.txt')]:
    ps = paras(path)
    for d in ('stories', 'dreams', 'poems'): write(f'{w}/{name}-{d}.txt', [p for p in ps if dom(p) == d])
for name, path in [('stories-dev', dev + '/stories-dev.txt'), ('mixed-dev', dev + '/mixed-dev.txt')]:
    ps = paras(path); h = len(ps) // 2
    write(f'{w}/{name}-A.txt', ps[:h]); write(f'{w}/{name}-B.txt', ps[h:])
items = open(dev + '/cloze-dev.jsonl', encoding='utf-8').read().splitlines()
h = len(items) // 2
open(f'{w}/cloze-dev-A.jsonl', 'w').write('\n'.join(items[:h]) + '\n')
open(f'{w}/cloze-dev-B.jsonl', 'w').write('\n'.join(items[h:]) + '\n')
EOF

# NAME RULE [LINE]: an ensemble file with uniform weights (nothing fitted)
plain() {
  local name=$1 rule=$2 line=${3:-}; shift 3 || shift $#
  { printf 'rule %s\nalign byte\n' "$rule"; [ -n "$line" ] && printf '%s\n' "$line"; printf '%s\n' "$@"; } > "$W/$name.ens"
}
# NAME TEXT FIT-FLAGS... -- MEMBERS...: tutti fit on TEXT into WORK/NAME.ens
fit() {
  local name=$1 text=$2; shift 2
  local flags=(); while [ "$1" != -- ]; do flags+=("$1"); shift; done; shift
  local ms=(); for m in "$@"; do ms+=(-m "$m"); done
  [ -s "$W/$name.ens" ] && return 0
  echo "fit $name" >&2
  "$T" fit --text "$text" "${ms[@]}" --align byte "${flags[@]}" -o "$W/$name.ens" 2> "$W/$name.log"
}
# PREFIX CONFIG TEXT MEMBERS...: one rule or fit (PREFIX-CONFIG.ens)
fit_one() {
  local p=$1 c=$2 text=$3; shift 3
  case $c in
    uniform-mix) plain "$p-$c" mix "" "$@" ;;
    uniform-product) plain "$p-$c" product "" "$@" ;;
    gate) plain "$p-$c" gate "" "$@" ;;
    sequence-mixture) plain "$p-$c" mix "adapt 0" "$@" ;;
    mix) fit "$p-$c" "$text" --rule mix -- "$@" ;;
    mix-adapt) fit "$p-$c" "$text" --rule mix --adapt -- "$@" ;;
    product) fit "$p-$c" "$text" --rule product -- "$@" ;;
    span) fit "$p-$c" "$text" --rule mix --align span -- "$@" ;;
    mix-context) fit "$p-$c" "$text" --rule mix --context -- "$@" ;;
    mix-context-adapt) fit "$p-$c" "$text" --rule mix --context --adapt -- "$@" ;;
    product-context) fit "$p-$c" "$text" --rule product --context -- "$@" ;;
    product-select) fit "$p-$c" "$text" --rule product --select-share 0.5 -- "$@" ;;
    auto) fit "$p-$c" "$text" --rule auto -- "$@" ;;
  esac
}
CONFIGS=(uniform-mix uniform-product gate sequence-mixture mix mix-adapt product span mix-context mix-context-adapt
  product-context product-select auto)
# the rules kept in the cross-validation (uniform-mix first: eval's -e); the
# products are left out of the mixed set: they are n/a there whatever the
# weights (zh-poem cannot spell English, so the product has no mass there)
CV_CONFIGS=(uniform-mix uniform-product sequence-mixture mix-adapt product mix-context mix-context-adapt product-context)
CV_MX_CONFIGS=(uniform-mix sequence-mixture mix mix-adapt mix-context mix-context-adapt)
# PREFIX TEXT MEMBERS...: the configs named in the array SEL (default CONFIGS)
fit_all() {
  local p=$1 text=$2; shift 2
  local -n sel=${SEL:-CONFIGS}
  for c in "${sel[@]}"; do fit_one "$p" "$c" "$text" "$@"; done
}
# NAME TEXT PREFIX [SVG]: eval of every config of PREFIX (those in SEL) on TEXT into WORK/NAME.json
eval_all() {
  local name=$1 text=$2 p=$3 svg=${4:-}
  local -n sel=${SEL:-CONFIGS}
  [ -s "$W/$name.json" ] && return 0
  local cmp=(); for c in "${sel[@]:1}"; do cmp+=(--compare "$W/$p-$c.ens"); done
  echo "eval $name" >&2
  "$T" eval --quiet --json --text "$text" -e "$W/$p-${sel[0]}.ens" "${cmp[@]}" ${svg:+--plot "$svg"} > "$W/$name.json"
}

# NAME FLAGS... -- ITEMS: fit --choices of the story models into WORK/NAME.ens
fit_choices() {
  local name=$1; shift
  local flags=(); while [ "$1" != -- ]; do flags+=("$1"); shift; done
  [ -s "$W/$name.ens" ] && return 0
  echo "fit $name" >&2
  "$T" fit --choices "$2" "${ms[@]}" --align byte "${flags[@]}" -o "$W/$name.ens" 2> "$W/$name.log"
}
# NAME ITEMS SVG FIRST OTHERS...: eval --choices of ensemble files into WORK/NAME.json
cz_eval() {
  local name=$1 items=$2 svg=${3:-}; shift 3
  [ -s "$W/$name.json" ] && return 0
  local first=$1; shift
  local cmp=(); for c in "$@"; do cmp+=(--compare "$W/$c.ens"); done
  echo "eval $name" >&2
  "$T" eval --quiet --json --choices "$items" -e "$W/$first.ens" "${cmp[@]}" ${svg:+--plot "$svg"} > "$W/$name.json"
}
# the paragraphs of TEXT that are in DOMAIN-TEXT, into OUT
pick() {
  python3 -c "import sys; ps=[q for q in open(sys.argv[1]).read().split('\n\n') if q.strip()]; \
    sel=set(q.strip() for q in open(sys.argv[2]).read().split('\n\n') if q.strip()); \
    open(sys.argv[3],'w').write('\n\n'.join(q.strip() for q in ps if q.strip() in sel)+'\n')" "$@"
}
ms=(); for m in "${STORY[@]}"; do ms+=(-m "$m"); done
# --rule auto is left out of the mixed set (it fits every other row again, ~35 min)
MX_CONFIGS=("${CONFIGS[@]:0:12}")

# ONLY=adapt: just the rows whose weights follow the text (the sequence
# mixture, mix + adapt, mix + context + adapt, with uniform mix first as
# eval's -e), on stories and on the mixed texts (whole and per domain),
# held-out, cross-validated and in-sample; the tables into docs/fusion-study/results-adapt.md
# (the other rows print as not run).  About 5 minutes.
if [ "${ONLY:-}" = adapt ]; then
  AD=(uniform-mix sequence-mixture mix-adapt mix-context-adapt)
  SEL=AD fit_all st "$S/eval/stories-dev.txt" "${STORY[@]}"
  SEL=AD eval_all stories-heldout "$H/stories.txt" st
  SEL=AD fit_all mx "$S/eval/mixed-dev.txt" "${SPEC[@]}"
  SEL=AD eval_all mixed-heldout "$H/mixed.txt" mx
  for d in stories dreams poems; do SEL=AD eval_all "mixed-heldout-$d" "$W/mixed-heldout-$d.txt" mx; done
  for h in A B; do
    o=$([ $h = A ] && echo B || echo A)
    SEL=AD fit_all "cv$h-st" "$W/stories-dev-$h.txt" "${STORY[@]}"
    SEL=AD eval_all "cv-stories-dev-$o" "$W/stories-dev-$o.txt" "cv$h-st"
    SEL=AD fit_all "cv$h-mx" "$W/mixed-dev-$h.txt" "${SPEC[@]}"
    SEL=AD eval_all "cv-mixed-dev-$o" "$W/mixed-dev-$o.txt" "cv$h-mx"
    for d in stories dreams poems; do
      pick "$W/mixed-dev-$o.txt" "$W/mixed-dev-$d.txt" "$W/mixed-dev-$o-$d.txt"
      [ "$(wc -c < "$W/mixed-dev-$o-$d.txt")" -gt 1 ] && SEL=AD eval_all "cv-mixed-dev-$o-$d" "$W/mixed-dev-$o-$d.txt" "cv$h-mx"
    done
  done
  SEL=AD eval_all mixed-dev "$S/eval/mixed-dev.txt" mx
  for d in stories dreams poems; do SEL=AD eval_all "mixed-dev-$d" "$W/mixed-dev-$d.txt" mx; done
  python3 "$HERE/docs/fusion-study-tables.py" "$W" | sed '/^### Cloze/,$d' | grep -v '| not run |.*| not run |' |
    grep -v '^| [a-z-]* | not run |$' |
    sed '1s/.*/# Fusion study: the rows whose weights follow the text (written by ONLY=adapt docs\/fusion-study.sh)/' > "$OUT/results-adapt.md"
  echo "wrote $OUT/results-adapt.md" >&2
  exit 0
fi

# stories: the four story models
fit_all st "$S/eval/stories-dev.txt" "${STORY[@]}"
eval_all stories-heldout "$H/stories.txt" st "$OUT/stories-heldout.svg"
eval_all stories-dev "$S/eval/stories-dev.txt" st
# mixed: the three specialists
SEL=MX_CONFIGS fit_all mx "$S/eval/mixed-dev.txt" "${SPEC[@]}"
SEL=MX_CONFIGS eval_all mixed-heldout "$H/mixed.txt" mx "$OUT/mixed-heldout.svg"
for d in stories dreams poems; do SEL=MX_CONFIGS eval_all "mixed-heldout-$d" "$W/mixed-heldout-$d.txt" mx "$OUT/mixed-heldout-$d.svg"; done
# cloze: the story models; weights from the stories text or from the dev items (fit --choices)
fit_choices cz-choices-mix -- "$S/eval/cloze-dev.jsonl"
fit_choices cz-choices-product --rule product -- "$S/eval/cloze-dev.jsonl"
CZ=(st-uniform-mix st-uniform-product st-mix st-mix-adapt st-product st-mix-context st-product-context st-auto
  cz-choices-mix cz-choices-product)
cz_eval cloze-heldout "$H/cloze.jsonl" "$OUT/cloze-heldout.svg" "${CZ[@]}"
# cross-validation on the public files: fit on one half, measure on the other
for h in A B; do
  o=$([ $h = A ] && echo B || echo A)
  fit_choices "cv$h-cz-mix" -- "$W/cloze-dev-$h.jsonl"
  fit_choices "cv$h-cz-product" --rule product -- "$W/cloze-dev-$h.jsonl"
  cz_eval "cv-cloze-$o" "$W/cloze-dev-$o.jsonl" "" st-uniform-mix st-uniform-product "cv$h-cz-mix" "cv$h-cz-product"
done
for set in stories-dev:st:STORY:CV_CONFIGS mixed-dev:mx:SPEC:CV_MX_CONFIGS; do
  IFS=: read -r f p arr cfg <<< "$set"
  declare -n members=$arr
  for h in A B; do
    o=$([ $h = A ] && echo B || echo A)
    SEL=$cfg fit_all "cv$h-$p" "$W/$f-$h.txt" "${members[@]}"
    SEL=$cfg eval_all "cv-$f-$o" "$W/$f-$o.txt" "cv$h-$p"
    if [ "$p" = mx ]; then for d in stories dreams poems; do
      pick "$W/$f-$o.txt" "$W/mixed-dev-$d.txt" "$W/$f-$o-$d.txt"
      [ "$(wc -c < "$W/$f-$o-$d.txt")" -gt 1 ] && SEL=$cfg eval_all "cv-$f-$o-$d" "$W/$f-$o-$d.txt" "cv$h-$p"
    done; fi
  done
done
# in-sample figures last (the fitting text itself)
SEL=MX_CONFIGS eval_all mixed-dev "$S/eval/mixed-dev.txt" mx
for d in stories dreams poems; do SEL=MX_CONFIGS eval_all "mixed-dev-$d" "$W/mixed-dev-$d.txt" mx; done
cz_eval cloze-dev "$S/eval/cloze-dev.jsonl" "" "${CZ[@]}"

python3 "$HERE/docs/fusion-study-tables.py" "$W" > "$OUT/results.md"
echo "wrote $OUT/results.md and the plots in $OUT" >&2

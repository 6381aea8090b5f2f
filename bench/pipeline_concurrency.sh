#!/bin/sh
# Concurrency of a pipeline's independent steps (issue 31): a mixture-of-agents
# of three proposers (the story models, 200 tokens each, never ending early)
# and one aggregator, run with `tutti run -e`; prints each step's times and the
# proposers' wall time against the sum of their times (3.0 = fully parallel).
# Run in a quiet window, with at least 3 free cores:
#   bench/pipeline_concurrency.sh [build/tutti] [../shared/models]
set -eu
T=${1:-build/tutti}
M=${2:-$(dirname "$0")/../../shared/models}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cat > "$D/moa.json" <<JSON
{"models": [{"path": "$M/stories260K.gguf", "name": "stories"}, {"path": "$M/TinyStories-656K-Q8_0.gguf", "name": "tiny"},
            {"path": "$M/BabyLlama-tok105/babyllama-tok105.gguf", "name": "b105"}],
 "pipelines": [{"name": "moa", "moa": {"proposers": ["stories", "tiny", "b105"], "aggregator": "tiny",
                "max_tokens": 200, "ignore_eos": true, "seed": 1, "aggregator_prompt": "{drafts}\n{input}"}}]}
JSON
for k in 1 2 3; do
  "$T" run -e "$D/moa.json" -p "Once upon a time" -t 1 2>&1 >/dev/null | grep -E "step|pipeline" |
    awk '/step l1/ { s = $0; sub(/.*from /, "", s); split(s, a, " "); st = a[1]; en = a[4];
                     if (min == "" || st < min) min = st; if (en > max) max = en; sum += en - st }
         { print }
         END { printf "proposers: wall %.4f s, sum %.4f s, ratio %.2f\n", max - min, sum, sum / (max - min) }'
done

#!/bin/sh
# Regenerates embd_refs.json: llama-server --embeddings' answers to POST
# /v1/embeddings (llama.cpp 0.7.0, the oracle chroot) for the story models,
# which tests/test_serve_scale.c compares with tutti serve's (cosine).
#
# Each case: a model, a --pooling (the files have no pooling_type, and
# llama-server refuses this API without a pooling), and one request whose
# "input" is a list of strings (tokenized with BOS) and one of token ids
# (used as given); the last string is ../shared/ref/models' p2, p4, p2, p4
# (about 60 tokens, more than one -ub 16 micro-batch).  The file holds the inputs and the vectors (normalised,
# llama-server's default --embd-normalize 2), rounded to 7 digits.
#
# Needs root and the oracle chroot built by ../shared/oracle/setup.sh
# (default /opt/llamacpp-oracle).  Run from anywhere:
#   sh tests/data/serve/make_embd_refs.sh [ORACLE_ROOT]
set -e
ROOT=${1:-/opt/llamacpp-oracle}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=$(cd "$HERE/../../../../shared" && pwd)
WORK=$ROOT/tmp/tutti-embd
PORT=18931
mkdir -p "$WORK"
cp "$SHARED/models/stories260K.gguf" "$SHARED/models/TinyStories-656K-Q8_0.gguf" "$WORK/"
cat "$SHARED/ref/models/p2.txt" "$SHARED/ref/models/p4.txt" "$SHARED/ref/models/p2.txt" "$SHARED/ref/models/p4.txt" > "$WORK/long.txt"
OUT="$HERE/embd_refs.json"
echo '[' > "$OUT.tmp"
sep=''
for c in stories260K:mean stories260K:cls stories260K:last TinyStories-656K-Q8_0:mean; do
  M=${c%%:*} P=${c#*:}
  chroot "$ROOT" llama-server -m /tmp/tutti-embd/$M.gguf --embeddings --pooling "$P" --port $PORT -t 1 -c 512 \
    > "$WORK/server.log" 2>&1 &
  pid=$!
  i=0
  until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || { cat "$WORK/server.log"; kill $pid; exit 1; }; sleep 0.2
  done
  python3 - "$M" "$P" "$PORT" "$WORK/long.txt" "$sep" >> "$OUT.tmp" <<'PY'
import json, sys, urllib.request
model, pooling, port, long, sep = sys.argv[1:6]
texts = ["Once upon a time", "a", "The little dog ran to the park. It was happy!", open(long, encoding="utf-8").read()]
ids = [[1, 403, 407, 261, 378], [17, 200, 31, 5, 99, 100, 7]]
def post(inp):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", json.dumps({"input": inp}).encode(),
                                 {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req))
    return [[float(f"{x:.7g}") for x in d["embedding"]] for d in sorted(r["data"], key=lambda d: d["index"])], r["usage"]
cases = []
for inp in (texts, ids):
    vecs, usage = post(inp)
    cases.append({"input": inp, "embeddings": vecs, "prompt_tokens": usage["prompt_tokens"]})
print(sep + json.dumps({"model": model, "pooling": pooling, "requests": cases}))
PY
  kill $pid; wait $pid 2>/dev/null || true
  sep=','
done
echo ']' >> "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
rm -rf "$WORK"

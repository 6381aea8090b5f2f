#!/usr/bin/python3
"""Writes tests/data/remote/probe.json: llama.cpp's tokenization (llama-server
/tokenize, add_special) and detokenization of the probe text that remote
members check a server's vocabulary with (PROBE in src/fusion/member_remote.c,
keep the two equal), for stories260K.gguf.  The fake server of
tests/fake_llama_server.py answers /tokenize and /detokenize from it.

Run with a llama-server of the oracle listening:
  mkdir -p /opt/llamacpp-oracle/tmp/remote && cp ../shared/models/stories260K.gguf /opt/llamacpp-oracle/tmp/remote/
  chroot /opt/llamacpp-oracle llama-server -m /tmp/remote/stories260K.gguf --port 18931 --host 127.0.0.1 &
  /usr/bin/python3 tests/data/remote/make_probe.py http://127.0.0.1:18931 > tests/data/remote/probe.json
"""
import json, sys, urllib.request

PROBE = "Once upon a time, Lily said: \"Look! 42 cats.\"\nThe end. caf\u00e9 \u20ac\U0001F600"

def post(base, path, obj):
    req = urllib.request.Request(base + path, json.dumps(obj).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)

base = sys.argv[1]
toks = post(base, "/tokenize", {"content": PROBE, "add_special": True})["tokens"]
det = post(base, "/detokenize", {"tokens": toks})["content"]
# every token's text as llama-server names it in its top_logprobs (what a
# classic OpenAI server answers with, {text: logprob}): all n_vocab of them
r = post(base, "/completion", {"prompt": [1], "n_predict": 1, "n_probs": 1 << 20, "samplers": []})
texts = {str(e["id"]): e["token"] for e in r["completion_probabilities"][0]["top_logprobs"]}
json.dump({"content": PROBE, "tokens": toks, "detokenized": det, "token_texts": texts}, sys.stdout,
          ensure_ascii=True, sort_keys=True)
print()

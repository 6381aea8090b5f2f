#!/usr/bin/python3
"""A fake llama-server for tests/test_remote.c (CI has no real one).

It replays llama.cpp's logits: --logits F (float32 rows of n_vocab, as in
../shared/ref/models/*.logits.f32) for the prompt --tokens 1,403,...  A
request whose prompt (token ids) is tokens[0..n) gets the log-softmax of row
n-1, its --top best entries (or n_probs if smaller), in llama-server's
/completion format (completion_probabilities[0].top_logprobs by id) or its
/v1/completions format (its "content" list, by id), or with --classic
OpenAI's ({token text: logprob}, texts from the probe file's token_texts).  /tokenize and /detokenize answer the probe
text from --probe (tests/data/remote/probe.json, made by llama-server).

Failure modes (--mode): ok; die=N (the process exits after N next-token
answers: connections are refused from then on); garbage (next-token answers
are not JSON); badjson (JSON with a token id out of range); hang (next-token
answers never come); notok (no /tokenize or /detokenize, as many OpenAI-style
servers); dup (a token listed twice); odd, oddkey (valid JSON in unusual
shapes); unnormal (every log-probability 0: the answer's probabilities sum
to the number of entries, no distribution).  --key K: answer 401 unless "Authorization: Bearer K".
Binds 127.0.0.1 on a free port and writes it to --port-file."""
import argparse, json, math, os, struct, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--logits", required=True)
ap.add_argument("--tokens", required=True)
ap.add_argument("--n-vocab", type=int, required=True)
ap.add_argument("--probe", required=True)
ap.add_argument("--port-file", required=True)
ap.add_argument("--top", type=int, default=1 << 30)
ap.add_argument("--mode", default="ok")
ap.add_argument("--key", default="")
ap.add_argument("--n-ctx", type=int, default=2048)
ap.add_argument("--classic", action="store_true")
a = ap.parse_args()

V = a.n_vocab
raw = open(a.logits, "rb").read()
rows = [struct.unpack_from("<%df" % V, raw, 4 * V * r) for r in range(len(raw) // (4 * V))]
tokens = [int(t) for t in a.tokens.split(",")]
probe = json.load(open(a.probe))
served = [0]


def log_softmax(z):
    m = max(z)
    s = math.log(sum(math.exp(x - m) for x in z)) + m
    return [x - s for x in z]


def top_entries(prompt, k):
    n = len(prompt)
    if n < 1 or n > len(rows) or prompt != tokens[:n]:
        return None
    lp = log_softmax(rows[n - 1])
    order = sorted(range(V), key=lambda i: -lp[i])[: min(k, a.top, V)]
    return [(i, lp[i]) for i in order]


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as llama-server
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between headers and body

    def log_message(self, *args):
        pass

    def send(self, code, body, ctype="application/json"):
        b = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def authorised(self):
        if a.key and self.headers.get("Authorization", "") != "Bearer " + a.key:
            self.send(401, '{"error":"unauthorized"}')
            return False
        return True

    def do_GET(self):
        if not self.authorised():
            return
        if self.path == "/props":
            self.send(200, json.dumps({"default_generation_settings": {"n_ctx": a.n_ctx}, "total_slots": 1}))
        elif self.path == "/v1/models":
            self.send(200, json.dumps({"data": [{"id": "fake", "meta": {"n_vocab": V, "n_ctx": a.n_ctx}}]}))
        else:
            self.send(404, '{"error":"not found"}')

    def next_token(self, req, api):
        if a.mode.startswith("die="):
            if served[0] >= int(a.mode[4:]):
                os._exit(0)
        if a.mode == "hang":
            time.sleep(30)
        served[0] += 1
        if a.mode == "garbage":
            return self.send(200, "<html>502 Bad Gateway</html>", "text/html")
        k = req.get("n_probs" if api == "llama" else "logprobs", 0)
        top = top_entries(req.get("prompt"), int(k))
        if top is None:
            return self.send(400, '{"error":"fake server: prompt is not a prefix of the replayed tokens"}')
        if a.mode == "badjson":
            top[0] = (V + 7, top[0][1])
        if a.mode == "unnormal":
            top = [(i, 0.0) for i, _ in top]
        ent = [{"id": i, "token": "t%d" % i, "logprob": lp} for i, lp in top]
        timings = {"prompt_n": 1, "prompt_ms": 0.0, "predicted_ms": 0.0}
        if api == "openai" and a.classic:
            texts = probe["token_texts"]
            body = {"choices": [{"text": "", "logprobs": {"tokens": [texts[str(top[0][0])]],
                                                           "top_logprobs": [{texts[str(i)]: lp for i, lp in top}]}}]}
        elif api == "llama":
            body = {"content": "", "completion_probabilities": [{"id": top[0][0], "logprob": top[0][1],
                                                                 "top_logprobs": ent}], "timings": timings}
        else:
            body = {"choices": [{"text": "", "logprobs": {"content": [{"id": top[0][0], "top_logprobs": ent}]}}],
                    "timings": timings}
        if a.mode == "dup" and api == "llama":
            ent.append(dict(ent[0]))
        if a.mode in ("odd", "oddkey") and api == "llama":
            # valid JSON in shapes a scanner might trip on: pretty-printed,
            # keys reordered, escapes in texts, nested values, a second
            # completion_probabilities element; oddkey: also one entry whose
            # "id" key is written with a \u escape (only a full JSON parser
            # reads it)
            for e in ent:
                e["token"] = "\u00e9\"\\/\n%d" % e["id"]
                e["bytes"] = [195, 169, [1, {"x": [True, None, -1.5e-3]}]]
            ent = [dict(reversed(list(e.items()))) for e in ent]
            body = {"timings": dict(timings, extra={"a": [1, 2]}), "tokens": [],
                    "completion_probabilities": [{"top_logprobs": ent, "id": top[0][0], "logprob": top[0][1]},
                                                 {"id": 0, "top_logprobs": []}],
                    "stop": False, "content": "x\"y"}
            text = json.dumps(body, indent=2)
            if a.mode == "oddkey":
                k = '"id": %d\n' % ent[3]["id"]
                assert k in text
                text = text.replace(k, '"\\u0069d": %d\n' % ent[3]["id"], 1)
            return self.send(200, text)
        self.send(200, json.dumps(body))

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(n)
        if not self.authorised():
            return
        try:
            req = json.loads(data)
        except ValueError:
            return self.send(400, '{"error":"bad json"}')
        if a.mode == "notok" and self.path in ("/tokenize", "/detokenize"):
            return self.send(404, '{"error":"not found"}')
        if self.path == "/tokenize":
            if req.get("content") != probe["content"]:
                return self.send(400, '{"error":"fake server: only the probe text can be tokenized"}')
            return self.send(200, json.dumps({"tokens": probe["tokens"]}))
        if self.path == "/detokenize":
            if req.get("tokens") != probe["tokens"]:
                return self.send(400, '{"error":"fake server: only the probe tokens can be detokenized"}')
            return self.send(200, json.dumps({"content": probe["detokenized"]}))
        if self.path == "/completion":
            return self.next_token(req, "llama")
        if self.path == "/v1/completions":
            return self.next_token(req, "openai")
        self.send(404, '{"error":"not found"}')


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
tmp = a.port_file + ".tmp"
with open(tmp, "w") as f:
    f.write("%d\n" % srv.server_address[1])
os.rename(tmp, a.port_file)
srv.serve_forever()

#!/usr/bin/env python3
"""llama.cpp's answers for the command-line tests of tests/test_moe.c: what a
fused run and an eval of a mixture-of-experts model with a dense one must
print.  Run inside the oracle chroot by make_refs.sh (numpy; DUMPLOGITS is
its dumplogits).
usage: make_cli_refs.py DUMPLOGITS OUTDIR MOE EVAL_MOE DENSE105 STORIES TEXT

The MoE file and DENSE105 (BabyLlama-tok105) share a character-level
vocabulary: every token is one character (or a control token), so a text
has a single tokenization and a member's exact next-byte distribution is
its next-token distribution grouped by the token's first byte (then the
next byte within a multi-byte character), the control tokens' mass left out
and end of text taking the end-of-generation mass, renormalised
(src/fusion/bytestate.c).  Greedy decoding of these distributions from
llama.cpp's logits is the reference of (in byte alignment -n N keeps the
longest text member 1 tokenizes into at most N tokens: llama.cpp's
tokenization of the text, BOS not counted, decides):
  cli-run-token.txt   tutti run -m MOE -m DENSE105 --align token --temp 0 -n 24 (mix, equal weights)
  cli-run-byte.txt    the same with --align byte
  cli-run-moe.txt     tutti run -m MOE -m STORIES -w 1,0 --temp 0 -n 24 (byte alignment: MOE alone)
  cli-eval.txt        token-level bits per byte of EVAL_MOE and of STORIES on TEXT (chunks of whole
                      sentences of at most 200 bytes, each from BOS: ../shared/oracle/bpb.py)
"""
import sys, os, re, json, subprocess
import numpy as np

DL, OUT, MOE, EVAL_MOE, DENSE, STORIES, TEXT = sys.argv[1:8]
PROMPT, N = "Once upon a time", 24


def logits_all(model, ids):
    out = os.path.join(OUT, ".l.f32")
    subprocess.run([DL, "-m", model, "--ids", ",".join(map(str, ids)), "--top", "1", "--out", out, "-t", "2"],
                   capture_output=True, check=True)
    a = np.fromfile(out, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    os.remove(out)
    return a


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def prompt_ids(model, text):
    """llama.cpp's tokenization (BOS first) as dumplogits prints it."""
    p = subprocess.run([DL, "-m", model, "-p", text, "--top", "1"], capture_output=True, text=True, check=True)
    return [json.loads(l)["token"] for l in p.stdout.splitlines()]


def vocab_bytes(model):
    """Each token's UTF-8 bytes (b'' for control tokens), from gguf-py."""
    from gguf import GGUFReader
    r = GGUFReader(model)
    f, tt = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
    out = []
    for i, j in zip(f.data, tt.data):
        s = bytes(f.parts[i]).decode("utf-8")
        out.append(b"" if int(tt.parts[j][0]) != 1 else s.replace("\u2581", " ").encode("utf-8"))
    return out


def token_greedy(models, ids):
    ids = list(ids)
    gen = []
    for _ in range(N):
        p = sum(softmax(logits_all(m, ids)[-1]) for m in models) / len(models)
        t = int(p.argmax())
        if t == 2:  # </s>: end of generation
            break
        gen.append(t)
        ids.append(t)
    return gen


def byte_greedy(models, ids, vb):
    """Greedy over each member's exact next-byte distribution, mixed with equal weights."""
    ids = list(ids)
    gen = []
    while len(gen) < N:
        dists = [softmax(logits_all(m, ids)[-1]) for m in models]
        # first byte (or end of text: 256)
        mix = np.zeros(257)
        for p in dists:
            d = np.zeros(257)
            for t, b in enumerate(vb):
                if b:
                    d[b[0]] += p[t]
            d[256] = p[2]
            mix += d / d.sum()
        b0 = int(mix.argmax())
        if b0 == 256:
            break
        # the rest of a multi-byte character, byte by byte
        pre = bytes([b0])
        while True:
            cands = [t for t, b in enumerate(vb) if b.startswith(pre)]
            if any(vb[t] == pre for t in cands):
                break
            nxt = np.zeros(256)
            for p in dists:
                d = np.zeros(256)
                for t in cands:
                    d[vb[t][len(pre)]] += p[t]
                nxt += d / d.sum()
            pre += bytes([int(nxt.argmax())])
        t = [t for t, b in enumerate(vb) if b == pre][0]
        gen.append(t)
        ids.append(t)
    return gen


def detok(vb, gen):
    return b"".join(vb[t] for t in gen).decode("utf-8")


def cut_to_tokens(model, text):
    """The longest prefix of text (whole characters) that tokenizes into at most N tokens."""
    k = len(text)
    while k > 0 and len(prompt_ids(model, text[:k])) - 1 > N:
        k -= 1
    return text[:k]


def chunks_of(path, maxb=200):
    chunks = []
    for para in open(path, encoding="utf-8").read().split("\n\n"):
        cur = ""
        for s in re.split(r"(?<=[.!?\"]) ", para.strip()):
            cand = (cur + " " + s) if cur else s
            if len(cand.encode()) > maxb and cur:
                chunks.append(cur)
                cur = s
            else:
                cur = cand
        if cur:
            chunks.append(cur)
    return chunks


def bpb(model, chunks):
    nll = 0.0
    for c in chunks:
        ids = prompt_ids(model, c)
        L = logits_all(model, ids)
        L -= L.max(1, keepdims=True)
        L -= np.log(np.exp(L).sum(1, keepdims=True))
        nll -= sum(L[i, ids[i + 1]] for i in range(len(ids) - 1))
    return nll / np.log(2) / sum(len(c.encode()) for c in chunks)


vb = vocab_bytes(MOE)
assert vb == vocab_bytes(DENSE) and all(len(b.decode("utf-8")) <= 1 for b in vb), "not one character a token"
ids = prompt_ids(MOE, PROMPT)
open(os.path.join(OUT, "cli-run-token.txt"), "w").write(detok(vb, token_greedy([MOE, DENSE], ids)))
open(os.path.join(OUT, "cli-run-byte.txt"), "w").write(cut_to_tokens(MOE, detok(vb, byte_greedy([MOE, DENSE], ids, vb))))
open(os.path.join(OUT, "cli-run-moe.txt"), "w").write(cut_to_tokens(MOE, detok(vb, byte_greedy([MOE], ids, vb))))
ch = chunks_of(TEXT)
open(os.path.join(OUT, "cli-eval.txt"), "w").write(f"{bpb(EVAL_MOE, ch):.6f} {bpb(STORIES, ch):.6f}\n")

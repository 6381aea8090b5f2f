#!/usr/bin/python3
"""Seeds of fuzz/corpus/remote.tar (fuzz_remote.c: answers of model servers)
and fuzz/corpus/native.tar (fuzz_native.c: bodies of tutti serve's
llama-server endpoints).  Byte 0 of each file is the harness's selector (see
the harnesses), the rest the HTTP body.

  fuzz/make_corpus_remote.py [--url http://127.0.0.1:PORT]

With --url (a real llama-server serving stories260K.gguf, e.g. the oracle
chroot's: chroot /opt/llamacpp-oracle llama-server -m /tmp/X/stories260K.gguf
--port PORT -fa off) its answers are recorded as remote/llama-* (the
realistic seeds; committed, since CI has no llama-server) and the malformed
seeds derived from them are rewritten; without it only the hand-made seeds
are (re)written, from the recorded answers in the corpus.  The files named
by a SHA-1 are coverage inputs from fuzzing (merged as fuzz/README.md says);
this script leaves them alone.  The packs are unpacked into a scratch
folder, the seeds written there and the packs written again (fuzz/corpus.sh)."""
import argparse, json, os, shutil, subprocess, tempfile, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = tempfile.mkdtemp(prefix="tutti-corpus-")
REMOTE = os.path.join(WORK, "remote")
NATIVE = os.path.join(WORK, "native")

# fuzz_remote.c byte 0: kind in bits 0-2, bit 3 no vocabulary (n_vocab = 1 + (b >> 4))
LLAMA, OPENAI, TOKENIZE, DETOKENIZE, PROPS, MODELS = 0, 1, 2, 3, 4, 5
NOVOCAB = 8
# fuzz_native.c byte 0: endpoint in bits 0-1, bit 2 two models
COMPLETION, NTOKENIZE, NDETOKENIZE, TWO = 0, 1, 2, 4

# what a remote member sends (src/member/remote.c fetch())
MEMBER_REQ = {"prompt": [1, 403, 407], "n_predict": 1, "n_probs": 512, "samplers": [],
              "post_sampling_probs": False, "cache_prompt": True, "return_tokens": False, "stream": False}


# seeds that were findings of fuzz_remote.c before their fix (member/remote_json.c's
# scanner): named crash-<what>, as fuzz/README.md asks
CRASHES = {
    "trunc-3": "crash-overread-strtod-cut",  # strtod read past the answer's end
    "trunc-number-end": "crash-overread-strtod-end",
    "id-hex": "crash-scan-hex-number",  # strtod took 0x10, cJSON rejects the answer
    "bad-escape": "crash-scan-bad-escape",  # the scanner took escapes cJSON rejects
    "lone-low-surrogate": "crash-scan-lone-low-surrogate",
    "high-surrogate-alone": "crash-scan-high-surrogate-alone",
    "escaped-id-key": "crash-scan-escaped-key",  # cJSON reads "\u0069d" as "id"
    "escaped-top-key": "crash-scan-escaped-top-key",
    "nul-key": "crash-scan-nul-key",  # cJSON reads "id\u0000x" as "id"
    "dup-prompt-ms": "crash-scan-dup-timing",  # the scanner summed both, cJSON takes the first
}


def write(folder, name, sel, body):
    name = CRASHES.get(name, name) if folder == REMOTE else name
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(bytes([sel]) + body)


def post(url, path, obj):
    req = urllib.request.Request(url + path, json.dumps(obj).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=30).read()


def get(url, path):
    return urllib.request.urlopen(url + path, timeout=30).read()


def record(url):
    r = dict(MEMBER_REQ)
    write(REMOTE, "llama-completion-full", LLAMA, post(url, "/completion", r))
    r["n_probs"] = 3
    write(REMOTE, "llama-completion-top3", LLAMA, post(url, "/completion", r))
    # a different shape: text prompt, the server's default samplers, post-sampling probabilities
    write(REMOTE, "llama-completion-text-post", LLAMA,
          post(url, "/completion", {"prompt": "Once upon a time", "n_predict": 1, "n_probs": 4,
                                    "post_sampling_probs": True}))
    write(REMOTE, "llama-v1-completions", OPENAI,
          post(url, "/v1/completions", {"prompt": [1, 403, 407], "max_tokens": 1, "temperature": 0,
                                         "logprobs": 5, "echo": False, "stream": False}))
    write(REMOTE, "llama-tokenize", TOKENIZE,
          post(url, "/tokenize", {"content": "Once upon a time", "add_special": True}))
    write(REMOTE, "llama-tokenize-pieces", TOKENIZE,
          post(url, "/tokenize", {"content": "Once upon a time caf\u00e9 \U0001F600", "add_special": True,
                                  "with_pieces": True}))
    write(REMOTE, "llama-detokenize", DETOKENIZE, post(url, "/detokenize", {"tokens": [1, 403, 407, 261, 378]}))
    write(REMOTE, "llama-props", PROPS, get(url, "/props"))
    write(REMOTE, "llama-v1-models", MODELS, get(url, "/v1/models"))


def recorded(name):
    with open(os.path.join(REMOTE, name), "rb") as f:
        return f.read()[1:]


def remote_seeds():
    top3 = recorded("llama-completion-top3")
    # truncated: mid-key, mid-number at the very end (a scanner reading past
    # the end), just before the last brace
    cut = top3.rindex(b"-0.01")
    for i, n in enumerate([1, 40, top3.index(b"completion_probabilities") + 10, cut + 4, len(top3) - 1]):
        write(REMOTE, "trunc-%d" % i, LLAMA, top3[:n])
    write(REMOTE, "trunc-number-end", LLAMA, b'{"completion_probabilities":[{"top_logprobs":[{"id":1,"logprob":-0.5')

    def comp(entries, extra="", first_extra=""):
        return '{"content":" a",%s"completion_probabilities":[{"id":261%s,"top_logprobs":[%s]}],' \
               '"timings":{"prompt_ms":0.5,"predicted_ms":0.25}}' % (extra, first_extra, entries)

    llama = {
        "ok-min": comp('{"id":261,"logprob":-0.01}'),
        "ok-pretty": json.dumps(json.loads(top3), indent=1),
        "id-last": comp('{"id":511,"logprob":-1}'),
        "id-vocab": comp('{"id":512,"logprob":-1}'),
        "id-neg": comp('{"id":-1,"logprob":-1}'),
        "id-frac": comp('{"id":1.5,"logprob":-1}'),
        "id-huge": comp('{"id":1e308,"logprob":-1}'),
        "id-inf": comp('{"id":1e999,"logprob":-1}'),
        "id-2p32": comp('{"id":4294967297,"logprob":-1}'),
        "id-hex": comp('{"id":0x10,"logprob":-1}'),
        "id-string": comp('{"id":"5","logprob":-1}'),
        "id-missing-token": comp('{"token":" a","logprob":-1}'),
        "lp-pos": comp('{"id":3,"logprob":0.5}'),
        "lp-small-pos": comp('{"id":3,"logprob":0.0005}'),
        "lp-neginf": comp('{"id":3,"logprob":-1e999},{"id":4,"logprob":-0.1}'),
        "lp-posinf": comp('{"id":3,"logprob":1e999}'),
        "lp-nan": comp('{"id":3,"logprob":NaN}'),
        "lp-string": comp('{"id":3,"logprob":"-1"}'),
        "lp-bool": comp('{"id":3,"logprob":true}'),
        "lp-long": comp('{"id":3,"logprob":-0.%s1}' % ("0" * 80)),
        "lp-exp": comp('{"id":3,"logprob":-1E-2},{"id":4,"logprob":-2.5e+1}'),
        "dup-id": comp('{"id":3,"logprob":-1,"id":4}'),
        "dup-token": comp('{"id":3,"logprob":-1},{"id":3,"logprob":-2}'),
        "dup-cp": comp('{"id":3,"logprob":-1}', '"completion_probabilities":[{"top_logprobs":[{"id":5,"logprob":-3}]}],'),
        "dup-top": comp('{"id":3,"logprob":-1}', first_extra=',"top_logprobs":[{"id":6,"logprob":-2}]'),
        "dup-timings": comp('{"id":3,"logprob":-1}', '"timings":{"prompt_ms":7},'),
        "dup-prompt-ms": comp('{"id":3,"logprob":-1}').replace('"prompt_ms":0.5', '"prompt_ms":"x","prompt_ms":0.5'),
        "escaped-id-key": comp('{"\\u0069d":3,"id":4,"logprob":-1}'),
        "escaped-top-key": comp('{"id":3,"logprob":-1}', first_extra=',"top_log\\u0070robs":[{"id":6,"logprob":-2}]'),
        "nul-key": comp('{"id\\u0000x":3,"id":4,"logprob":-1}'),
        "bad-escape": comp('{"id":3,"logprob":-1,"token":"\\q"}'),
        "bad-u": comp('{"id":3,"logprob":-1,"token":"\\uZZZZ"}'),
        "lone-low-surrogate": comp('{"id":3,"logprob":-1,"token":"\\udc00"}'),
        "high-surrogate-alone": comp('{"id":3,"logprob":-1,"token":"\\ud800x"}'),
        "surrogate-pair": comp('{"id":3,"logprob":-1,"token":"\\ud83d\\ude00"}'),
        "raw-control": comp('{"id":3,"logprob":-1,"token":"a\tb"}'),
        "wrong-cp-object": '{"completion_probabilities":{"top_logprobs":[{"id":1,"logprob":-1}]}}',
        "wrong-top-string": '{"completion_probabilities":[{"top_logprobs":"x"}]}',
        "top-empty": '{"completion_probabilities":[{"top_logprobs":[]}]}',
        "cp-empty": '{"completion_probabilities":[]}',
        "entry-not-object": '{"completion_probabilities":[{"top_logprobs":[[1,-1]]}]}',
        "root-array": '[{"completion_probabilities":[]}]',
        "null": "null",
        "empty": "",
        "ws": " \n\t\r",
        "trailing": comp('{"id":3,"logprob":-1}') + " x",
        "bom": "\ufeff" + comp('{"id":3,"logprob":-1}'),
        "deep-32": comp('{"id":3,"logprob":-1,"bytes":%s1%s}' % ("[" * 32, "]" * 32)),
        "deep-2000": comp('{"id":3,"logprob":-1,"bytes":%s1%s}' % ("[" * 2000, "]" * 2000)),
        "deep-open": "{" + '"a":[' * 3000,
        "num-minus": comp('{"id":-,"logprob":-1}'),
        "num-exp-cut": comp('{"id":3,"logprob":-1e}'),
        "num-exp-sign": comp('{"id":3,"logprob":-1e+}'),
        "num-dot-exp": comp('{"id":3,"logprob":-1.e1}'),
        "num-lead-zero": comp('{"id":03,"logprob":-01.5}'),
        "num-neg-zero": comp('{"id":-0,"logprob":-0}'),
        "num-plus-in": comp('{"id":3,"logprob":-1+2}'),
        "num-63": comp('{"id":3,"logprob":-0.%s}' % ("1" * 61)),
        "num-64": comp('{"id":3,"logprob":-0.%s}' % ("1" * 62)),
        "num-1e400": comp('{"id":1E400,"logprob":-1}'),
        "ws-formfeed": comp('{"id":3,\f"logprob":-1}'),
        "nul-byte": comp('{"id":3,"logprob":-1}') + "\0",
        "timings-huge": comp('{"id":3,"logprob":-1}').replace('"predicted_ms":0.25', '"predicted_ms":-1e999'),
    }
    for k, v in llama.items():
        write(REMOTE, "llama-" + k if k.startswith("ok") else k, LLAMA, v)
    # invalid UTF-8 (raw bytes in a token text), and the small vocabularies
    write(REMOTE, "utf8-invalid", LLAMA, comp('{"id":3,"logprob":-1,"token":"XX"}').encode().replace(b"XX", b"\xc3\x28\xff"))
    write(REMOTE, "novocab-1-id0", LLAMA | NOVOCAB, comp('{"id":0,"logprob":-0.5}'))
    write(REMOTE, "novocab-16-id15", LLAMA | NOVOCAB | 0xF0, comp('{"id":15,"logprob":-0.5},{"id":16,"logprob":-1}'))
    write(REMOTE, "novocab-all", LLAMA | NOVOCAB | 0x10, comp('{"id":0,"logprob":-0.6931},{"id":1,"logprob":-0.6931}'))

    # OpenAI-style: llama-server's /v1 form (ids) and classic OpenAI (texts)
    def classic(top, extra=""):
        return '{"choices":[{"text":" a","logprobs":{"tokens":[" a"],%s"top_logprobs":[%s]}}]}' % (extra, top)

    openai = {
        "v1-min": '{"choices":[{"logprobs":{"content":[{"id":261,"top_logprobs":[{"id":261,"logprob":-0.1}]}]}}]}',
        "v1-no-content": '{"choices":[{"logprobs":{"content":[]}}]}',
        "v1-choices-empty": '{"choices":[]}',
        "v1-by-token": '{"choices":[{"logprobs":{"content":[{"top_logprobs":[{"token":" upon","logprob":-0.1},'
                       '{"token":"nope","logprob":-2}]}]}}]}',
        "classic": classic('{" a":-0.0121," upon":-5.44," there":-5.98}'),
        "classic-unknown": classic('{"zzzz":-0.5,"<s>":-1,"<0x0A>":-2,"\\n":-3}'),
        "classic-none-known": classic('{"zzzz":-0.5}'),
        "classic-dup": classic('{" a":-0.1," a":-0.2}'),
        "classic-nul": classic('{" a\\u0000zz":-0.1}'),
        "classic-not-number": classic('{" a":"x"}'),
        "classic-array": classic('[" a",-0.1]'),
        "classic-empty": classic('{}'),
        "classic-utf8": classic('{"\u00e9":-0.1,"caf\u00e9":-0.2}'),
    }
    for k, v in openai.items():
        write(REMOTE, "openai-" + k, OPENAI, v)

    tok = {
        "ok": '{"tokens":[1,403,407,261,378]}',
        "pieces": '{"tokens":[{"id":1,"piece":"<s>"},{"id":403,"piece":" Once"},{"id":407,"piece":[32]},'
                  '{"id":261,"piece":" a"},{"id":378,"piece":" time"}]}',
        "short": '{"tokens":[1,403]}',
        "other": '{"tokens":[1,403,407,261,379]}',
        "frac": '{"tokens":[1,403,407,261,378.5]}',
        "strings": '{"tokens":["1","403","407","261","378"]}',
        "not-array": '{"tokens":{"0":1}}',
        "none": '{"content":"x"}',
        "huge": '{"tokens":[%s]}' % ",".join(["1e308"] * 2000),
        "obj-noid": '{"tokens":[{"piece":"x"},{},{},{},{}]}',
    }
    for k, v in tok.items():
        write(REMOTE, "tokenize-" + k, TOKENIZE, v)
    det = {
        "ok": '{"content":"<s> Once upon a time caf\u00e9"}',
        "spm-space": '{"content":" Once upon a time caf\u00e9"}',
        "short": '{"content":"caf\u00e9"}',
        "nul": '{"content":"Once upon\\u0000 a time caf\u00e9"}',
        "not-string": '{"content":["Once upon a time"]}',
        "none": '{}',
        "garbage": '<html>502 Bad Gateway</html>',
    }
    for k, v in det.items():
        write(REMOTE, "detokenize-" + k, DETOKENIZE, v)
    props = {
        "ok": '{"default_generation_settings":{"n_ctx":2048},"total_slots":1}',
        "neg": '{"default_generation_settings":{"n_ctx":-5}}',
        "huge": '{"default_generation_settings":{"n_ctx":1e300}}',
        "edge": '{"default_generation_settings":{"n_ctx":999999999999999}}',
        "string": '{"default_generation_settings":{"n_ctx":"2048"}}',
        "not-object": '{"default_generation_settings":[2048]}',
        "openai": '{"error":{"message":"not found"}}',
    }
    for k, v in props.items():
        write(REMOTE, "props-" + k, PROPS, v)
    models = {
        "ok": '{"data":[{"id":"fake","meta":{"n_vocab":512,"n_ctx":2048}}]}',
        "second": '{"data":[{"id":"other"},{"id":"fake","meta":{"n_vocab":32000,"n_ctx":1e20}}]}',
        "not-array": '{"data":{"id":"fake","meta":{"n_vocab":512}}}',
        "entries-odd": '{"data":[1,"x",null,{"id":5},{"id":"fake","meta":"x"}]}',
        "frac": '{"data":[{"id":"fake","meta":{"n_vocab":511.9,"n_ctx":-0.0}}]}',
    }
    for k, v in models.items():
        write(REMOTE, "models-" + k, MODELS, v)
        write(REMOTE, "models-named-" + k, MODELS | 16, v)


def native_seeds():
    c = {
        "member": json.dumps(MEMBER_REQ),
        "member-model": json.dumps(dict(MEMBER_REQ, model="stories", n_probs=20)),
        "text": '{"prompt":"Once upon a time","n_probs":5}',
        "text-special": '{"prompt":"<s>Once upon</s> a time","n_probs":2,"n_predict":0}',
        "text-utf8": '{"prompt":"caf\u00e9 \U0001F600 \\ud83d\\ude00","n_probs":3}',
        "text-nul": '{"prompt":"a\\u0000b","n_probs":3}',
        "text-empty": '{"prompt":""}',
        "ids-empty": '{"prompt":[]}',
        "ids-range": '{"prompt":[0,511]}',
        "ids-neg": '{"prompt":[1,-1]}',
        "ids-vocab": '{"prompt":[1,512]}',
        "ids-frac": '{"prompt":[1,2.5]}',
        "ids-huge": '{"prompt":[1,1e300]}',
        "ids-inf": '{"prompt":[1,1e999]}',
        "ids-string": '{"prompt":[1,"2"]}',
        "ids-nested": '{"prompt":[[1,2]]}',
        "ids-long": '{"prompt":[%s]}' % ",".join(["5"] * 64),
        "ids-63": '{"prompt":[%s],"n_probs":1}' % ",".join(["5"] * 63),
        "prompt-object": '{"prompt":{"0":1}}',
        "prompt-missing": '{"n_probs":3}',
        "nprobs-neg": '{"prompt":[1],"n_probs":-1}',
        "nprobs-frac": '{"prompt":[1],"n_probs":1.5}',
        "nprobs-huge": '{"prompt":[1],"n_probs":1e300}',
        "nprobs-inf": '{"prompt":[1],"n_probs":1e999}',
        "nprobs-string": '{"prompt":[1],"n_probs":"3"}',
        "nprobs-null": '{"prompt":[1],"n_probs":null}',
        "nprobs-all": '{"prompt":[1],"n_probs":512}',
        "npredict-2": '{"prompt":[1],"n_predict":2}',
        "npredict-neg": '{"prompt":[1],"n_predict":-1,"n_probs":4}',
        "npredict-zero": '{"prompt":[1],"n_predict":0,"n_probs":4}',
        "npredict-nan": '{"prompt":[1],"n_predict":NaN}',
        "stream": '{"prompt":[1],"stream":true}',
        "post": '{"prompt":[1],"post_sampling_probs":1}',
        "model-unknown": '{"prompt":[1],"model":"nope"}',
        "model-number": '{"prompt":[1],"model":5}',
        "model-null": '{"prompt":[1],"model":null}',
        "dup-keys": '{"prompt":[1],"prompt":"x","n_probs":2,"n_probs":-3}',
        "truncated": '{"prompt":[1,403,40',
        "deep": '{"x":%s1%s,"prompt":[1]}' % ("[" * 1200, "]" * 1200),
        "not-object": '[1,2,3]',
        "empty": '',
        "invalid-utf8": '{"prompt":"XX","n_probs":2}',
    }
    for k, v in c.items():
        if k == "invalid-utf8":
            v = v.encode().replace(b"XX", b"\xc3\x28\xff\xfe")
        write(NATIVE, "completion-" + k, COMPLETION, v)
    two = {
        "default": '{"prompt":[1]}',
        "a": '{"prompt":[1,2,3],"model":"a","n_probs":3}',
        "b-long": '{"prompt":[1,2,3,4,5,6,7,8],"model":"b"}',
        "b-7": '{"prompt":[1,2,3,4,5,6,7],"model":"b","n_probs":1}',
        "solo": '{"prompt":[1,2],"model":"solo","n_probs":2}',
        "pair": '{"prompt":[1],"model":"pair"}',
    }
    for k, v in two.items():
        write(NATIVE, "two-" + k, COMPLETION | TWO, v)
    t = {
        "ok": '{"content":"Once upon a time","add_special":true}',
        "pieces": '{"content":"Once upon a time caf\u00e9 \U0001F600","add_special":true,"with_pieces":true}',
        "special": '{"content":"<s></s><unk>","with_pieces":true}',
        "not-string": '{"content":5}',
        "flag-string": '{"content":"a","with_pieces":"yes"}',
        "model": '{"content":"a","model":"nope"}',
    }
    for k, v in t.items():
        write(NATIVE, "tokenize-" + k, NTOKENIZE, v)
    write(NATIVE, "tokenize-two-solo", NTOKENIZE | TWO, '{"content":"a b","model":"solo"}')
    d = {
        "ok": '{"tokens":[1,403,407,261,378]}',
        "bytes-invalid": '{"tokens":[198,43,258]}',  # byte tokens <0xC3> <0x28> <0xFF>
        "bytes-valid": '{"tokens":[198,172]}',  # <0xC3><0xA9>: e-acute
        "nul-byte": '{"tokens":[3,3]}',
        "range": '{"tokens":[512]}',
        "neg": '{"tokens":[-1]}',
        "empty": '{"tokens":[]}',
        "not-array": '{"tokens":"1 2"}',
        "special": '{"tokens":[0,1,2]}',
    }
    for k, v in d.items():
        write(NATIVE, "detokenize-" + k, NDETOKENIZE, v)
    write(NATIVE, "detokenize-two-pair", NDETOKENIZE | TWO, '{"tokens":[1],"model":"pair"}')


def corpus(*args):
    subprocess.run([os.path.join(HERE, "corpus.sh")] + list(args), check=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    a = ap.parse_args()
    try:
        corpus("unpack", "remote", REMOTE)
        corpus("unpack", "native", NATIVE)
        if a.url:
            record(a.url.rstrip("/"))
        remote_seeds()
        native_seeds()
        corpus("pack", "remote", REMOTE)
        corpus("pack", "native", NATIVE)
    finally:
        shutil.rmtree(WORK)

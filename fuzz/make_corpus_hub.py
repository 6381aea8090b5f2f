#!/usr/bin/python3
"""Seeds of fuzz/corpus/hub.tar (fuzz_hub.c: the hub's answers to -hf).  Byte 0
is the harness's selector (bit 0: 0 tree listing, 1 branches; bits 1-2: the
spec), the rest the HTTP body: answers in the layout of the Hugging Face
hub's API (as tests/fake_hub.py serves them) and hostile variants.  The
files named by a SHA-1 are coverage inputs from fuzzing; this script leaves
them alone.

  fuzz/make_corpus_hub.py"""
import json, os, shutil, subprocess, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = tempfile.mkdtemp(prefix="tutti-corpus-")
OUT = os.path.join(WORK, "hub")  # the pack unpacked, written here, packed again (fuzz/corpus.sh)
subprocess.run([os.path.join(HERE, "corpus.sh"), "unpack", "hub", OUT], check=True)
TREE, REFS = 0, 1
DEFAULT, Q8, Q4, FILE = 0, 2, 4, 6
SHA = "c773a9eb8883751131f30e0c1965c56b1102a4972fdac6a6f71fe156ba6d8cb7"
GIT = "0123456789abcdef0123456789abcdef01234567"


def entry(path, size=749728, lfs=True):
    e = {"type": "file", "oid": GIT, "size": size, "path": path}
    if lfs:
        e["lfs"] = {"oid": SHA, "size": size, "pointerSize": 134}
    return e


seeds = {
    "tree-plain": (TREE | DEFAULT, [entry(".gitattributes", 1519, False), entry("m-Q8_0.gguf"), entry("m-Q4_K_M.gguf"),
                                    entry("mmproj-m-F16.gguf"), {"type": "directory", "oid": GIT, "size": 0, "path": "Q8_0"}]),
    "tree-q8": (TREE | Q8, [entry("a-F16.gguf"), entry("a-q8_0.gguf")]),
    "tree-split": (TREE | Q4, [entry("Q4_K_M/m-Q4_K_M-00002-of-00003.gguf"), entry("Q4_K_M/m-Q4_K_M-00001-of-00003.gguf"),
                               entry("Q4_K_M/m-Q4_K_M-00003-of-00003.gguf"), entry("m-Q8_0.gguf")]),
    "tree-split-broken": (TREE | DEFAULT, [entry("m-Q8_0-00001-of-00003.gguf"), entry("m-Q8_0-00003-of-00003.gguf"),
                                           entry("m-Q8_0-00000-of-00003.gguf"), entry("m-Q8_0-00009-of-00003.gguf")]),
    "tree-file": (TREE | FILE, [entry("Sub/Dir/x.GGUF"), entry("sub/dir/x.gguf")]),
    "tree-evil": (TREE | DEFAULT, [entry("../../evil-Q4_K_M.gguf"), entry("/etc/evil-Q4_K_M.gguf"),
                                   entry("a/../../evil-Q4_K_M.gguf"), entry("a\\..\\evil.gguf"), entry("a//b.gguf"),
                                   entry("a/./b.gguf"), entry("x\u0001.gguf"), entry("ok-Q4_K_M.gguf"), 7, "s", None,
                                   {"type": "file", "path": 42}, {"type": "file", "path": "n.gguf", "size": -5},
                                   {"type": "file", "path": "f.gguf", "size": 1e300},
                                   {"type": "file", "path": "l.gguf", "lfs": {"oid": "zz", "size": 1}},
                                   {"type": "file", "path": "l2.gguf", "lfs": [1]}]),
    "refs": (REFS, {"tags": [], "branches": [{"name": "dev", "ref": "refs/heads/dev", "targetCommit": "f" * 40},
                                             {"name": "main", "ref": "refs/heads/main", "targetCommit": "A" * 40}],
                    "converts": []}),
    "refs-evil": (REFS, {"branches": [{"name": "../../x", "targetCommit": "1" * 40}, {"name": "main", "targetCommit": "g" * 40},
                                      {"name": 3}, "x", {"name": "main", "targetCommit": 5}]}),
}
os.makedirs(OUT, exist_ok=True)
for name, (ctl, body) in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([ctl]) + json.dumps(body).encode())
raw = {"not-json": (TREE, b"[{\"type\":\"file\",\"path\":"), "not-array": (TREE, b"{\"error\":\"Repository not found\"}"),
       "empty": (TREE, b""), "refs-garbage": (REFS, b"\xff\xfe{]"), "deep": (TREE, b"[" * 5000)}
for name, (ctl, body) in raw.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([ctl]) + body)
subprocess.run([os.path.join(HERE, "corpus.sh"), "pack", "hub", OUT], check=True)
shutil.rmtree(WORK)

#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub on loopback, for tests/test_hub.c.

It speaks the HTTP layout llama.cpp's downloader (common/hf-cache.cpp,
common/download.cpp) and huggingface_hub use:

  GET  /api/models/USER/MODEL/refs               {"branches": [{"name": "main", "targetCommit": SHA1}], ...}
  GET  /api/models/USER/MODEL/tree/REV?recursive=true
                                                 [{"type": "file", "path", "size", "oid", "lfs": {"oid": SHA256, ...}}, ...]
  HEAD/GET /USER/MODEL/resolve/REV/PATH          302 to /cdn/SHA256 with X-Linked-Etag, X-Linked-Size, X-Repo-Commit
  HEAD/GET /cdn/SHA256                           the bytes: Content-Length, ETag, Accept-Ranges, Range -> 206

A private repository answers 401 without "Authorization: Bearer TOKEN" and
403 with another token, an unknown one 404 ({"error": "Repository not found"}).  Faults on demand:
--cut-once PATH (the first GET of the file's bytes stops half-way and the
connection closes), --corrupt PATH (one byte of the bytes changed; the
listing keeps the true sha256), --slow PATH (the bytes trickle, for two
downloads at once), --redirect-loop (resolve redirects to itself), --evil
(listings also hold paths such as ../../x.gguf), --no-range (Range ignored,
200 with everything).  Every request is appended to --log as a JSON line
{"method", "path", "range", "status"}.  Standard library only.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

ARGS = None
REPOS = {}      # "user/model" -> {"commit", "private", "files": {path: {"data", "sha256", "oid"}}}
BLOBS = {}      # sha256 -> (repo, path)
CUT_DONE = set()
LOCK = threading.Lock()


def load_repos(specs, private):
    for spec in specs:
        name, _, files = spec.partition("=")
        repo = {"commit": hashlib.sha1(name.encode()).hexdigest(), "private": name in private, "files": {}}
        for item in files.split(","):
            path, _, local = item.partition(":")
            with open(local, "rb") as f:
                data = f.read()
            sha = hashlib.sha256(data).hexdigest()
            git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            repo["files"][path] = {"data": data, "sha256": sha, "oid": git}
            BLOBS[sha] = (name, path)
        # a small file that is not in LFS, as every repository has
        attrs = b"*.gguf filter=lfs diff=lfs merge=lfs -text\n"
        repo["files"][".gitattributes"] = {"data": attrs, "sha256": None,
                                           "oid": hashlib.sha1(b"blob %d\0" % len(attrs) + attrs).hexdigest()}
        REPOS[name] = repo


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def record(self, status):
        if ARGS.log:
            line = json.dumps({"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                               "status": status, "auth": bool(self.headers.get("Authorization"))})
            with LOCK, open(ARGS.log, "a") as f:
                f.write(line + "\n")

    def reply(self, status, body=b"", headers=None, ctype="application/json"):
        self.record(status)
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, text):
        self.reply(status, json.dumps({"error": text}).encode(), {"X-Error-Code": "RepoNotFound" if status == 404 else "Auth"})

    def repo_of(self, user, model):
        name = user + "/" + model
        repo = REPOS.get(name)
        if repo is None:
            self.error(404, "Repository not found")
            return None, name
        auth = self.headers.get("Authorization")
        if repo["private"] and auth is None:
            self.error(401, "Invalid username or password.")
            return None, name
        if repo["private"] and auth != "Bearer " + ARGS.token:  # a token without access (a gated model)
            self.error(403, "Access to model %s is restricted." % name)
            return None, name
        return repo, name

    def tree(self, repo):
        out = []
        dirs = set()
        for path, f in repo["files"].items():
            parts = path.split("/")
            for k in range(1, len(parts)):
                dirs.add("/".join(parts[:k]))
            e = {"type": "file", "oid": f["oid"], "size": len(f["data"]), "path": path}
            if f["sha256"]:
                e["lfs"] = {"oid": f["sha256"], "size": len(f["data"]), "pointerSize": 134}
            out.append(e)
        for d in sorted(dirs):
            out.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
        if ARGS.evil:
            for p in ["../../evil-Q4_K_M.gguf", "/etc/evil-Q4_K_M.gguf", "a/../../evil-Q4_K_M.gguf", "a\\..\\evil.gguf"]:
                out.insert(0, {"type": "file", "oid": "1" * 40, "size": 4, "path": p,
                               "lfs": {"oid": "2" * 64, "size": 4, "pointerSize": 134}})
            out.insert(0, {"type": "file", "path": 42})
            out.insert(0, "not an object")
        return out

    def api(self, parts):
        # /api/models/USER/MODEL/refs | /api/models/USER/MODEL/tree/REV
        if len(parts) < 5:
            return self.error(404, "Not found")
        repo, name = self.repo_of(parts[2], parts[3])
        if repo is None:
            return
        if parts[4] == "refs":
            body = {"tags": [], "branches": [{"name": "dev", "ref": "refs/heads/dev", "targetCommit": "f" * 40},
                                             {"name": "main", "ref": "refs/heads/main", "targetCommit": repo["commit"]}],
                    "converts": []}
            return self.reply(200, json.dumps(body).encode())
        if parts[4] == "tree" and len(parts) >= 6 and parts[5] in ("main", repo["commit"]):
            return self.reply(200, json.dumps(self.tree(repo)).encode())
        return self.error(404, "Revision not found")

    def resolve(self, parts):
        # /USER/MODEL/resolve/REV/PATH...
        repo, name = self.repo_of(parts[0], parts[1])
        if repo is None:
            return
        path = unquote("/".join(parts[4:]))
        f = repo["files"].get(path)
        if f is None or parts[3] not in ("main", repo["commit"]):
            return self.error(404, "Entry not found")
        if ARGS.redirect_loop:
            return self.reply(302, b"", {"Location": self.path})
        if f["sha256"] is None:
            return self.reply(200, f["data"], {"ETag": '"%s"' % f["oid"], "X-Repo-Commit": repo["commit"]},
                              "application/octet-stream")
        self.reply(302, b"", {"Location": "/cdn/%s?name=%s" % (f["sha256"], os.path.basename(path)),
                              "X-Linked-Etag": '"%s"' % f["sha256"], "X-Linked-Size": str(len(f["data"])),
                              "X-Repo-Commit": repo["commit"], "ETag": '"%s"' % f["oid"]})

    def cdn(self, sha):
        if sha not in BLOBS:
            return self.error(404, "No such blob")
        name, path = BLOBS[sha]
        data = REPOS[name]["files"][path]["data"]
        if path in ARGS.corrupt:
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:]
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and not ARGS.no_range and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                return self.reply(416, b"", {"Content-Range": "bytes */%d" % len(data)})
            status = 206
        body = data[start:]
        self.record(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"%s"' % sha)
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        with LOCK:
            cut = path in ARGS.cut_once and path not in CUT_DONE
            if cut:
                CUT_DONE.add(path)
        if cut:
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        step = 16384 if path in ARGS.slow else len(body) or 1
        for k in range(0, len(body), step):
            self.wfile.write(body[k:k + step])
            if path in ARGS.slow:
                self.wfile.flush()
                time.sleep(0.02)

    def route(self):
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p != ""]
        if parts[:2] == ["api", "models"]:
            return self.api(parts)
        if len(parts) == 2 and parts[0] == "cdn":
            return self.cdn(parts[1])
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(parts)
        return self.error(404, "Not found")

    def do_GET(self):
        try:
            self.route()
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_HEAD = do_GET


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log")
    ap.add_argument("--repo", action="append", default=[], help="USER/MODEL=PATH:LOCAL_FILE,...")
    ap.add_argument("--private", action="append", default=[])
    ap.add_argument("--token", default="hf_TuttiTestToken0123456789abcdefghijk")
    ap.add_argument("--cut-once", action="append", default=[])
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--slow", action="append", default=[])
    ap.add_argument("--redirect-loop", action="store_true")
    ap.add_argument("--evil", action="store_true")
    ap.add_argument("--no-range", action="store_true")
    ARGS = ap.parse_args()
    load_repos(ARGS.repo, set(ARGS.private))
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    if ARGS.port_file:
        tmp = ARGS.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(tmp, ARGS.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())

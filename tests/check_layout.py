#!/usr/bin/env python3
"""The tree's layout rules, checked over the sources (ctest: test_layout).

1. Layers: every folder under src/ is a layer, and `#include "X/..."` in
   src/A/ makes A depend on X.  The layers form a stack (LAYERS below, bottom
   first): a layer includes only layers below it, so the include graph has no
   directory cycle.  A folder missing from the stack is an error, so a new
   layer has to say where it sits.
2. Front ends: src/cli/ includes only tutti.h, its own headers and the
   server front end's entry (server/server.h); src/server/ only tutti.h and
   its own headers; both also util's header-only helpers (the growing
   buffer util/buf.h, the clock util/clock.h, a path's file name
   util/path.h).  Both link libtutti.so's public API alone.
3. Function length: no function in src/, tests/, fuzz/, bench/ or examples/
   is longer than MAX_LINES lines (from the line of its opening brace to the
   line of its closing one), outside generated code and kernel tables
   (EXEMPT: none today).
4. Data: models/ (the four quick-start models, which the mission allows in
   the tree) and tests/data/ (small references and random-weight files made
   by scripts beside them) hold at most 16 MB together (16,000 KB, each
   file counted in whole 4 KiB blocks, as du -k counts them), and no other
   file of the repository is larger than 2 MB (fuzz corpora are packed one
   file per harness, fuzz/corpus.sh).
5. Test parts (tests/test_common.h): in a test that lists cases with
   shared_unit_test(), every case that calls require_shared() is listed so
   (else `ctest -L core` would run it without ../shared), and main() calls
   test_select_part().
6. Format: every C file of src/, include/, tests/, fuzz/, bench/ and
   examples/ is as clang-format (14, Debian's; the tree's .clang-format)
   writes it.  Where clang-format is missing the rule is not checked, unless
   TUTTI_CI is set (CI installs it: scripts/bootstrap.sh).

usage: check_layout.py SOURCE_DIR   (exit 0: all rules hold; 1: the
violations are listed)
"""
import os
import re
import shutil
import subprocess
import sys

# bottom first: a layer may include the layers before it
LAYERS = ["util", "net", "hub", "quant", "gguf", "kernels", "tokenizer", "grammar", "chat", "sample", "model", "member",
          "fusion", "merge", "mpi", "ensemble", "server", "cli"]
# util's header-only helpers (static inline): no symbol of the library
HEADER_ONLY = r'util/(buf|clock|path)\.h'
FRONT_ENDS = {
    "cli": re.compile(r'^(tutti\.h|cli/[a-z_]+\.h|server/server\.h|' + HEADER_ONLY + r')$'),
    "server": re.compile(r'^(tutti\.h|server/[a-z_]+\.h|' + HEADER_ONLY + r')$'),
}
MAX_LINES = 150
EXEMPT = set()  # "path:function" of generated code or kernel tables

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root, top):
    for d, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = [x for x in dirs if x != "node_modules"]  # npm packages' own C (tests/serve)
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.join(d, f)


def check_layers(root):
    errors = []
    rank = {name: i for i, name in enumerate(LAYERS)}
    src = os.path.join(root, "src")
    edges = {}
    for layer in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, layer)):
            continue
        if layer not in rank:
            errors.append(f"src/{layer}/: a layer that check_layout.py's LAYERS does not place")
            continue
        for path in sources(root, os.path.join("src", layer)):
            rel = os.path.relpath(path, root)
            for inc in INCLUDE.findall(open(path, encoding="utf-8", errors="replace").read()):
                if layer in FRONT_ENDS and not FRONT_ENDS[layer].match(inc):
                    errors.append(f"{rel}: includes \"{inc}\": a front end uses only the public tutti.h")
                dep = inc.split("/")[0] if "/" in inc else None
                if dep is None or dep == layer:
                    continue
                edges.setdefault(layer, {}).setdefault(dep, rel)
                if dep not in rank:
                    errors.append(f"{rel}: includes \"{inc}\" from an unknown layer")
                elif rank[dep] > rank[layer]:
                    errors.append(f"{rel}: includes \"{inc}\": {layer} sits below {dep} "
                                  f"(layers, bottom first: {' '.join(LAYERS)})")
    cycle = find_cycle(edges)
    if cycle:
        errors.append("include cycle between folders: " + " -> ".join(cycle))
    return errors


def find_cycle(edges):
    state = {}

    def visit(u, stack):
        state[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, {})):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if not state.get(v):
                c = visit(v, stack)
                if c:
                    return c
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(edges):
        if not state.get(u):
            c = visit(u, [])
            if c:
                return c
    return None


def blank_comments_and_strings(text):
    """text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


HEADER = re.compile(r"([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(__attribute__\s*\(\(.*\)\)\s*)?$", re.S)


def functions(path):
    """(name, first line, last line) of every function definition in path."""
    text = blank_comments_and_strings(open(path, encoding="utf-8", errors="replace").read())
    depth, start, line, found = 0, None, 1, []
    last_stmt_end = 0  # offset after the last ';', '}' or preprocessor line at depth 0
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
            if depth == 0 and text[last_stmt_end:i].lstrip().startswith("#"):
                last_stmt_end = i + 1
        elif c == "{":
            if depth == 0:
                header = text[last_stmt_end:i].strip()
                m = HEADER.search(header)
                is_fn = m and not re.match(r"(typedef\s+)?(struct|union|enum)\b", header) and "=" not in header
                start = (m.group(1), line) if is_fn else None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start:
                    found.append((start[0], start[1], line))
                start = None
                last_stmt_end = i + 1
        elif c == ";" and depth == 0:
            last_stmt_end = i + 1
    return found


def check_lengths(root):
    errors = []
    for top in ("src", "tests", "fuzz", "bench", "examples"):
        for path in sources(root, top):
            rel = os.path.relpath(path, root)
            for name, a, b in functions(path):
                if b - a + 1 > MAX_LINES and f"{rel}:{name}" not in EXEMPT:
                    errors.append(f"{rel}:{a}: {name} is {b - a + 1} lines (at most {MAX_LINES}: split it "
                                  "along its own steps)")
    return errors


# models/ (the quick start's four models, about 9.4 MB) and tests/data/ (the
# core tests' and the MoE/quant references) together: a clone stays small
DATA_DIRS = ("models/", "tests/data/")
# counted as the disk holds them (du -k: each file in whole 4 KiB blocks),
# 16 MB read as 16,000 KB, the stricter of its two readings
DATA_BLOCK = 4096
DATA_MAX = 16000 * 1024
FILE_MAX = 2 << 20


def repository_files(root):
    """The repository's files (git's list when it is a checkout, else the tree without build folders)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        return [f for f in out.decode().split("\0") if f and os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(("build", ".")) and x != "node_modules"]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def check_sizes(root):
    errors, data = [], 0
    for f in repository_files(root):
        size = os.path.getsize(os.path.join(root, f))
        if f.startswith(DATA_DIRS):
            data += (size + DATA_BLOCK - 1) // DATA_BLOCK * DATA_BLOCK
        elif size > FILE_MAX:
            errors.append(f"{f}: {size} bytes; outside models/ and tests/data/ no file may pass 2 MB")
    if data > DATA_MAX:
        errors.append(f"models/ and tests/data/ hold {data // 1024} KB (in 4 KiB blocks), over {DATA_MAX // 1024} KB together")
    return errors


CASE = re.compile(r"\b(cmocka_unit_test|shared_unit_test)\((\w+)\)")


def check_test_parts(root):
    errors = []
    tests = os.path.join(root, "tests")
    for f in sorted(os.listdir(tests)):
        if not (f.startswith("test_") and f.endswith(".c")) or f == "test_common.c":
            continue
        path = os.path.join(tests, f)
        cases = {name: kind for kind, name in CASE.findall(open(path, encoding="utf-8").read())}
        if "shared_unit_test" not in cases.values():
            continue
        text = blank_comments_and_strings(open(path, encoding="utf-8").read())
        if "test_select_part();" not in text:
            errors.append(f"tests/{f}: lists shared_unit_test() cases but main() does not call test_select_part()")
        lines = text.split("\n")
        for name, a, b in functions(path):
            if cases.get(name) == "cmocka_unit_test" and "require_shared();" in "\n".join(lines[a - 1:b]):
                errors.append(f"tests/{f}:{a}: {name} needs ../shared (require_shared): list it with "
                              "shared_unit_test(), so that ctest -L core leaves it out")
    return errors


FORMAT_DIRS = ("src/", "include/", "tests/", "fuzz/", "bench/", "examples/")


def check_format(root):
    exe = shutil.which("clang-format")
    if not exe:
        return ["clang-format is missing (scripts/bootstrap.sh installs it)"] if os.environ.get("TUTTI_CI") else []
    files = [f for f in repository_files(root) if f.startswith(FORMAT_DIRS) and f.endswith((".c", ".h"))
             and "/node_modules/" not in f]
    errors = []
    for k in range(0, len(files), 64):
        r = subprocess.run([exe, "--dry-run", "--Werror", "--style=file"] + files[k:k + 64], cwd=root,
                           capture_output=True, text=True)
        if r.returncode != 0:
            bad = sorted({line.split(":")[0] for line in r.stderr.splitlines() if ": error:" in line})
            errors += [f"{f}: not as clang-format writes it (run: clang-format -i {f})" for f in bad]
    return errors


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    root = sys.argv[1]
    errors = (check_layers(root) + check_lengths(root) + check_sizes(root) + check_test_parts(root) +
              check_format(root))
    for e in errors:
        print(e)
    if errors:
        print(f"check_layout: {len(errors)} violation(s)")
        return 1
    print("check_layout: layers, front ends, function lengths, data sizes and format are as they should be")
    return 0


if __name__ == "__main__":
    sys.exit(main())

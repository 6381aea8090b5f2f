#!/usr/bin/python3
"""Regex oracle of test_grammar_regex.c: Python's re, the engine behind
python-jsonschema's `pattern` (re.search).

Reads a JSON file [[pattern, [string, ...]], ...]; prints one JSON line per
pattern: null when Python cannot compile it, else the list of
re.search(pattern, s) is not None for its strings."""
import json, re, sys

for pat, strings in json.load(open(sys.argv[1], encoding="utf-8")):
    try:
        rx = re.compile(pat)
    except re.error:
        print("null")
        continue
    print(json.dumps([rx.search(s) is not None for s in strings]))

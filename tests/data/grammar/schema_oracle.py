#!/usr/bin/python3
"""Schema oracle of test_grammar_schema.c: python-jsonschema with its format
checker.  Reads a JSON file {"schemas": [schema text, ...], "texts": [[index,
text(, canon)], ...]}; prints one line per text: 1 when text is one JSON value
valid against schemas[index] (the validator its $schema names, else Draft
2020-12; formats checked) and, with canon true, every string in it is spelled
canonically, else 0."""
import json, re, sys
import jsonschema

d = json.load(open(sys.argv[1], encoding="utf-8"))
validators = []
for t in d["schemas"]:
    s = json.loads(t)
    cls = jsonschema.validators.validator_for(s, default=jsonschema.Draft202012Validator)
    validators.append(cls(s, format_checker=cls.FORMAT_CHECKER))
# a JSON string literal (the text is valid JSON when this is asked)
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def canonical(t):
    """every string of t (values and keys) spelled as json.dumps writes it
    with ensure_ascii=False (llama.cpp's spelling too)"""
    return all(json.dumps(json.loads(m), ensure_ascii=False) == m for m in STRING.findall(t))


for x in d["texts"]:
    i, t = x[0], x[1]
    try:
        ok = validators[i].is_valid(json.loads(t))
        if ok and len(x) > 2 and x[2]:
            ok = canonical(t)
    except (ValueError, RecursionError):
        ok = False
    print(1 if ok else 0)

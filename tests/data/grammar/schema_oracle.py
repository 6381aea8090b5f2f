#!/usr/bin/python3
"""Schema oracle of test_grammar_schema.c: python-jsonschema with its format
checker.  Reads a JSON file {"schemas": [schema text, ...], "texts": [[index,
text], ...]}; prints one line per text: 1 when text is one JSON value valid
against schemas[index] (the validator its $schema names, else Draft
2020-12; formats checked), else 0."""
import json, sys
import jsonschema

d = json.load(open(sys.argv[1], encoding="utf-8"))
validators = []
for t in d["schemas"]:
    s = json.loads(t)
    cls = jsonschema.validators.validator_for(s, default=jsonschema.Draft202012Validator)
    validators.append(cls(s, format_checker=cls.FORMAT_CHECKER))
for i, t in d["texts"]:
    try:
        ok = validators[i].is_valid(json.loads(t))
    except (ValueError, RecursionError):
        ok = False
    print(1 if ok else 0)

#!/usr/bin/python3
"""Number oracle of test_grammar_number.c: how python-jsonschema judges a
number text against bounds.  Reads a JSON file [[case, [text, ...]], ...]
where case is {"lo": TEXT|null, "lo_strict": bool, "hi": ..., "hi_strict":
..., "integer": bool, "multiple": TEXT|null}; prints one JSON line per case:
whether each text is a JSON number valid against the schema that case
stands for (jsonschema's Draft 2020-12 validator)."""
import json, sys
import jsonschema

for case, texts in json.load(open(sys.argv[1], encoding="utf-8")):
    schema = {"type": "integer" if case["integer"] else "number"}
    for side, strict_key, kw, xkw in (("lo", "lo_strict", "minimum", "exclusiveMinimum"),
                                      ("hi", "hi_strict", "maximum", "exclusiveMaximum")):
        if case[side] is not None:
            schema[xkw if case[strict_key] else kw] = json.loads(case[side])
    if case.get("multiple"):
        schema["multipleOf"] = json.loads(case["multiple"])
    v = jsonschema.Draft202012Validator(schema)
    out = []
    for t in texts:
        try:
            x = json.loads(t)
            ok = isinstance(x, (int, float)) and not isinstance(x, bool) and v.is_valid(x)
        except (ValueError, OverflowError):
            ok = False
        out.append(ok)
    print(json.dumps(out))

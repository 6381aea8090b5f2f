#!/usr/bin/python3
"""Independent validator of constrained generations (test_grammar_gen.c).

Reads JSON lines {"check": KIND, "arg": ..., "text": ..., "what": ...} and
checks each text with Python's own parsers, never with tutti's grammar code:
  schema  json.loads(text) is valid against the JSON schema file `arg`
          (python3-jsonschema, Draft 2020-12)
  arith   text = " " + an arithmetic expression + "=", checked with ast
  regex   re.fullmatch(arg, text)
Prints every failure; exit status 1 if there is one.
"""
import ast, json, re, sys
import jsonschema

def arith_ok(t):
    if not (t.startswith(" ") and t.endswith("=")):
        return False
    try:
        tree = ast.parse(t[1:-1], mode="eval")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, int):
                return False
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div)):
            return False
    # no spaces, no leading zeros beyond what the grammar allows (digits only)
    return re.fullmatch(r"[0-9+\-*/()]+", t[1:-1]) is not None

bad = 0
n = 0
schemas = {}
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    n += 1
    t, kind, arg = r["text"], r["check"], r.get("arg")
    ok = False
    why = ""
    try:
        if kind == "schema":
            if arg not in schemas:
                schemas[arg] = json.load(open(arg))
            jsonschema.validate(json.loads(t), schemas[arg], cls=jsonschema.Draft202012Validator)
            ok = True
        elif kind == "arith":
            ok = arith_ok(t)
        elif kind == "regex":
            ok = re.fullmatch(arg, t, re.S) is not None
    except Exception as e:  # invalid JSON or schema violation
        why = str(e).splitlines()[0]
    if not ok:
        bad += 1
        print("INVALID (%s, %s): %r %s" % (kind, r.get("what", ""), t, why))
print("%d of %d outputs valid" % (n - bad, n))
sys.exit(1 if bad else 0)

#!/usr/bin/python3
"""Expected outputs of the Jinja case table of tests/test_chat.c, rendered by
Python's jinja2 configured as Hugging Face transformers renders chat templates
(transformers/utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), the globals raise_exception and strftime_now and
the tojson filter that calls json.dumps (ensure_ascii=False by default).

Run with Debian's /usr/bin/python3 (python3-jinja2):
    /usr/bin/python3 tests/data/chat/make_jinja_cases.py > tests/data/chat/jinja_cases.jsonl
Each output line: {"template", "context" (JSON text of the variables),
"expected" (text) or "error" (the exception's message)}.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

# (template, context) pairs; the context is what the JSON entry point gets.
CASES = [
    # printed values: Python's str() of each type
    ("{{ true }}|{{ false }}|{{ True }}|{{ none }}|{{ None }}|{{ undefined_name }}", {}),
    ("{{ [1, 'a', true, none] }}", {}),
    ("{{ {'k': 'v', 'n': none, 'b': false} }}", {}),
    ("{{ [[1, [2]], {'a': [3, {'b': 'c'}]}] }}", {}),
    ("{{ 1.0 }} {{ 2.5 }} {{ 1e-05 }} {{ 0.0001 }} {{ 1e16 }} {{ 1.5e16 }} {{ 123456789.0 }}", {}),
    ("{{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 7 / 7 }} {{ -0.0 }} {{ 1e100 }} {{ 2 ** -1 }}", {}),
    ("{{ x }} {{ y }} {{ z }} {{ w }}", {"x": 1.0, "y": 1e-05, "z": 3.14159, "w": 1e22}),
    ("{{ [1.0, 0.5, 1e-07] }}", {}),
    ("{{ [\"it's\", 'say \"hi\"', 'both \\' and \"', 'back\\\\slash'] }}", {}),
    ("{{ ['tab\\there', 'nl\\nhere', 'cr\\rhere'] }}", {}),
    ("{{ ['caf\u00e9', '\u4f60\u597d', '\U0001F600'] }}", {}),
    ("{{ {'a': 1, 'b': [1, 2]} | string }}|{{ [true] | string }}|{{ none | string }}", {}),
    ("{{ 'x' ~ true ~ none ~ 1.0 ~ [1] }}", {}),
    ("{{ messages }}", {"messages": [{"role": "user", "content": "Hi"}]}),
    ("{{ 3 }} {{ -7 }} {{ 10 // 3 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 % -3 }}", {}),
    ("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}", {}),
    # tojson: json.dumps with HF's defaults and every keyword argument
    ("{{ {'a': [1, 2.5, 'x\"y'], 'b': none, 'c': true} | tojson }}", {}),
    ("{{ {'a': [1, 2], 'b': {}, 'c': []} | tojson(indent=2) }}", {}),
    ("{{ [1, [2, {'x': 3}]] | tojson(indent=4) }}", {}),
    ("{{ {'b': 1, 'a': {'d': 2, 'c': 3}} | tojson(sort_keys=true) }}", {}),
    ("{{ {'a': 1, 'b': [1, 2]} | tojson(separators=(',', ':')) }}", {}),
    ("{{ {'a': 1, 'b': [1, 2]} | tojson(indent=1, separators=(',', ': ')) }}", {}),
    ("{{ 'caf\u00e9 \u4f60 \U0001F600' | tojson }}", {}),
    ("{{ 'caf\u00e9 \u4f60 \U0001F600' | tojson(ensure_ascii=true) }}", {}),
    ("{{ '\\u0001\\u001f\\u007f \\t\\n\\r\\b\\f \\\\ /' | tojson }}", {}),
    ("{{ [1.0, 1e-05, 0.5, 100.0, 1e16, -2.0] | tojson }}", {}),
    ("{{ x | tojson }}", {"x": {"f": 1.0, "g": 1e-05, "i": 3, "s": "s", "l": [True, False, None]}}),
    ("{{ {'a': 1} | tojson(indent=0) }}", {}),
    ("{{ [] | tojson(indent=2) }}|{{ {} | tojson(indent=2) }}|{{ [[]] | tojson(indent=2) }}", {}),
    ("{{ 'x' | tojson }}|{{ 5 | tojson }}|{{ none | tojson }}|{{ false | tojson }}", {}),
    ("{{ tools | tojson(indent=4) }}", {"tools": [{"type": "function", "function": {"name": "get", "description": "Get \u00e9", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]}),
    ("{{ {'z': 1, 'a': 2} | tojson(sort_keys=true, indent=2) }}", {}),
    ("{{ {'a': 'b'} | tojson(separators=(', ', ' = ')) }}", {}),
    # globals HF and Jinja2 define
    ("{{ raise_exception is defined }}{{ strftime_now is defined }}{{ range is defined }}{{ namespace is defined }}{{ dict is defined }}{{ nothing is defined }}", {}),
    ("{{ strftime_now('%Y') | length }}", {}),
    ("{{ raise_exception('bad roles') }}", {}),
    ("{{ dict(a=1, b='x') }}", {}),
    ("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }}", {}),
    # tests
    ("{{ x is defined }}{{ y is defined }}{{ n is none }}{{ 'a' is string }}{{ 1 is number }}{{ {} is mapping }}{{ [] is iterable }}{{ 1 is not string }}{{ true is true }}{{ x is false }}", {"x": 1, "n": None}),
    ("{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby(3) }}{{ 9 is divisibleby 4 }}", {}),
    ("{{ 1 is integer }}{{ 1.0 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 1 is boolean }}{{ none is none }}", {}),
    ("{{ 'abc' is sequence }}{{ [1] is sequence }}{{ 1 is sequence }}{{ 'a' is iterable }}{{ 5 is iterable }}", {}),
    ("{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'aB' is lower }}{{ 2 is eq 2 }}{{ 2 is ne 2 }}{{ 1 is lt 2 }}{{ 3 is ge 3 }}", {}),
    ("{{ 'a' is in 'abc' }}{{ 2 is in [1, 2] }}{{ 'k' is in {'k': 1} }}{{ 'z' is in 'abc' }}", {}),
    ("{{ x is callable }}{{ raise_exception is callable }}", {"x": 1}),
    ("{% macro m() %}{% endmacro %}{{ m is callable }}{{ m is defined }}", {}),
    ("{{ none is sameas none }}{{ 1 is sameas 1 }}{{ x is sameas false }}", {"x": False}),
    # in / not in
    ("{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1,2] }} {{ 'x' not in 'abc' }} {{ '' in 'a' }}", {}),
    ("{{ 'user' in messages[0].role }}{{ 'content' in messages[0] }}{{ 'tool_calls' in messages[0] }}", {"messages": [{"role": "user", "content": "x"}]}),
    # slicing
    ("{{ [1,2,3][-1] }} {{ [1,2,3,4][1:3] }} {{ [1,2,3,4][::-1] }} {{ 'hello'[1:] }} {{ 'hello'[::-2] }} {{ [1,2,3,4,5][-2:] }}", {}),
    ("{{ 'h\u00e9llo'[1:3] }}|{{ 'abc'[5:] }}|{{ 'abc'[-10:2] }}|{{ [1,2,3][1:1] }}|{{ messages[1:] }}", {"messages": [1, 2, 3]}),
    ("{{ 'abcdef'[::2] }}{{ 'abcdef'[4:1:-1] }}{{ [0,1,2,3,4,5][::3] }}", {}),
    # string methods
    ("{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na'.lstrip('\\n') }}|{{ 'a\\n'.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}", {}),
    ("{{ 'a b c'.split(' ', 1) }}|{{ 'a-b-c'.split('-', 1) }}|{{ ''.split() }}|{{ ''.split(',') }}", {}),
    ("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('x') }}", {}),
    ("{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'a-b'.replace('-', '+') }}{{ 'aaa'.replace('a', 'b', 2) }}{{ 'ab'.replace('', '-') }}", {}),
    ("{{ 'hello world'.title() }}|{{ \"they're bill's\".title() }}|{{ 'x1y 2z a.b'.title() }}|{{ 'hELLO wORLD'.capitalize() }}", {}),
    ("{{ 'hello world' | title }}|{{ \"they're bill's\" | title }}|{{ 'x1y a-b (c) a.b' | title }}|{{ 'hELLO' | capitalize }}", {}),
    ("{{ 'abcabc'.find('c') }}{{ 'abc'.find('z') }}{{ 'abcabc'.count('b') }}{{ 'abc'.index('c') }}", {}),
    ("{{ '-'.join(['a', 'b']) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'Ab'.islower() }}", {}),
    ("{{ 'x<think>\\nr\\n</think>\\n\\ny'.split('</think>')[-1].lstrip('\\n') }}|{{ 'x<think>\\nr\\n</think>\\n\\ny'.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {}),
    ("{{ '%s and %s' % ('a', 'b') }}|{{ '%d' % 5 }}", {}),
    ("{{ 'a' * 3 }}{{ [1] * 2 }}{{ 'ab' + 'cd' }}", {}),
    # filters
    ("[{{ '  a b \\n' | trim }}]{{ 'ab' | upper }}{{ 'AB' | lower }}{{ 'hello world' | capitalize }}", {}),
    ("{{ [1,2,3] | length }}{{ 'abc' | length }}{{ [1,2,3] | first }}{{ [1,2,3] | last }}{{ [1,2,3] | join('-') }}{{ [1,2,3] | reverse | list }}{{ 'abc' | reverse }}", {}),
    ("{{ x | default('d') }}{{ y | default('d') }}{{ '' | default('e', true) }}{{ none | default('n') }}", {"y": "Y"}),
    ("{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}", {"d": {"x": 1, "y": 2}}),
    ("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]}),
    ("{{ msgs | rejectattr('role', 'equalto', 'user') | list }}|{{ msgs | selectattr('x') | list | length }}", {"msgs": [{"role": "user", "x": 1}, {"role": "bot"}]}),
    ("{{ [3,1,2] | sort }}{{ [1,1,2] | unique | list }}{{ '42' | int + 1 }}{{ 3 | string + 'x' }}{{ '3.5' | float }}{{ 'x' | int }}", {}),
    ("{{ [3,1,2] | sort(reverse=true) }}{{ ['b', 'A', 'c'] | sort }}{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}", {}),
    ("{{ xs | sort(attribute='n') | map(attribute='n') | list }}", {"xs": [{"n": 2}, {"n": 1}, {"n": 3}]}),
    ("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}", {}),
    ("{{ [1, 2, 3] | sum }}{{ [1, 2, 3] | min }}{{ [1, 2, 3] | max }}{{ [1.5, 2] | sum }}{{ -3 | abs }}", {}),
    ("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }}", {}),
    ("{{ {'b': 1, 'a': 2} | dictsort }}{{ {'b': 1, 'a': 2} | dictsort(by='value') }}", {}),
    ("{{ [1, 0, 2, none] | select | list }}{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3] | reject('even') | list }}", {}),
    ("{{ ['a', 'b'] | map('upper') | list }}{{ 'abc' | list }}{{ 'ab' | center(6) }}|{{ 'one two  three' | wordcount }}", {}),
    ("{{ 1 | bool }}{{ '' | bool }}{{ 0.0 | bool }}{{ [] | length }}{{ {} | length }}", {}),
    ("{{ xs | map(attribute='a', default='z') | list }}", {"xs": [{"a": 1}, {}]}),
    # loop variables
    ("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ x }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {}),
    ("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", {}),
    ("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {}),
    ("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}", {}),
    ("{% for x in [1,2,3,4] if x % 2 == 0 %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}", {}),
    ("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }}{% endfor %}", {}),
    ("{% for m in messages %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}", {"messages": [{"role": "a"}, {"role": "b"}]}),
    # scoping and namespace
    ("{% set x = 1 %}{% for i in [1,2] %}{% set x = i %}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("{% set ns = namespace() %}{% set ns.found = false %}{% for m in ['a', 'b'] %}{% if m == 'b' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t[0] + t[1] }}", {}),
    ("{% set s %}a{{ 1 + 1 }}b{% endset %}[{{ s }}]", {}),
    ("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b='x') }}{{ m(b=3, a=4) }}", {}),
    ("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% endcall %}", {}),
    ("{% filter upper %}abc{{ 'd' }}{% endfilter %}", {}),
    # whitespace control with trim_blocks / lstrip_blocks
    ("{% if true %}\nA\n{% endif %}\nB", {}),
    ("x\n    {% if true %}y{% endif %}\n", {}),
    ("a  \n  {{- 'b' -}}  \n  c", {}),
    ("{{ 'a' }}\nb", {}),
    ("a\n\n", {}),
    ("a{# c #}\nb {#- x -#} c", {}),
    ("{% raw %}{{ x }}{% endraw %}", {}),
    ("a\r\nb\rc{{ 'x\r\ny' }}{{ m }}", {"m": "keep\r\n"}),
    ("{% for i in [1] %}\r\n{{ i }}\r\n{% endfor %}\r\n", {}),
    ("  {%+ if true %}x{% endif %}", {}),
    ("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("<{%- if true %} a {% endif -%}>", {}),
    # conditionals and expressions
    ("{% for v in [1,2,3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    ("{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}{{ 'y' if 0 }}|", {}),
    ("{{ 1 < 2 and 2 <= 2 }} {{ not 1 == 1 }} {{ 'b' > 'a' }} {{ 0 or 'x' }} {{ '' and 'y' }} {{ none or [] }}", {}),
    ("{{ [1, 'a', [2]] }} {{ {'a': 1, 'b': [true, none]} }} {{ {'a': {'b': 5}}['a'].b }}", {}),
    ("{{ 'a\\nb\\t\\'c\\'' }}|{{ \"q\\\"\" }}", {}),
    ("{{ x.y }}|{{ x['y'] }}|{{ x.get('z', 'd') }}|{{ x.get('z') }}", {"x": {"y": "Y"}}),
    ("{{ messages[0]['content'] | trim }}{{ messages | length }}{{ messages[-1].role }}", {"messages": [{"role": "user", "content": "  Hi  "}, {"role": "assistant", "content": "Yo"}]}),
    ("{{ (1, 2) }}|{{ (1,) }}|{{ () }}", {}),
    # undefined values, as Jinja2's default Undefined treats them
    ("{{ x.y }}|", {}),
    ("{{ x.y is defined }}", {}),
    ("{{ x[0] }}", {}),
    ("{{ none.x }}|{{ 'abc'.foo }}|{{ {'a': 1}.a }}|{{ m.content is none }}", {"m": {"content": None}}),
    ("{{ 'a' in x }}{{ x | length }}{% for a in x %}{% endfor %}ok{{ x | default(none) }}{{ x is string }}", {}),
    ("{{ 1 if x }}|{{ x | trim }}|{{ (x or '') | trim }}|{{ x ~ 'a' }}|{{ loop }}", {}),
    # more operators and conversions
    ("{{ 'a' < 1 }}", {}),
    ("{{ 5 / 0 }}", {}),
    ("{{ true + 1 }} {{ -1 ** 2 }} {{ 2 ** 0.5 }} {{ 10 // 0.3 }} {{ 1e308 * 10 }} {{ 7 % 2.5 }}", {}),
    ("{{ [1,2] == [1,2] }}{{ (1,2) == [1,2] }}{{ (1, 2) == (1, 2) }}", {}),
    ("{{ 3.0 | int }}{{ '0x1A' | int(base=16) }}{{ '12' | int(base=8) }}{{ 1 | float }}{{ 'x' | float }}", {}),
    ("{{ [1, 2] | join }}{{ 'abc' | first }}{{ 'abc' | last }}{{ '' | first }}|{{ 'Hello' | wordcount }}", {}),
    ("{{ [3, 1] | max }}{{ [] | max }}|{{ {'a': 1} | list }}{{ x | items | list }}", {"x": {"a": 1}}),
    ("{{ 'a,b'.split(',', maxsplit=1) }}{{ 'aXbXc'.rsplit('X', 1) }}{{ 'a b  c'.rsplit() }}{{ 'a,b,c'.rsplit(',') }}", {}),
    ("{{ messages | map(attribute='role') | join(', ') }}", {"messages": [{"role": "a"}, {"role": "b"}]}),
    ("{{ [1,2].append(3) }}", {}),
    ("{{ 'x' + 1 }}", {}),
    ("{{ 1 + none }}", {}),
    ("{{ x + 1 }}", {}),
]


# The four real templates of ../shared/ref/chat/ on conversations that reach
# their tool, think and multi-part branches (the template text is stored in
# each line, so the table needs nothing else).
SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../shared/ref/chat")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city \u00e9",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "  What is 2+2?  "}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello!"},
                  {"role": "user", "content": "It's \"quoted\" \u00e9 \U0001F600\n"}], "add_generation_prompt": False},
    {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "n": 1.0}}}]},
                  {"role": "tool", "content": "22 C"}], "tools": TOOLS, "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": " part one "}, {"type": "image"}]}],
     "add_generation_prompt": True, "enable_thinking": False},
]
BOS = {"qwen3": None, "llama3": "<|begin_of_text|>", "gemma3": "<bos>", "phi-3": "<s>"}


def shared_cases():
    for name in ["qwen3", "llama3", "gemma3", "phi-3"]:
        with open(os.path.join(SHARED, name + ".jinja"), encoding="utf-8") as f:
            tmpl = f.read()
        for conv in CONVERSATIONS:
            ctx = dict(conv)
            if BOS[name]:
                ctx["bos_token"] = BOS[name]
            yield tmpl, ctx


def main():
    out = sys.stdout
    for tmpl, ctx in CASES + list(shared_cases()):
        rec = {"template": tmpl, "context": json.dumps(ctx)}
        try:
            rec["expected"] = env.from_string(tmpl).render(**ctx)
        except Exception as e:  # the reference's error: we must fail too
            rec["error"] = "%s: %s" % (type(e).__name__, e)
        out.write(json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

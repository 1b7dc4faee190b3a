#!/usr/bin/env python3
"""Renders small Jinja snippets that pin down expression and statement semantics (slices, loop
variables, whitespace control, filters, tests, methods, undefined behaviour, errors) with Python
jinja2 in transformers' environment, into tests/data/chat-templates/semantics.json. Each case
records the output, or that jinja2 raised. Tern's tests/text/jinja/semantics_test.cpp replays them.
  .venv/bin/python tools/chat_templates/make_semantics.py
"""
import json
import pathlib

from make_expected import DATA, make_environment
import datetime

C = {"s": "Hello World", "xs": [3, 1, 2], "d": {"b": 2, "a": 1, "c": None},
     "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "tool_calls": []},
              {"role": "user", "content": " x "}],
     "n": None, "t": True, "f": 1.5, "u8": "héllo wörld ☺", "empty": "", "el": []}

CASES = [
    # literals and printing
    "{{ 1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ -0.0 }} {{ 2.5e-7 }}",
    "{{ none }} {{ None }} {{ true }} {{ False }} {{ [1, 'a', none, true, 1.0] }} {{ {'a': 1, 'b': [2]} }}",
    "{{ ('a', 1) }} {{ (1,) }} {{ () }} {{ \"it's\" }} {{ ['it\\'s', \"q\\\"d\", 'b\\\\s', 'n\\nl'] }}",
    "{{ 'a\\tb\\x41\\u00e9\\n' }}|{{ 'adj' 'acent' }}",
    "{{ 1_000 + 1 }}",
    # arithmetic
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 4 / 2 }}",
    "{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'a' + 'b' }} {{ 1 + 2 ~ 3 }} {{ 2 * 3 ~ 4 }}",
    "{{ 1 ~ 2 + 3 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}",
    "{{ true + 1 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1,2] == [1,2] }} {{ {'a':1} == {'a':1} }}",
    # comparisons and logic
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 != 2 }} {{ 2 >= 2 }}",
    "{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 2 in [1,2] }} {{ 'a' in {'a':1} }} {{ 'z' in undefined_var }}",
    "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or [] }} {{ not 0 }} {{ not 'a' }} {{ not none and true }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if n else 'no' }} [{{ 'only' if n }}] {{ 1 if 0 else 2 if 0 else 3 }}",
    "{{ 1 < 'a' }}",
    # subscripts, slices, attributes
    "{{ xs[0] }} {{ xs[-1] }} {{ xs[5] }}|{{ s[0] }} {{ s[-1] }} {{ s[::-1] }} {{ s[1:4] }} {{ s[:3] }} {{ s[6:] }} {{ s[::2] }} {{ s[-3:] }} {{ s[5:1:-1] }}",
    "{{ xs[::-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[-2:] }} {{ xs[10:] }} {{ xs[::-2] }} {{ u8[::-1] }} {{ u8[1:3] }} {{ u8|length }}",
    "{{ d.a }} {{ d['b'] }} {{ d.zz }}|{{ d.zz is defined }} {{ d.c is none }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }}",
    "{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs.0.role }} {{ msgs[1].tool_calls is defined }} {{ msgs[0].tool_calls is defined }}",
    "{{ n.foo }}|{{ n.foo is defined }}|{{ undefined_var is defined }}",
    "{{ d.zz.yy }}",
    "{{ undefined_var.attr }}",
    "{{ undefined_var['k'] }}",
    "{{ undefined_var }}|{{ undefined_var|default('dflt') }}|{{ n|default('dflt') }}|{{ ''|default('dflt', true) }}|{{ undefined_var|d('x') }}",
    "{{ undefined_var|length }} {{ undefined_var|list }} {% for x in undefined_var %}x{% else %}empty{% endfor %} {{ undefined_var|trim }}|{{ undefined_var|string }}|",
    "{{ undefined_var + 1 }}",
    "{{ undefined_var|tojson }}",
    "{{ undefined_var is iterable }} {{ undefined_var is sequence }} {{ undefined_var is mapping }} {{ undefined_var is string }} {{ undefined_var == undefined_other }}",
    # loops
    "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a','b') }}]{% endfor %}",
    "{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}/{{ loop.length }}{{ loop.last }} {% else %}none{% endfor %}|{% for x in xs if x > 5 %}{{ x }}{% else %}none{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'abc' %}{{ c }}-{% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}",
    "{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}",
    "{% for x in n %}{{ x }}{% endfor %}",
    "{% for x in xs %}{{ y }},{% set y = x %}{% endfor %}|{{ y }}",
    "{% set y = 0 %}{% for x in xs %}{% set y = y + x %}{{ y }},{% endfor %}|{{ y }}",
    "{% set ns = namespace(total=0, found=false) %}{% for x in xs %}{% set ns.total = ns.total + x %}{% if x == 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.found }}",
    "{% for m in msgs %}{% if loop.changed(m.role) %}+{% endif %}{{ m.role[0] }}{% endfor %}",
    # set, macros, call, filter blocks
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = [1, 2] %}{{ c }}{% set t2 = 1, 2 %}{{ t2 }}",
    "{% set block %}  inner {{ s }}\n{% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Zed') }} [{{ greet() }}]",
    "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
    "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% set x = 2 %}{{ m() }}",
    "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ s }}{% endcall %}",
    "{% macro row(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(v) row([1,2]) %}<{{ v }}>{% endcall %}",
    "{% filter upper %}shout {{ s }}{% endfilter %}|{% filter trim|lower %}  MiXed  {% endfilter %}|",
    "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}",
    # whitespace control
    "a  {%- if true %} b {% endif -%}  c",
    "  {% if true %}\n  x\n  {% endif %}\n  {{ 1 }}  {% if true %}y{% endif %}\nz\n",
    "line1\n    {% for x in xs %}\n    item {{ x }}\n    {% endfor %}\nend",
    "{{- '  a  ' -}}  \n  {{ 'b' }}\n{# comment #}\n  {#- c2 -#}  c\n   {# c3 #}  d",
    "{%+ if true %}\n+kept{% endif %}\n  {%+ if true %}x{% endif %}",
    "a\n{% if true -%}\n\n  b\n{%- endif %}\nc\n\n",
    "x {{ 1 }}\n{{ 2 }} \n {% set q = 1 %} \n{% if true %}\n\ty\n{% endif %}\n",
    "{% raw %}{{ not }} {% evaluated %}{% endraw %}\nafter",
    "{{ '{{' }} {{ '}}' }} {{ {'a': {'b': 1}} }}",
    "a\r\nb\r\n{% if true %}\r\nc{% endif %}\r\n",
    # filters
    "{{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ s|upper }} {{ s|lower }} {{ 'hello wORLD-foo(bar'|title }} {{ 'hELLO'|capitalize }}",
    "{{ s|length }} {{ xs|count }} {{ d|length }} {{ s|replace('o', '0') }} {{ s|replace('l', 'L', 2) }} {{ 'ab'|replace('', '-') }}",
    "{{ xs|join(', ') }} {{ xs|join }} {{ msgs|map(attribute='role')|join('/') }} {{ xs|first }} {{ xs|last }} {{ s|first }} {{ el|first is defined }}",
    "{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ msgs|sort(attribute='content')|map(attribute='content')|list }}",
    "{{ [1, 2, 1, 3]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ xs|reverse|list }} {{ s|reverse }} {{ xs|min }} {{ xs|max }} {{ xs|sum }}",
    "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|items|list }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }} {{ msgs|selectattr('tool_calls', 'defined')|list|length }}",
    "{{ [0, 1, '', 'a', none]|select|list }} {{ xs|select('odd')|list }} {{ xs|reject('even')|list }} {{ xs|select('divisibleby', 3)|list }} {{ xs|select('gt', 1)|list }}",
    "{{ ['1', '2']|map('int')|sum }} {{ xs|map('string')|join('+') }} {{ [' a ', 'b ']|map('trim')|list }}",
    "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|float }} {{ 'a'|float }} {{ true|int }}",
    "{{ -3|abs }} {{ -2.5|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x'|indent('>> ', first=true) }}",
    "{{ 'one two  three'|wordcount }} {{ s|string }} {{ 5|string }} {{ xs|string }} {{ '<a href=\"x\">'|e }} {{ '<b>'|safe }}",
    "{{ [1,2,3,4,5]|batch(2)|list }} {{ [1,2,3]|batch(2, 'x')|list }} {{ 'abc'|list }} {{ d|list }} {{ 'hi'|center(6) }}|",
    "{{ '%s=%d'|format('a', 3) }} {{ 'abc'|attr('upper')() }}",
    # tojson as transformers defines it
    "{{ d|tojson }} {{ xs|tojson }} {{ 'é\"<>&\\n\\u0001'|tojson }} {{ 1.0|tojson }} {{ none|tojson }} {{ true|tojson }} {{ ''|tojson }}",
    "{{ {'a': [1, {'b': []}], 'c': {}}|tojson(indent=2) }}|{{ {'a': 1}|tojson(indent=0) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
    "{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ msgs[1]|tojson }} {{ {1: 'x', none: 1}|tojson }}",
    # tests
    "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ true is number }} {{ 'a' is string }} {{ d is mapping }} {{ xs is mapping }}",
    "{{ xs is iterable }} {{ s is iterable }} {{ d is iterable }} {{ 1 is iterable }} {{ xs is sequence }} {{ d is sequence }} {{ n is none }} {{ 0 is none }}",
    "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is in [1,2] }} {{ 'a' is eq 'a' }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ n is not none }} {{ s is not string }} {{ xs is sameas xs }} {{ range is callable }} {{ 'upper' is filter }} {{ 'odd' is test }}",
    # string methods
    "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|{{ '\\n\\ta\\n'.strip() }}|{{ 'abc'.lstrip('ba') }}",
    "{{ s.startswith('Hell') }} {{ s.endswith('xx') }} {{ s.startswith(('x', 'H')) }} {{ s.split() }} {{ s.split('o') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
    "{{ '  a  b '.split() }} {{ 'a  b'.split(' ') }} {{ '  a b c '.split(none, 1) }} {{ '  a b c '.rsplit(none, 1) }} {{ ''.split(',') }} {{ ''.split() }}",
    "{{ s.replace('l', 'L') }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ \"they're\".title() }} {{ 'hELLO'.capitalize() }}",
    "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.index('W') }} {{ s.count('l') }} {{ u8.find('w') }} {{ '-'.join(['a', 'b']) }}",
    "{{ '{} and {}'.format(1, 'x') }} {{ '{0}{name}'.format('a', name='b') }} {{ 'a\\nb'.splitlines() }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }}",
    "{{ s.index('z') }}",
    # list and dict methods; the immutable sandbox
    "{{ xs.index(1) }} {{ xs.count(3) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}",
    "{% set l = [] %}{% set _ = l.append(1) %}{{ l }}",
    "{{ d.update({'x': 1}) }}",
    "{{ xs.pop() }}",
    "{{ xs.append is defined }}",
    # globals
    "{{ raise_exception('custom failure') }}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S %a %b %d') }}",
    "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ range(3)|list }}",
    # batch 2: corners
    "{{ 1e16 }} {{ 1e15 }} {{ 123456789.125 }} {{ 1e-5 }} {{ 0.0001 }} {{ 100.0 }} {{ 3.0 // 2 }} {{ -3.5 % 2 }} {{ 2 ** 0.5 }} {{ 1e308 * 10 }} {{ -(1e308 * 10) }}",
    "{{ ['é', '\x01', \"a'b\\\"c\", 'tab\\there'] }} {{ [('a', 1), ['b']] }} {{ {'k': ('t',), 'n': {'x': none}} }}",
    "{% for x in xs %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}{{ loop.depth }}{{ loop.depth0 }} {% endfor %}",
    "{{ 'abc' is sequence }} {{ xs|length > 2 and xs[0] }} {{ not xs is none }} {{ not n }}",
    "{{ -xs|length }}",
    "{{ msgs|map(attribute='missing')|list }} {{ msgs|map(attribute='missing', default='z')|list }} {{ d|items|map('first')|list }}",
    "{{ msgs|join(', ', attribute='role') }} {{ [1,2,3]|sum(start=10) }} {{ 'abc'|batch(2)|list }} {{ {'a': 1}.items()|list }}",
    "{% if xs %}a{% endif %}{% if d %}b{% endif %}{% if el %}c{% endif %}{% if empty %}d{% endif %}{% set ns = namespace() %}{% if ns %}e{% endif %}",
    "{{ '%s|%r'|format(xs, 'q') }} {{ s.split(' ')[0]|lower }} {{ msgs|selectattr('role', 'in', ['user'])|list|length }}",
    "{% set x = x|default(5) %}{{ x }} {{ '\\'' }} {{ \"\\\"\" }}",
    "  {%- set x = 1 -%}  \n  [{{ x }}]\n  {# c #}\n  {{ 2 }}\n    {%- if true %}\n  t\n    {%- endif %}\nend",
    "{% for m in msgs %}{% macro show() %}{{ m.role }}{{ loop.index }}{% endmacro %}{{ show() }},{% endfor %}",
    "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}",
    "{% set a = [1, 2] %}{% set b = a %}{{ a is sameas b }} {{ [1] is sameas [1] }}",
    "{{ xs|sort|first }} {{ xs|sort|last }} {{ (xs|sort)[1] }} {{ xs|map('string')|map('upper')|list }}",
    "{{ 'Hello'[1:] ~ '!' }} {{ s[100:] }}|{{ s[-100:3] }} {{ xs[1:2][0] }}",
    "{{ 'é'|upper }} {{ 'ÉCOLE'|lower }} {{ 'émile zola'|title }} {{ 'ü'|capitalize }}",
    "{{ '  x  '|trim|length }} {{ s|wordcount }} {{ u8|wordcount }} {{ u8|upper }}",
    "{% set t = (1, 2) %}{{ t[0] }}{{ t|length }}{% for a in t %}{{ a }}{% endfor %}{{ t + (3,) }}",
    "{{ {'a': 1, 'b': 2}|dictsort|map('last')|list }} {{ d|dictsort(false, 'value') }}",
    "{% for k, v in {'a': {'x': 1}}.items() %}{{ k }}{{ v.x }}{{ v['x'] }}{% endfor %}",
    "{{ 'a' < 'B' }} {{ 'apple' > 'app' }} {{ [1] < [1, 0] }} {{ none == none }} {{ none != 0 }}",
    "{{ xs[true] }} {{ 'ab'[false] }} {{ d[none] }}|{{ xs['0'] }}|",
    "{{ 3|string ~ 'x' }} {{ (3 ~ '')|int + 1 }} {{ '7' * 2 }} {{ 2 * 'ab' }}",
    "{% for x in xs %}{% if loop.first %}F{% elif loop.last %}L{% else %}M{% endif %}{% endfor %}",
    "{{ range(10)|batch(3)|map('sum')|list }} {{ range(0)|list }} {{ range(5, 0)|list }}",
    "{% for i in range(3) %}{% for j in range(3) %}{% if j > i %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}",
    "{{ 'x,y'.split(',')|join('|') }} {{ 'a b'.split(' ', -1) }} {{ 'aXbXc'.rsplit('X') }} {{ 'aXbXc'.split('X', 0) }}",
    "{{ ' \\u00a0x\\u3000 '.strip()|length }} {{ 'abcba'.strip('ab') }} {{ 'xyz'.strip('') }}",
    "{{ 'a-b-c'.replace('-', '', 1) }} {{ 'aaa'.count('a') }} {{ 'aaaa'.count('aa') }} {{ 'abc'.startswith('') }}",
    "{{ xs }}{% set xs = [9] %}{{ xs }}{% for i in [1] %}{% set xs = [8] %}{{ xs }}{% endfor %}{{ xs }}",
    "{% if true %}{% set inner = 1 %}{% endif %}{{ inner }}",
    "{{ 1 if true }} {{ [1, 2,] }} {{ {'a': 1,} }} {{ (1, 2,) }}",
    "{{ xs|tojson(indent=2) }}|{{ {'a': 'é'}|tojson(indent='\\t') }}|{{ 0.5|tojson }} {{ 1e20|tojson }} {{ -0.0|tojson }}",
    "{{ {'z': 1, 'a': {'y': 2, 'b': 3}}|tojson(sort_keys=true, indent=1) }}",
    "{{ d.items is defined }} {{ d.items is callable }} {{ s.nope is defined }}",
    "{{ msgs[0].content.upper() }} {{ msgs[0]['content'].strip().title() }} {{ msgs[-1].content|trim }}",
    "{{ 'ÉCOLE' is upper }} {{ 'école1' is lower }} {{ '123' is lower }} {{ 'Éa'.isupper() }} {{ 'ÿ'.islower() }}",
    "{{ x is defined and x.y }}{{ n is none or n.y }}",
    "{{ xs.0 }} {{ msgs.1.role }}",
    # errors at parse time
    "{% if true %}never closed",
    "{{ 1 + }}",
    "{% for x in xs %}{% endif %}",
    "{{ x|no_such_filter }}",
    "{% if false %}{{ x is no_such_test }}{% endif %}",
    "{% if false %}{{ x|no_such_filter }}{% endif %}",
    "{% include 'other.jinja' %}",
    "{{ 'unterminated }}",
    "{% set x = 1 %}\n{{ x.y.z }}",
]


def main():
    env = make_environment(datetime.datetime(2025, 7, 26, 14, 30, 5))
    out = {"context": C, "now": "2025-07-26T14:30:05", "cases": []}
    for source in CASES:
        case = {"template": source}
        try:
            case["output"] = env.from_string(source).render(**C)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        out["cases"].append(case)
    path = DATA / "semantics.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(CASES)} cases, {sum('error' in c for c in out['cases'])} raise")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Renders every chat template in tests/data/chat-templates/templates/ through every scenario of
tests/data/chat-templates/scenarios.json with Python jinja2, set up the way transformers'
apply_chat_template sets it up (ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True), extensions loopcontrols and the {% generation %} tracker, its own tojson,
raise_exception, strftime_now), and writes the oracle outputs Tern's C++ engine must match:

  tests/data/chat-templates/expected/<template>__<scenario>.txt    the rendered prompt, or
  tests/data/chat-templates/expected/<template>__<scenario>.error  the exception jinja2 raised

strftime_now is pinned to the scenarios file's "now". Run with the repo's venv:
  .venv/bin/python tools/chat_templates/make_expected.py
"""
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "chat-templates"


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker tag: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def build_context(spec, template_name, scenario):
    context = dict(spec["tokens"].get(template_name, spec["tokens"]["default"]))
    context.update({"tools": None, "documents": None})
    context.update(scenario)
    return context


def main():
    spec = json.loads((DATA / "scenarios.json").read_text(encoding="utf-8"))
    now = datetime.datetime.fromisoformat(spec["now"])
    env = make_environment(now)
    out_dir = DATA / "expected"
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.iterdir():
        old.unlink()
    ok = failed = 0
    for path in sorted((DATA / "templates").glob("*.jinja")):
        name = path.stem
        source = path.read_text(encoding="utf-8")
        for scenario_name, scenario in spec["scenarios"].items():
            base = f"{name}__{scenario_name}"
            try:
                text = env.from_string(source).render(**build_context(spec, name, scenario))
                (out_dir / (base + ".txt")).write_bytes(text.encode("utf-8"))
                ok += 1
            except Exception as e:  # the template raised: Tern must fail too
                (out_dir / (base + ".error")).write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
                failed += 1
    print(f"rendered {ok}, raised {failed}", file=sys.stderr)


if __name__ == "__main__":
    main()

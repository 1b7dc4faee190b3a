#!/usr/bin/env python3
"""Tool calls, reasoning and constrained output through the official `openai` client against a
real `tern serve` on loopback:

- the real SmolLM2-135M: response_format json_object / json_schema, tool_choice required / named
  (forced calls in the Hermes format its template lacks), streaming tool-call deltas, errors;
- random-weight models with real templates (tern-synth --chat-template): Qwen3's (Hermes calls)
  and Qwen3.5's (XML calls; its generation prompt opens <think>, so free output is reasoning).
  Random weights write random text, so structure there comes only from constrained decoding,
  which is what these tests prove.

Run by CTest: test_openai_tools.py --tern PATH --synth PATH --templates DIR --work DIR
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

import openai

ARGS = None

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "unit"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 16}, "exact": {"type": "boolean"}},
            "required": ["query", "exact"],
        },
    },
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "role": {"enum": ["admin", "user"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "zip": {"type": ["string", "null"], "maxLength": 8}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "tags", "address"],
    "additionalProperties": False,
}


class Server:
    def __init__(self, model, parallel=2, served_name=None):
        named = ["--served-name", served_name] if served_name else []
        self.proc = subprocess.Popen([ARGS.tern, "serve", "--model", model, "--port", "0", "--parallel", str(parallel),
                                      *named],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "http://" not in line:
            self.proc.kill()
            raise AssertionError(f"tern serve did not start: {line!r} {self.proc.stderr.read()}")
        url = line[line.index("http://"):].split()[0]
        self.client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def check_person(test, p):
    test.assertEqual(set(p), {"name", "age", "role", "tags", "address"})
    test.assertIsInstance(p["name"], str)
    test.assertIsInstance(p["age"], int)
    test.assertIn(p["role"], ["admin", "user"])
    test.assertLessEqual(len(p["tags"]), 3)
    test.assertEqual(set(p["address"]), {"city", "zip"})


def stream_tool_calls(test, stream):
    """Gathers streamed tool calls the way clients do; checks the first delta of each call."""
    calls, finish = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        for d in choice.delta.tool_calls or []:
            if d.index not in calls:
                test.assertTrue(d.id and d.id.startswith("call_"))
                test.assertEqual(d.type, "function")
                test.assertTrue(d.function.name)
                calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
            calls[d.index]["arguments"] += d.function.arguments or ""
        finish = choice.finish_reason or finish
    return [calls[i] for i in sorted(calls)], finish


class SmolLM2(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("smollm2-135m")
        cls.client = cls.server.client

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def chat(self, content, **kw):
        kw.setdefault("max_tokens", 200)
        return self.client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": content}],
                                                   **kw)

    def test_json_object(self):
        for seed, temperature in [(1, 0.0), (2, 1.0), (3, 1.0)]:
            r = self.chat("Describe a cat as JSON.", response_format={"type": "json_object"}, seed=seed,
                          temperature=temperature, max_tokens=300)
            c = r.choices[0]
            if c.finish_reason == "length":
                continue  # a long free object may not close within max_tokens; every prefix is still valid
            self.assertEqual(c.finish_reason, "stop")
            self.assertIsInstance(json.loads(c.message.content), dict, c.message.content)

    def test_json_schema(self):
        for seed, temperature in [(1, 0.0), (5, 0.8)]:
            r = self.chat("Make up a user record.", seed=seed, temperature=temperature, max_tokens=300,
                          response_format={"type": "json_schema",
                                           "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "stop", c.message.content)
            check_person(self, json.loads(c.message.content))

    def test_tool_choice_required(self):
        r = self.chat("What is the weather in Paris?", tools=[WEATHER, SEARCH], tool_choice="required", temperature=0)
        c = r.choices[0]
        self.assertEqual(c.finish_reason, "tool_calls")
        self.assertEqual(len(c.message.tool_calls), 1)
        call = c.message.tool_calls[0]
        self.assertEqual(call.type, "function")
        self.assertTrue(call.id.startswith("call_"))
        self.assertIn(call.function.name, ["get_weather", "search"])
        args = json.loads(call.function.arguments)
        required = (WEATHER if call.function.name == "get_weather" else SEARCH)["function"]["parameters"]["required"]
        for key in required:
            self.assertIn(key, args)

    def test_named_tool_choice_streaming(self):
        stream = self.chat("Find cheap flights.", tools=[WEATHER, SEARCH], stream=True, temperature=0.7, seed=3,
                           tool_choice={"type": "function", "function": {"name": "search"}})
        calls, finish = stream_tool_calls(self, stream)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual([c["name"] for c in calls], ["search"])
        args = json.loads(calls[0]["arguments"])
        self.assertIsInstance(args["query"], str)
        self.assertIsInstance(args["exact"], bool)

    def test_tool_choice_none_and_auto_give_text(self):
        for choice in ["none", "auto"]:
            r = self.chat("Say hello.", tools=[WEATHER], tool_choice=choice, temperature=0, max_tokens=20)
            self.assertIsNone(r.choices[0].message.tool_calls)
            self.assertTrue(r.choices[0].message.content)

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError):
            self.chat("x", tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
        with self.assertRaises(openai.BadRequestError):
            self.chat("x", response_format={"type": "yaml"})
        with self.assertRaises(openai.BadRequestError):
            self.chat("x", response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "tuple"}}})
        with self.assertRaises(openai.BadRequestError):
            self.chat("x", tool_choice="required")


class SyntheticQwen3(unittest.TestCase):
    """Qwen3's template: Hermes calls in <tool_call> tags."""

    @classmethod
    def setUpClass(cls):
        path = os.path.join(ARGS.work, "synth-qwen3.gguf")
        subprocess.run([ARGS.synth, "--preset", "tiny-qwen3", "--chat-template",
                        os.path.join(ARGS.templates, "Qwen-Qwen3-0.6B.jinja"), "-o", path], check=True, capture_output=True)
        cls.server = Server(path, served_name="synth")
        cls.client = cls.server.client

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_forced_calls_parse(self):
        for seed in range(1, 5):
            r = self.client.chat.completions.create(
                model="synth", messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER, SEARCH],
                tool_choice="required", temperature=1.0, seed=seed, max_tokens=400)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertIsNone(c.message.content)
            call = c.message.tool_calls[0]
            args = json.loads(call.function.arguments)
            if call.function.name == "get_weather":
                self.assertIn(args["unit"], ["celsius", "fahrenheit"])
                self.assertLessEqual(len(args["city"]), 12)
            else:
                self.assertIsInstance(args["exact"], bool)

    def test_streamed_forced_call(self):
        stream = self.client.chat.completions.create(
            model="synth", messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER, SEARCH], stream=True,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=1.0, seed=9,
            max_tokens=400)
        calls, finish = stream_tool_calls(self, stream)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0]["name"], "get_weather")
        self.assertIn(json.loads(calls[0]["arguments"])["unit"], ["celsius", "fahrenheit"])

    def test_json_schema_random_weights(self):
        # Random weights often spend the whole budget on the whitespace JSON allows between tokens;
        # every answer that finishes must validate, and some seed must finish.
        finished = 0
        for seed in range(1, 5):
            r = self.client.chat.completions.create(
                model="synth", messages=[{"role": "user", "content": "person"}], temperature=1.0, seed=seed,
                max_tokens=600, response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
            if r.choices[0].finish_reason == "stop":
                check_person(self, json.loads(r.choices[0].message.content))
                finished += 1
        self.assertGreater(finished, 0)


class SyntheticQwen35(unittest.TestCase):
    """Qwen3.5's template: XML calls; the generation prompt opens <think>."""

    @classmethod
    def setUpClass(cls):
        path = os.path.join(ARGS.work, "synth-qwen35.gguf")
        subprocess.run([ARGS.synth, "--preset", "tiny-qwen3", "--seed", "3", "--chat-template",
                        os.path.join(ARGS.templates, "Qwen3.5-4B.jinja"), "-o", path], check=True, capture_output=True)
        cls.server = Server(path, served_name="synth")
        cls.client = cls.server.client

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_output_starts_as_reasoning(self):
        # Random tied-embedding weights repeat their input ("\n" after "<think>\n", which the
        # parser drops as the block's own spacing); a frequency penalty moves them on to text.
        r = self.client.chat.completions.create(model="synth", messages=[{"role": "user", "content": "hi"}],
                                                temperature=1.0, seed=1, max_tokens=64, frequency_penalty=2.0)
        msg = r.choices[0].message
        self.assertTrue(msg.model_extra.get("reasoning_content"))
        self.assertFalse(msg.content)
        stream = self.client.chat.completions.create(model="synth", messages=[{"role": "user", "content": "hi"}],
                                                     temperature=1.0, seed=1, max_tokens=64, stream=True,
                                                     frequency_penalty=2.0)
        reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                            for c in stream if c.choices)
        self.assertEqual(reasoning, msg.model_extra["reasoning_content"])

    def test_forced_xml_call_typed_by_schema(self):
        for seed in range(1, 4):
            r = self.client.chat.completions.create(
                model="synth", messages=[{"role": "user", "content": "find"}], tools=[SEARCH, WEATHER],
                tool_choice={"type": "function", "function": {"name": "search"}}, temperature=1.0, seed=seed,
                max_tokens=300)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            call = c.message.tool_calls[0]
            self.assertEqual(call.function.name, "search")
            args = json.loads(call.function.arguments)
            self.assertIsInstance(args["query"], str)
            self.assertIsInstance(args["exact"], bool)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tern", required=True)
    parser.add_argument("--synth", required=True)
    parser.add_argument("--templates", required=True)
    parser.add_argument("--work", required=True)
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)

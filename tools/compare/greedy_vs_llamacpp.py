#!/usr/bin/env python3
"""Greedy agreement between Tern and llama.cpp on the same GGUF file (CPU).

1. Five prompts, 64 greedy tokens each, through both servers from identical prompt token ids
   (llama.cpp's /tokenize): are the generated ids identical?
2. Teacher forcing: llama.cpp generates N greedy tokens (ignore EOS) with its top-2 log
   probabilities; Tern scores the same sequence (tern-teacher-force). Top-1 agreement, and for
   every disagreement both engines' margins between their two best tokens (a near-tie has a small
   margin in both).

llama.cpp is not part of Tern: build its llama-server from PyPI's llama-cpp-python sdist (see
../shared/BENCHMARKS.md) into an ignored folder and pass --llama-bin.

    tools/compare/greedy_vs_llamacpp.py --llama-bin DIR --model smollm2-135m --out report.md
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea,",
    "The three laws of thermodynamics state that",
    "Q: What is 17 times 23?\nA:",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=600):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(url, proc, seconds=900):  # a 17 GB model loads in minutes on 2 cores
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited early: {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.5)
    sys.exit(f"server not ready: {url}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--model", required=True, help="store name or .gguf path")
    ap.add_argument("--tern", default="build/bin/tern")
    ap.add_argument("--teacher", default="build/bin/tern-teacher-force")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--tf-tokens", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out")
    args = ap.parse_args()

    path = args.model
    if not path.endswith(".gguf"):
        models = json.loads(subprocess.check_output([args.tern, "list", "--json"]))
        path = next(m["files"][0] for m in models if m["name"] == args.model)

    env = dict(os.environ, LD_LIBRARY_PATH=args.llama_bin)
    lport, tport = free_port(), free_port()
    ctx = args.tf_tokens + 256
    llama = subprocess.Popen([os.path.join(args.llama_bin, "llama-server"), "-m", path, "--port", str(lport),
                              "-t", str(args.threads), "-c", str(ctx), "-np", "1"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tern = subprocess.Popen([args.tern, "serve", "-m", path, "--port", str(tport), "--parallel", "1",
                             "--ctx", str(max(ctx, 1024))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = []
    try:
        wait_ready(f"http://127.0.0.1:{lport}/health", llama)
        wait_ready(f"http://127.0.0.1:{tport}/health", tern)
        lines.append(f"Model file: `{path}`\n")
        lines.append("## Greedy continuations, identical prompt ids\n")
        lines.append("| prompt | tokens | identical | first divergence |")
        lines.append("| --- | --- | --- | --- |")
        identical = 0
        for p in PROMPTS:
            ids = post(f"http://127.0.0.1:{lport}/tokenize", {"content": p, "add_special": True})["tokens"]
            lr = post(f"http://127.0.0.1:{lport}/completion",
                      {"prompt": ids, "n_predict": args.tokens, "temperature": 0, "cache_prompt": False,
                       "return_tokens": True})
            tr = post(f"http://127.0.0.1:{tport}/v1/completions",
                      {"prompt": ids, "max_tokens": args.tokens, "temperature": 0, "return_tokens": True})
            a, b = lr["tokens"], tr["choices"][0]["tokens"]
            same = a == b
            identical += same
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
            if first is None and len(a) != len(b):
                first = min(len(a), len(b))
            lines.append(f"| {json.dumps(p)[:48]} | {len(a)} / {len(b)} | {'yes' if same else 'no'} | "
                         f"{'-' if first is None else first} |")
        lines.append(f"\n{identical} of {len(PROMPTS)} continuations identical.\n")

        lines.append(f"## Teacher forcing over {args.tf_tokens} tokens\n")
        total = agree = 0
        ties = []
        for p in PROMPTS[:2]:
            ids = post(f"http://127.0.0.1:{lport}/tokenize", {"content": p, "add_special": True})["tokens"]
            n = args.tf_tokens // 2
            lr = post(f"http://127.0.0.1:{lport}/completion",
                      {"prompt": ids, "n_predict": n, "temperature": 0, "cache_prompt": False,
                       "return_tokens": True, "ignore_eos": True, "n_probs": 2}, timeout=1800)
            gen = lr["tokens"]
            probs = lr["completion_probabilities"]
            seq = ids + gen
            with open("/tmp/tern-tf-ids.json", "w") as f:
                json.dump(seq, f)
            top2 = json.loads(subprocess.check_output([args.teacher, path, "/tmp/tern-tf-ids.json"]))
            for i, tok in enumerate(gen):
                t = top2[len(ids) - 1 + i]
                total += 1
                if t[0][0] == tok:
                    agree += 1
                else:
                    lp = probs[i]["top_logprobs"]
                    lmargin = lp[0]["logprob"] - lp[1]["logprob"] if len(lp) > 1 else float("nan")
                    tmargin = t[0][1] - t[1][1]
                    ties.append((i, tok, t[0][0], lmargin, tmargin))
        lines.append(f"Top-1 agreement: {agree} / {total} = {100.0 * agree / max(total, 1):.2f}%\n")
        if ties:
            lines.append("| position | llama.cpp token | Tern token | llama.cpp margin (nats) | Tern margin (nats) |")
            lines.append("| --- | --- | --- | --- | --- |")
            for i, a, b, lm, tm in ties[:40]:
                lines.append(f"| {i} | {a} | {b} | {lm:.4f} | {tm:.4f} |")
    finally:
        llama.terminate()
        tern.terminate()
        llama.wait()
        tern.wait()
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Prefill and decode speed of Tern and llama.cpp on the same GGUF file, side by side.

Follows ../shared/BENCHMARKS.md: one warm-up each, then runs interleaved A B A B; the median and
the range per figure. Tern: `tern bench --json` (prefill tok/s = prompt tokens / time to the first
token's logits; decode tok/s over the tokens generated after that prompt). llama.cpp:
`llama-bench -o json`: pp<p> from an empty context, and tg<n> at depth <p> (`-d`), so both engines
decode with the same <p> tokens already in the KV cache; its thread count is the same number of
cores.

    tools/compare/bench_vs_llamacpp.py --llama-bin DIR --model smollm2-135m -p 512 -n 128 --runs 3
"""
import argparse
import json
import os
import statistics
import subprocess


def tern_run(tern, path, p, n, threads):
    out = subprocess.check_output([tern, "bench", "-m", path, "-p", str(p), "-n", str(n), "-r", "1",
                                   "-t", str(threads), "--json"], stderr=subprocess.DEVNULL)
    r = json.loads(out)["results"][0]
    return r["prefill_tok_s"]["median"], r["decode_tok_s"]["median"]


def llama_bench(bin_dir, path, threads, *args):
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    out = subprocess.check_output([os.path.join(bin_dir, "llama-bench"), "-m", path, "-t", str(threads), "-r", "1",
                                   "-o", "json", *args], env=env, stderr=subprocess.DEVNULL)
    return json.loads(out)[0]["avg_ts"]


def llama_run(bin_dir, path, p, n, threads):
    pp = llama_bench(bin_dir, path, threads, "-p", str(p), "-n", "0")
    tg = llama_bench(bin_dir, path, threads, "-p", "0", "-n", str(n), "-d", str(p))
    return pp, tg


def summary(values):
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tern", default="build/bin/tern")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    path = args.model
    if not path.endswith(".gguf"):
        models = json.loads(subprocess.check_output([args.tern, "list", "--json"]))
        path = next(m["files"][0] for m in models if m["name"] == args.model)
    tern_run(args.tern, path, args.p, args.n, args.threads)  # warm-up
    llama_run(args.llama_bin, path, args.p, args.n, args.threads)
    t_pp, t_tg, l_pp, l_tg = [], [], [], []
    for _ in range(args.runs):
        a, b = tern_run(args.tern, path, args.p, args.n, args.threads)
        t_pp.append(a)
        t_tg.append(b)
        a, b = llama_run(args.llama_bin, path, args.p, args.n, args.threads)
        l_pp.append(a)
        l_tg.append(b)
    print(f"model `{os.path.basename(path)}`, {args.threads} threads, {args.runs} interleaved runs\n")
    print("| figure | Tern median [range] | llama.cpp median [range] | Tern / llama.cpp |")
    print("| --- | --- | --- | --- |")
    for name, t, l in ((f"prefill {args.p} tok/s", t_pp, l_pp), (f"decode {args.n} tok/s after {args.p}", t_tg, l_tg)):
        tm, tl, th = summary(t)
        lm, ll, lh = summary(l)
        print(f"| {name} | {tm:.1f} [{tl:.1f}-{th:.1f}] | {lm:.1f} [{ll:.1f}-{lh:.1f}] | {tm / lm:.2f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Greedy agreement between two engine configurations on one model file.

Runs tern-greedy-agreement twice (A, then B teacher-forced along A's continuations) and reports:
how many of the prompts' greedy continuations are identical, the first divergence of each other
one with both configurations' top-2 margins there (logits), and the relative RMS difference of
the logits along A's continuations. A configuration is an environment (VAR=value, comma-
separated) plus the device, e.g. "TERN_CPU_PATH=scalar" or "device=cuda".

    tools/compare/greedy_agreement.py --model FILE --a TERN_CPU_PATH=avx2 --b TERN_CPU_PATH=scalar

The prompts are cuda_greedy_test's 20 (tests/engine/cuda_greedy_test.cpp), 128 tokens each.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def greedy_test_prompts():
    """The prompts of tests/engine/cuda_greedy_test.cpp (one list for both tests)."""
    src = open(os.path.join(ROOT, "tests/engine/cuda_greedy_test.cpp")).read()
    block = src[src.index("kPrompts[] = {"):src.index("};", src.index("kPrompts[] = {"))]
    # C string literals: the escapes these prompts use (\n, \", \\, \').
    out = []
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', block):
        out.append(lit.encode().decode("unicode_escape"))
    return out


def parse_config(text):
    env, device = {}, "cpu"
    for item in filter(None, text.split(",")):
        if item == "-":
            continue
        key, _, value = item.partition("=")
        if key == "device":
            device = value
        else:
            env[key] = value
    return env, device


def run(binary, model, prompts_file, prefix, config, tokens, reference=None):
    env, device = parse_config(config)
    cmd = [binary, model, prompts_file, prefix, "--device", device, "--tokens", str(tokens)]
    if reference:
        cmd += ["--reference", reference]
    subprocess.run(cmd, env=dict(os.environ, **env), check=True)
    return json.load(open(prefix + ".json"))


def top2(row):
    i = np.argpartition(row, -2)[-2:]
    best, second = (i[1], i[0]) if row[i[1]] >= row[i[0]] else (i[0], i[1])
    return int(best), float(row[best] - row[second])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--a", default="-", help="configuration A (default: the defaults)")
    ap.add_argument("--b", required=True, help="configuration B")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--tern-bin", default=os.path.join(ROOT, "build/bin"))
    ap.add_argument("--near-tie", type=float, default=0.3, help="margin (logits) of a near-tie")
    args = ap.parse_args()
    binary = os.path.join(args.tern_bin, "tern-greedy-agreement")
    prompts = greedy_test_prompts()
    with tempfile.TemporaryDirectory() as tmp:
        pf = os.path.join(tmp, "prompts.json")
        json.dump(prompts, open(pf, "w"))
        a = run(binary, args.model, pf, os.path.join(tmp, "a"), args.a, args.tokens)
        b = run(binary, args.model, pf, os.path.join(tmp, "b"), args.b, args.tokens,
                reference=os.path.join(tmp, "a"))
        vocab = a["vocab"]
        la = np.fromfile(os.path.join(tmp, "a.f32"), dtype=np.float32).reshape(-1, vocab)
        lb = np.fromfile(os.path.join(tmp, "b.f32"), dtype=np.float32).reshape(-1, vocab)
    identical, worst_rel, not_ties, at = 0, 0.0, 0, 0
    print(f"model {os.path.basename(args.model)}: A = {args.a}, B = {args.b}, {args.tokens} tokens\n")
    print("| prompt | first divergence | A picks (margin) | B picks (margin) | near-tie |")
    print("| --- | ---: | --- | --- | --- |")
    top1_agree = top1_total = 0
    for p, text in enumerate(prompts):
        ids, ta, tb = a["prompts"][p], a["tokens"][p], b["tokens"][p]
        rows = len(ids) + len(ta)
        xa, xb = la[at:at + rows].astype(np.float64), lb[at:at + rows].astype(np.float64)
        at += rows
        worst_rel = max(worst_rel, float(np.sqrt(((xb - xa) ** 2).sum() / max((xa ** 2).sum(), 1e-30))))
        # Teacher-forced top-1 agreement over the continuation's predictions.
        pa, pb = xa[len(ids) - 1:-1].argmax(1), xb[len(ids) - 1:-1].argmax(1)
        top1_agree += int((pa == pb).sum())
        top1_total += len(pa)
        if ta == tb:
            identical += 1
            continue
        d = next(i for i in range(len(ta)) if ta[i] != tb[i])
        row = len(ids) - 1 + d
        ba, ma = top2(xa[row])
        bb, mb = top2(xb[row])
        tie = ma < args.near_tie and mb < args.near_tie
        not_ties += 0 if tie else 1
        print(f"| {json.dumps(text[:40])} | {d} | {ba} ({ma:.3f}) | {bb} ({mb:.3f}) | {'yes' if tie else 'NO'} |")
    print(f"\nidentical continuations: {identical} of {len(prompts)}; divergences that are not near-ties "
          f"(margin >= {args.near_tie} in either): {not_ties}; teacher-forced top-1 agreement "
          f"{top1_agree}/{top1_total} = {100.0 * top1_agree / top1_total:.2f}%; logits along A's "
          f"continuations: worst rel rms {worst_rel:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

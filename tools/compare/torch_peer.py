#!/usr/bin/env python3
"""The PyTorch + transformers peer of BENCHMARKS.md on the GPU machine: a random-weight
Qwen3-8B-shaped model (the shape of tern-synth's qwen3-8b preset) in bf16, greedy decode with a
static KV cache, eager and with torch.compile (transformers' generate compiles the decode step
when the cache is static). Prints prefill and decode tok/s, median of --runs after a warm-up.

    python3 tools/compare/torch_peer.py --prompt 512 --gen 128 --runs 3
"""
import argparse
import statistics
import time

import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM


def qwen3_8b_config():
    return Qwen3Config(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )


def timed_generate(model, ids, gen, compile_mode):
    cfg = GenerationConfig(
        max_new_tokens=gen,
        min_new_tokens=gen,
        do_sample=False,
        cache_implementation="static",
        pad_token_id=0,
        eos_token_id=None,
    )
    if not compile_mode:
        cfg.disable_compile = True
    torch.cuda.synchronize()
    # Prefill: one forward over the prompt (the time to the first token's logits).
    t0 = time.perf_counter()
    with torch.no_grad():
        model(ids)
    torch.cuda.synchronize()
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, generation_config=cfg)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    generated = out.shape[1] - ids.shape[1]
    # Decode: generate's time less its prefill, over the tokens after the first.
    return ids.shape[1] / prefill, (generated - 1) / max(total - prefill, 1e-9)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # initialized in bf16 directly (not 32 GB of fp32)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(qwen3_8b_config()).to(torch.bfloat16).eval()
    ids = torch.randint(0, 151936, (1, args.prompt), device="cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, Qwen3-8B shape bf16, "
          f"prompt {args.prompt}, gen {args.gen}")
    for name, compiled in (("eager", False), ("static cache + torch.compile", True)):
        timed_generate(model, ids, args.gen, compiled)  # warm-up (and compilation)
        runs = [timed_generate(model, ids, args.gen, compiled) for _ in range(args.runs)]
        pf = statistics.median(r[0] for r in runs)
        dc = [r[1] for r in runs]
        print(f"torch {name}: prefill {pf:.1f} tok/s, decode {statistics.median(dc):.1f} tok/s "
              f"[{min(dc):.1f}-{max(dc):.1f}]")


if __name__ == "__main__":
    main()

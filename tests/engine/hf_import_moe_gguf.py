#!/usr/bin/env python3
"""`tern import` of the Qwen3-MoE fixture read back by PyPI `gguf` (llama.cpp's own reader).

The stacked expert tensors must have llama.cpp's names and shapes (GGUFReader reports ne order:
{cols, rows, experts}), their F32 data must be the per-expert safetensors matrices stacked in expert
order, every tensor name must be one gguf knows for qwen3moe (or qwen3's dense MLP, for the
fixture's mlp_only_layers), and the qwen3moe.* expert keys must be there with gguf's key names.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import gguf
from safetensors.numpy import load_file


def fail(message):
    sys.exit(f"FAIL: {message}")


def imported(tern, model, work, name, quant=None):
    cmd = [tern, "--home", work, "import", model, "--name", name]
    if quant:
        cmd += ["--quant", quant]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{' '.join(cmd)}: {out.stderr}")
    files = glob.glob(os.path.join(work, "**", name + ".gguf"), recursive=True)
    if len(files) != 1:
        fail(f"expected one {name}.gguf under {work}, found {files}")
    return gguf.GGUFReader(files[0])


def field(reader, key):
    f = reader.get_field(key)
    if f is None:
        fail(f"key {key} is missing")
    return f.contents()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tern", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)

    config = json.load(open(os.path.join(args.model, "config.json")))
    experts = config["num_local_experts"]
    ff = config["moe_intermediate_size"]
    hidden = config["hidden_size"]
    sparse = [l for l in range(config["num_hidden_layers"]) if l not in config["mlp_only_layers"]]
    st = load_file(os.path.join(args.model, "model.safetensors"))

    known = set()
    for arch in (gguf.MODEL_ARCH.QWEN3MOE, gguf.MODEL_ARCH.QWEN3):
        for t in gguf.MODEL_TENSORS[arch]:
            for bid in range(config["num_hidden_layers"]):
                known.add(gguf.TENSOR_NAMES[t].format(bid=bid) + ".weight")

    for quant, qtype in ((None, gguf.GGMLQuantizationType.F32), ("Q8_0", gguf.GGMLQuantizationType.Q8_0)):
        reader = imported(args.tern, args.model, args.work, f"moe-{quant or 'f32'}", quant)
        arch = field(reader, gguf.Keys.General.ARCHITECTURE)
        if arch != "qwen3moe":
            fail(f"general.architecture is {arch}")
        for key, want in ((gguf.Keys.LLM.EXPERT_COUNT, experts),
                          (gguf.Keys.LLM.EXPERT_USED_COUNT, config["num_experts_per_tok"]),
                          (gguf.Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, ff),
                          (gguf.Keys.LLM.EXPERT_WEIGHTS_NORM, config["norm_topk_prob"]),
                          (gguf.Keys.LLM.FEED_FORWARD_LENGTH, config["intermediate_size"])):
            got = field(reader, key.format(arch=arch))
            if got != want:
                fail(f"{key}: {got}, expected {want}")
        tensors = {t.name: t for t in reader.tensors}
        unknown = sorted(set(tensors) - known)
        if unknown:
            fail(f"names gguf does not know for qwen3moe: {unknown}")
        for layer in sparse:
            for which, shape in (("gate", [hidden, ff, experts]), ("up", [hidden, ff, experts]),
                                 ("down", [ff, hidden, experts])):
                name = f"blk.{layer}.ffn_{which}_exps.weight"
                t = tensors.get(name)
                if t is None:
                    fail(f"{name} is missing")
                if list(t.shape) != shape or t.tensor_type != qtype:
                    fail(f"{name}: shape {list(t.shape)} type {t.tensor_type.name}, expected {shape} {qtype.name}")
                if quant is None:
                    want = np.stack([st[f"model.layers.{layer}.mlp.experts.{e}.{which}_proj.weight"]
                                     for e in range(experts)])
                    if not np.array_equal(np.asarray(t.data).reshape(want.shape), want):
                        fail(f"{name}: data differs from the stacked safetensors matrices")
            router = tensors[f"blk.{layer}.ffn_gate_inp.weight"]
            if list(router.shape) != [hidden, experts]:
                fail(f"router shape {list(router.shape)}")
    print("ok")


if __name__ == "__main__":
    main()

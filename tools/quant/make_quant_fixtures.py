#!/usr/bin/env python3
"""Writes the quantization fixtures under tests/data/quant/ from gguf-py's numpy reference.

For every type the CPU backend dequantizes:
  <TYPE>.blocks   random raw blocks (realistic fp16 scales, plus subnormal, negative and zero scales)
  <TYPE>.dequant  gguf.quants.dequantize of those blocks, little-endian float32
For every type gguf-py can quantize (and the backend too):
  <TYPE>.qin      float32 inputs (random rows of several magnitudes plus edge-case blocks)
  <TYPE>.qout     gguf.quants.quantize of them, raw bytes

Run from the repository root with the project's venv:
  . .venv/bin/activate && python tools/quant/make_quant_fixtures.py
The output is deterministic (fixed seed); the C++ tests compare against it bit for bit.
"""
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "quant"
ELEMENTS = 4096  # per type

DEQUANT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K",
                 "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]
QUANT_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]

# Byte offsets of the fp16 scale fields inside each block.
FP16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "IQ4_NL": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_XS": [0],
}


def random_fp16(rng, count):
    """fp16 scales: mostly realistic magnitudes of both signs; some subnormal, zero, tiny, large."""
    vals = (rng.standard_normal(count) * 10.0 ** rng.uniform(-4, -1, count)).astype(np.float16)
    bits = vals.view(np.uint16).copy()
    kind = rng.integers(0, 16, count)
    bits[kind == 0] = rng.integers(1, 0x400, int((kind == 0).sum()))  # positive subnormal
    bits[kind == 1] = 0x8000 | rng.integers(1, 0x400, int((kind == 1).sum()))  # negative subnormal
    bits[kind == 2] = 0  # zero
    bits[kind == 3] = 0x8000  # negative zero
    bits[kind == 4] = rng.integers(0x5800, 0x7bff, int((kind == 4).sum()))  # large (finite)
    return bits


def random_blocks(rng, name):
    if name == "F32":
        return (rng.standard_normal(ELEMENTS) * 10.0 ** rng.uniform(-3, 3, ELEMENTS)).astype(np.float32).view(np.uint8)
    if name in ("F16", "BF16"):
        bits = rng.integers(0, 1 << 16, ELEMENTS, dtype=np.uint32).astype(np.uint16)
        exp_mask = 0x7C00 if name == "F16" else 0x7F80
        # no inf/nan: clear the top exponent bit where the exponent is all ones
        bad = (bits & exp_mask) == exp_mask
        bits[bad] &= ~np.uint16(0x4000)
        return bits.view(np.uint8)
    block_elems, block_bytes = GGML_QUANT_SIZES[getattr(T, name)]
    n_blocks = ELEMENTS // block_elems
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint32).astype(np.uint8)
    for off in FP16_FIELDS[name]:
        raw[:, off:off + 2] = random_fp16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if name in ("Q4_K", "Q5_K", "Q2_K"):
        # K-quant mins (dmin) are usually non-negative, but the format allows any sign: keep both.
        pass
    return raw.reshape(-1)


def quant_inputs(rng):
    blocks = []
    n = ELEMENTS // 32
    for i in range(n):
        kind = i % 16
        scale = 10.0 ** rng.uniform(-6, 3)
        x = rng.standard_normal(32) * scale
        if kind == 0:
            x[:] = 0
        elif kind == 1:
            x[:] = 0
            x[rng.integers(0, 32)] = scale
        elif kind == 2:
            x[:] = -scale  # constant block
        elif kind == 3:
            # rounding ties: integers times a power of two
            x = rng.integers(-16, 17, 32) * 2.0 ** rng.integers(-10, 4)
        elif kind == 4:
            x[0], x[1] = scale * 3, -scale * 3  # equal magnitudes, both signs: first wins
        elif kind == 5:
            x = x * 1e-4  # fp16 subnormal scales
        elif kind == 6:
            x = np.abs(x)  # all positive
        elif kind == 7:
            x = -np.abs(x)  # all negative
        blocks.append(x)
    return np.concatenate(blocks).astype(np.float32)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261202)
    for name in DEQUANT_TYPES:
        raw = random_blocks(rng, name)
        qtype = getattr(T, name)
        if name == "F32":
            deq = raw.view(np.float32)
        else:
            deq = quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1).astype(np.float32)
        assert deq.size == ELEMENTS, name
        (OUT / f"{name}.blocks").write_bytes(raw.tobytes())
        (OUT / f"{name}.dequant").write_bytes(deq.astype("<f4").tobytes())
    for name in QUANT_TYPES:
        x = quant_inputs(rng)
        q = quants.quantize(x.reshape(1, -1), getattr(T, name))
        (OUT / f"{name}.qin").write_bytes(x.astype("<f4").tobytes())
        (OUT / f"{name}.qout").write_bytes(np.ascontiguousarray(q).view(np.uint8).tobytes())
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(list(OUT.iterdir()))} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()

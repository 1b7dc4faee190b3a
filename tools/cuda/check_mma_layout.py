#!/usr/bin/env python3
"""Mirrors the index math of src/backend/cuda/gemv_mma.cu (which quant byte, nibble, high bits and
scale each mma fragment element of a lane comes from, under the PTX m16n8k32 / m16n8k16 .s8
fragment layout the kernel assumes) and checks the weights it implies against PyPI gguf's
dequantization of random Q4_K, Q6_K and Q8_0 blocks. A check of the layout arithmetic for whoever
edits the kernel, not of the kernel itself (that is cuda_device_test with TERN_CUDA_GEMV_MMA=1).
  .venv/bin/python tools/cuda/check_mma_layout.py
"""
import numpy as np
from gguf import quants, GGMLQuantizationType as Q
rng = np.random.default_rng(1)

def f16(b, off): return float(np.frombuffer(bytes(b[off:off+2]), dtype=np.float16)[0])

def q4k_scale_min(sc, s):
    if s < 4: return sc[s] & 63, sc[s+4] & 63
    return (sc[s+4] & 0xF) | ((sc[s-4] >> 6) << 4), (sc[s+4] >> 4) | ((sc[s] >> 6) << 4)

def q4k_kernel_weights(b):
    d, dmin = f16(b, 0), f16(b, 2); sc = b[4:16]; out = np.zeros(256)
    for c2 in range(4):
        for half in range(2):
            s = 2*c2 + half; scs, mn = q4k_scale_min(sc, s)
            for t in range(4):
                for part, base in ((0, 0), (1, 16)):  # a0/a1: k = t*4+i; a2/a3: 16 + t*4 + i
                    word = b[16 + c2*32 + base + t*4: 16 + c2*32 + base + t*4 + 4]
                    for i in range(4):
                        q = (word[i] >> (4*half)) & 0xF
                        out[32*s + base + t*4 + i] = d*scs*q - dmin*mn
    return out

def q6k_kernel_weights(b):
    d = f16(b, 208); out = np.zeros(256)
    for h in range(2):
        for sub in range(2):
            for t in range(4):
                off = sub*16 + t*4
                hw = b[128 + 32*h + off: 128 + 32*h + off + 4]
                for q1 in range(2):
                    lw = b[64*h + 32*q1 + off: 64*h + 32*q1 + off + 4]
                    for q2 in range(2):
                        q = q1 + 2*q2; si = 8*h + 2*q + sub
                        scale = np.uint8(b[192 + si]).astype(np.int8)
                        for i in range(4):
                            nib = (lw[i] >> (4*q2)) & 0xF
                            top = ((hw[i] >> (2*q)) & 3) << 4
                            val = ((nib | top) - 32)
                            blk = 4*h + q
                            out[blk*32 + off + i] = d*float(scale)*val
    return out

def q8_0_kernel_weights(b):
    d = f16(b, 0); out = np.zeros(32)
    for t in range(4):
        for base in (0, 16):
            for i in range(4): out[base + t*4 + i] = d*float(np.uint8(b[2 + base + t*4 + i]).astype(np.int8))
    return out

for qt, bs, fn, n in ((Q.Q4_K, 144, q4k_kernel_weights, 256), (Q.Q6_K, 210, q6k_kernel_weights, 256),
                      (Q.Q8_0, 34, q8_0_kernel_weights, 32)):
    raw = rng.integers(0, 256, size=(4, bs), dtype=np.uint8)
    for r in range(4):  # finite fp16 scales
        for off in ((0, 2) if qt == Q.Q4_K else (208,) if qt == Q.Q6_K else (0,)):
            raw[r, off:off+2] = np.frombuffer(np.float16(rng.uniform(0.01, 0.1)).tobytes(), np.uint8)
    ref = quants.dequantize(raw, qt).reshape(4, n)
    worst = 0.0
    for r in range(4):
        b = bytes(raw[r].tobytes())[:bs]
        got = fn(b)
        worst = max(worst, float(np.max(np.abs(got - ref[r]))))
    print(qt.name, "max |kernel layout - gguf|", worst)
    assert worst < 1e-5, qt.name
print("ok")

#!/usr/bin/env python3
"""Mirrors src/backend/cuda/attention_prefill.cu lane by lane in numpy: each lane's Q fragments
(split into f16 high and low halves), the key tiles gathered through the block table, the S and
P V mma.sync m16n8k16 products assembled from the lanes' registers under the PTX ISA's f16
fragment layout, the online softmax with its quad shuffles, and the writes, and checks the result
against float64 attention (causal, sliding window, soft-capping, grouped heads, several tiles and
a partial one). A check of the kernel's index math for whoever edits it, not of the kernel (that
is cuda_device_test's attention cases with TERN_CUDA_ATTN_PREFILL=2 on the GPU).
  .venv/bin/python tools/cuda/check_attention_prefill.py
"""
import numpy as np

from mirror_cases import paged_case
from ptx_fragments import ldmatrix_x4

rng = np.random.default_rng(2)
WARPS, QTILE, KTILE = 4, 64, 32


def split2(x):
    hi = np.float16(x)
    lo = np.float16(np.float32(x) - np.float32(hi))
    return hi, lo


def mma(a_frags, b_frags, acc):
    """One warp's m16n8k16: a_frags[lane] = 4 registers of 2 halves, b_frags[lane] = 2 of 2,
    acc[lane] = 4 floats; the layout of the kernel's comment (PTX ISA, .f16)."""
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a = a_frags[lane]
        for i in range(2):
            A[g, 2 * t + i] = a[0][i]; A[g + 8, 2 * t + i] = a[1][i]
            A[g, 2 * t + 8 + i] = a[2][i]; A[g + 8, 2 * t + 8 + i] = a[3][i]
        b = b_frags[lane]
        for i in range(2):
            B[2 * t + i, g] = b[0][i]; B[2 * t + 8 + i, g] = b[1][i]
    D = A @ B
    out = []
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        c = acc[lane]
        out.append([c[0] + D[g, 2 * t], c[1] + D[g, 2 * t + 1], c[2] + D[g + 8, 2 * t],
                    c[3] + D[g + 8, 2 * t + 1]])
    return out


def padded(tile):
    """A key tile as the kernel's shared memory holds it: rows of D + 8 halves, the padding NaN
    (a fragment that reads it shows)."""
    out = np.full((tile.shape[0], tile.shape[1] + 8), np.nan, np.float16)
    out[:, :tile.shape[1]] = tile
    return out


def kernel(q, kc, vc, table, block_size, kv_heads, seq_first, seq_tokens, pos0, window, softcap,
           scale, D, async_tiles, split=True):
    """async_tiles: the kAsync kernel (TERN_CUDA_ATTN_PREFILL=2), whose K and V fragments come
    through ldmatrix / ldmatrix.trans. split: Q and P as two f16 halves each."""
    lanes = np.arange(32)
    tokens, heads, _ = q.shape
    # Scores in log2 units: scale and log2 e folded into Q (only the scale with soft-capping,
    # log2 e after the cap).
    log2e = np.float32(1.4426950408889634)
    q_scale = np.float32(scale) if softcap > 0 else np.float32(scale) * log2e
    out = np.full((tokens, heads, D), np.nan)
    group = heads // kv_heads
    seq_end = seq_first + seq_tokens
    tiles = list(range(seq_first, seq_end, QTILE))
    for tile_first in tiles:
        for head in range(heads):
            kvh = head // group
            last_token = min(tile_first + QTILE - 1, seq_end - 1)
            qfirst, qlast = pos0 + tile_first - seq_first, pos0 + last_token - seq_first
            keys_begin = max(0, qfirst - window + 1) if window > 0 else 0
            keys_end = qlast + 1
            full_first = max(0, qlast - window + 1) if window > 0 else 0
            for warp in range(WARPS):
                # Per lane: rows, positions, Q fragments.
                L = []
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    st = {"tok": [], "valid": [], "qpos": [], "kfirst": []}
                    for h in range(2):
                        tok = tile_first + warp * 16 + g + 8 * h
                        st["tok"].append(tok); st["valid"].append(tok < seq_end)
                        qp = pos0 + tok - seq_first
                        st["qpos"].append(qp)
                        st["kfirst"].append(max(0, qp - window + 1) if window > 0 else 0)
                    qh, ql = [], []
                    for kk in range(D // 16):
                        rh, rl = [], []
                        for r in range(4):
                            h = r & 1
                            dim = 16 * kk + 2 * t + (8 if r >= 2 else 0)
                            x0 = x1 = 0.0
                            if st["valid"][h]:
                                x0 = np.float32(q[st["tok"][h], head, dim]) * q_scale
                                x1 = np.float32(q[st["tok"][h], head, dim + 1]) * q_scale
                            h0, l0 = split2(x0); h1, l1 = split2(x1)
                            rh.append((h0, h1)); rl.append((l0, l1))
                        qh.append(rh); ql.append(rl)
                    st["qh"], st["ql"] = qh, ql
                    st["o"] = [[0.0] * 4 for _ in range(D // 8)]
                    st["m"] = [-np.inf, -np.inf]; st["l"] = [0.0, 0.0]
                    L.append(st)
                for k0 in range(keys_begin // KTILE * KTILE, keys_end, KTILE):
                    sk = np.zeros((KTILE, D), np.float16); sv = np.zeros((KTILE, D), np.float16)
                    for r in range(KTILE):
                        pos = k0 + r
                        if pos < keys_end:
                            slot = table[pos // block_size] * block_size + pos % block_size
                            row = slot * kv_heads + kvh
                            sk[r] = kc[row]; sv[r] = vc[row]
                    s = [[[0.0] * 4 for _ in range(KTILE // 8)] for _ in range(32)]
                    skp, svp = padded(sk), padded(sv)
                    for j in range(KTILE // 8):
                        acc = [s[lane][j] for lane in range(32)]
                        for kk in range(D // 16):
                            b = []
                            if async_tiles:
                                # kk pairs: b0, b1 of kk then of kk + 1
                                regs = ldmatrix_x4(skp, 8 * j + (lanes & 7),
                                                   16 * (kk & ~1) + 8 * (lanes >> 3), False)
                                b = [(tuple(regs[lane, 2 * (kk & 1)]), tuple(regs[lane, 2 * (kk & 1) + 1]))
                                     for lane in range(32)]
                            for lane in range(32 if not async_tiles else 0):
                                g, t = lane >> 2, lane & 3
                                b.append(((sk[8 * j + g, 16 * kk + 2 * t], sk[8 * j + g, 16 * kk + 2 * t + 1]),
                                          (sk[8 * j + g, 16 * kk + 8 + 2 * t], sk[8 * j + g, 16 * kk + 9 + 2 * t])))
                            acc = mma([L[lane]["qh"][kk] for lane in range(32)], b, acc)
                            if split:
                                acc = mma([L[lane]["ql"][kk] for lane in range(32)], b, acc)
                        for lane in range(32): s[lane][j] = acc[lane]
                    # softmax
                    full = k0 >= full_first and k0 + KTILE - 1 <= qfirst
                    tmax = [[-np.inf, -np.inf] for _ in range(32)]
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        st = L[lane]
                        for j in range(KTILE // 8):
                            for c in range(4):
                                h = c >> 1
                                kpos = k0 + 8 * j + 2 * t + (c & 1)
                                valid = full or (st["valid"][h] and kpos <= st["qpos"][h] and
                                                 kpos >= st["kfirst"][h])
                                v = np.float32(s[lane][j][c])
                                if softcap > 0: v = softcap * np.tanh(v / softcap) * log2e
                                s[lane][j][c] = v if valid else -np.inf
                                tmax[lane][h] = max(tmax[lane][h], s[lane][j][c])
                    quad = lambda vals, lane: [vals[(lane & ~3) | i] for i in range(4)]
                    corr = [[1.0, 1.0] for _ in range(32)]
                    newm = [[0, 0] for _ in range(32)]
                    for lane in range(32):
                        for h in range(2):
                            qm = max(x[h] for x in quad(tmax, lane))
                            m_new = max(L[lane]["m"][h], qm)
                            corr[lane][h] = 1.0 if m_new == -np.inf else np.exp2(L[lane]["m"][h] - m_new)
                            newm[lane][h] = m_new
                    rsum = [[0.0, 0.0] for _ in range(32)]
                    for lane in range(32):
                        L[lane]["m"] = newm[lane]
                        for j in range(KTILE // 8):
                            for c in range(4):
                                h = c >> 1
                                p = 0.0 if s[lane][j][c] == -np.inf else np.exp2(s[lane][j][c] - L[lane]["m"][h])
                                s[lane][j][c] = p; rsum[lane][h] += p
                    for lane in range(32):
                        for h in range(2):
                            tot = sum(x[h] for x in quad(rsum, lane))
                            L[lane]["l"][h] = L[lane]["l"][h] * corr[lane][h] + tot
                        for d in range(D // 8):
                            o = L[lane]["o"][d]
                            o[0] *= corr[lane][0]; o[1] *= corr[lane][0]; o[2] *= corr[lane][1]; o[3] *= corr[lane][1]
                    for ks in range(KTILE // 16):
                        ph, pl = [], []
                        for lane in range(32):
                            regs_h, regs_l = [], []
                            for (jj, c0) in ((2 * ks, 0), (2 * ks, 2), (2 * ks + 1, 0), (2 * ks + 1, 2)):
                                h0, l0 = split2(s[lane][jj][c0]); h1, l1 = split2(s[lane][jj][c0 + 1])
                                regs_h.append((h0, h1)); regs_l.append((l0, l1))
                            ph.append(regs_h); pl.append(regs_l)
                        for d in range(D // 8):
                            b = []
                            if async_tiles:
                                # d pairs: b0, b1 of d then of d + 1
                                regs = ldmatrix_x4(svp, 16 * ks + (lanes & 7) + 8 * ((lanes >> 3) & 1),
                                                   8 * (d & ~1) + 8 * (lanes >> 4), True)
                                b = [(tuple(regs[lane, 2 * (d & 1)]), tuple(regs[lane, 2 * (d & 1) + 1]))
                                     for lane in range(32)]
                            for lane in range(32 if not async_tiles else 0):
                                g, t = lane >> 2, lane & 3
                                col = 8 * d + g
                                r0, r8 = 16 * ks + 2 * t, 16 * ks + 8 + 2 * t
                                b.append(((sv[r0, col], sv[r0 + 1, col]), (sv[r8, col], sv[r8 + 1, col])))
                            acc = [L[lane]["o"][d] for lane in range(32)]
                            acc = mma(ph, b, acc)
                            if split:
                                acc = mma(pl, b, acc)
                            for lane in range(32): L[lane]["o"][d] = acc[lane]
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    st = L[lane]
                    for h in range(2):
                        if not st["valid"][h]: continue
                        inv = 1.0 / st["l"][h] if st["l"][h] > 0 else 0.0
                        for d in range(D // 8):
                            out[st["tok"][h], head, 8 * d + 2 * t] = st["o"][d][2 * h] * inv
                            out[st["tok"][h], head, 8 * d + 2 * t + 1] = st["o"][d][2 * h + 1] * inv
    return out


def reference(q, kc, vc, table, block_size, kv_heads, seq_first, seq_tokens, pos0, window,
              softcap, scale):
    tokens, heads, D = q.shape
    out = np.zeros((seq_tokens, heads, D))
    for i in range(seq_tokens):
        qp = pos0 + i
        first = max(0, qp - window + 1) if window > 0 else 0
        for head in range(heads):
            kvh = head // (heads // kv_heads)
            rows = [(table[p // block_size] * block_size + p % block_size) * kv_heads + kvh
                    for p in range(first, qp + 1)]
            K = kc[rows].astype(np.float64); V = vc[rows].astype(np.float64)
            sc = K @ q[seq_first + i, head].astype(np.float64) * scale
            if softcap > 0: sc = softcap * np.tanh(sc / softcap)
            p = np.exp(sc - sc.max()); p /= p.sum()
            out[i, head] = p @ V
    return out


for D, heads, kv_heads, cached, fresh, window, softcap in (
        (64, 4, 2, 0, 70, 0, 0.0), (64, 2, 1, 40, 75, 50, 0.0), (128, 2, 2, 10, 40, 0, 30.0),
        # key tiles every row sees whole between window-masked and causal-masked ones
        (64, 2, 1, 200, 70, 150, 0.0)):
    block_size = 16
    table, kc, vc, q = paged_case(rng, cached, fresh, heads, kv_heads, D, block_size)
    scale = 1.0 / np.sqrt(D)
    want = reference(q, kc, vc, table, block_size, kv_heads, 0, fresh, cached, window, softcap, scale)
    # (async tiles, split-f16 Q and P): the kernel's is (True, True); the plain tiles and single
    # f16, variants the kernel had until 2026-12-07, stay here as cross-checks of the layouts
    for async_tiles, split in ((False, True), (True, True), (True, False)):
        got = kernel(q, kc, vc, table, block_size, kv_heads, 0, fresh, cached, window, softcap,
                     scale, D, async_tiles, split)
        err = float(np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)))
        print(f"D {D} heads {heads}/{kv_heads} cached {cached} new {fresh} window {window} "
              f"softcap {softcap} async tiles {async_tiles} split {split}: rel rms {err:.2g}")
        assert np.isfinite(got).all() and err < (1e-5 if split else 1e-3), err
print("ok")

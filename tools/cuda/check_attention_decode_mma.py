#!/usr/bin/env python3
"""Mirrors src/backend/cuda/attention_decode_mma.cu lane by lane in numpy: the block's keys
(context split, sliding window, token-tree mask), each warp's tiles of 16 keys gathered through
the block table into a padded shared-memory stage (padding filled with NaN, so a read of it
shows), the ldmatrix / ldmatrix.trans / movmatrix.trans fragments under the PTX ISA's layouts,
S^T = K Q^T and O^T += V^T P^T as mma.sync m16n8k16 products with the Q and P halves split in
two, the online softmax with its column shuffles, the warps' merge and the split combine, and
checks the result against float64 attention. A check of the kernel's index math for whoever
edits it, not of the kernel (that is cuda_device_test's attention cases on the GPU).
  .venv/bin/python tools/cuda/check_attention_decode_mma.py
"""
import numpy as np

from mirror_cases import paged_case
from ptx_fragments import ldmatrix_x4, movmatrix_trans

rng = np.random.default_rng(5)
WARPS, TILE, HEADS = 4, 16, 8
LANES = np.arange(32)
G, T = LANES >> 2, LANES & 3


def split2(x):
    x = np.asarray(x, np.float32)
    hi = x.astype(np.float16)
    lo = (x - hi.astype(np.float32)).astype(np.float16)
    return hi, lo


def mma(a, b0, b1, acc):
    """a[lane, 4, 2], b0/b1[lane, 2], acc[lane, 4]: D (16x8) += A (16x16) B (16x8)."""
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(2):
            A[g, 2 * t + i] = a[lane, 0, i]; A[g + 8, 2 * t + i] = a[lane, 1, i]
            A[g, 2 * t + 8 + i] = a[lane, 2, i]; A[g + 8, 2 * t + 8 + i] = a[lane, 3, i]
            B[2 * t + i, g] = b0[lane, i]; B[2 * t + 8 + i, g] = b1[lane, i]
    Dm = A @ B
    out = acc.copy()
    out[:, 0] += Dm[G, 2 * T]; out[:, 1] += Dm[G, 2 * T + 1]
    out[:, 2] += Dm[G + 8, 2 * T]; out[:, 3] += Dm[G + 8, 2 * T + 1]
    return out


def column_reduce(x, op):
    """__shfl_xor over offsets 4, 8, 16: the lanes of one t."""
    out = x.copy()
    for lane in range(32):
        out[lane] = op(x[(lane & 3)::4])
    return out


def token_keys(seq, token, split, splits, window):
    first_token, _, pos0, _ = seq
    pos = pos0 + token - first_token
    first = max(0, pos - window + 1) if window > 0 else 0
    per = ((pos + 1 - first + splits - 1) // splits + 31) // 32 * 32
    begin = first + split * per
    return begin, min(pos + 1, begin + per)


def block(q, kc, vc, table, bs, kv_heads, kvh, token, hc, group, D, seq, split, splits, window,
          softcap, scale, mask):
    h0 = kvh * group + hc * HEADS
    gcount = min(HEADS, group - hc * HEADS)
    begin, end = token_keys(seq, token, split, splits, window)
    tree_first = seq[2] if mask is not None else 1 << 62
    sees = lambda j: j < tree_first or (mask >> (j - tree_first)) & 1
    row = D + 8
    # Q^T fragments: b0 = dims 16kk + 2t, +1 of head g; b1 = +8.
    qh = np.zeros((D // 16, 2, 32, 2), np.float16); ql = np.zeros_like(qh)
    for kk in range(D // 16):
        for r in range(2):
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                dim = 16 * kk + 2 * t + 8 * r
                x = q[token, h0 + g, dim:dim + 2] * np.float32(scale) if g < gcount else np.zeros(2)
                qh[kk, r, lane], ql[kk, r, lane] = split2(x)
    k_rows = (LANES & 7) + 8 * ((LANES >> 3) & 1); k_cols = 8 * (LANES >> 4)
    v_rows = (LANES & 7) + 8 * (LANES >> 4); v_cols = 8 * ((LANES >> 3) & 1)
    states = []
    for warp in range(WARPS):
        o = np.zeros((D // 16, 32, 4)); m = np.full((32, 2), -np.inf); l = np.zeros((32, 2))
        step, first = TILE * WARPS, begin + TILE * warp
        tiles = (end - first + step - 1) // step if first < end else 0
        for i in range(tiles):
            base = first + i * step
            sk = np.full((TILE, row), np.nan, np.float16); sv = sk.copy()
            base_block, base_offset = base // bs, base % bs  # the tile's one division
            for r in range(TILE):
                j = base + r
                if j < end:
                    block, offset = base_block, base_offset + r
                    if offset >= bs:  # the tile straddles blocks
                        block += offset // bs; offset -= (offset // bs) * bs
                    slot = table[block] * bs + offset
                    sk[r, :D] = kc[slot * kv_heads + kvh]; sv[r, :D] = vc[slot * kv_heads + kvh]
                else:
                    sk[r, :D] = 0; sv[r, :D] = 0
            s = np.zeros((32, 4))
            for kk in range(D // 16):
                af = ldmatrix_x4(sk, k_rows, k_cols + 16 * kk, False)
                s = mma(af, qh[kk, 0], qh[kk, 1], s)
                s = mma(af, ql[kk, 0], ql[kk, 1], s)
            seen = np.array([[base + G[lane] + 8 * r < end and sees(base + G[lane] + 8 * r)
                              for r in range(2)] for lane in range(32)])
            p = np.zeros((32, 4))
            for h in range(2):
                for r in range(2):
                    v = s[:, 2 * r + h]
                    if softcap > 0: v = softcap * np.tanh(v / softcap)
                    s[:, 2 * r + h] = np.where(seen[:, r], v, -np.inf)
                mx = column_reduce(np.maximum(s[:, h], s[:, 2 + h]), np.max)
                m_new = np.maximum(m[:, h], mx)
                live = m_new != -np.inf
                with np.errstate(invalid="ignore"):
                    corr = np.where(live, np.exp(m[:, h] - m_new), 1.0)
                    p[:, h] = np.where(live, np.exp(s[:, h] - m_new), 0.0)
                    p[:, 2 + h] = np.where(live, np.exp(s[:, 2 + h] - m_new), 0.0)
                l[:, h] = np.where(live, l[:, h] * corr + p[:, h] + p[:, 2 + h], l[:, h])
                m[:, h] = np.where(live, m_new, m[:, h])
                o[:, :, h] *= corr; o[:, :, 2 + h] *= corr
            ph0, pl0 = split2(p[:, 0:2]); ph1, pl1 = split2(p[:, 2:4])
            bh0, bh1 = movmatrix_trans(ph0), movmatrix_trans(ph1)
            bl0, bl1 = movmatrix_trans(pl0), movmatrix_trans(pl1)
            for mt in range(D // 16):
                af = ldmatrix_x4(sv, v_rows, v_cols + 16 * mt, True)
                o[mt] = mma(af, bh0, bh1, o[mt])
                o[mt] = mma(af, bl0, bl1, o[mt])
        l = np.stack([column_reduce(l[:, h], np.sum) for h in range(2)], 1)
        sacc = np.zeros((HEADS, D)); sm = np.zeros(HEADS); sl = np.zeros(HEADS)
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for h in range(2):
                for mt in range(D // 16):
                    sacc[2 * t + h, 16 * mt + g] = o[mt, lane, h]
                    sacc[2 * t + h, 16 * mt + g + 8] = o[mt, lane, 2 + h]
                if g == 0:
                    sm[2 * t + h] = m[lane, h]; sl[2 * t + h] = l[lane, h]
        states.append((sm, sl, sacc))
    # store_block_output: the warps merged per head.
    result = {}
    for hd in range(gcount):
        mx = max(st[0][hd] for st in states)
        total, acc = 0.0, np.zeros(D)
        if mx != -np.inf:
            for sm, sl, sacc in states:
                f = np.exp(sm[hd] - mx)
                total += sl[hd] * f; acc += sacc[hd] * f
        result[h0 + hd] = (mx, total, acc)
    return result


def kernel(q, kc, vc, table, bs, kv_heads, seq, splits, window, softcap, scale, masks):
    tokens, heads, D = q.shape
    group = heads // kv_heads
    out = np.zeros((tokens, heads, D))
    for token in range(tokens):
        parts = {}
        for kvh in range(kv_heads):
            for hc in range((group + HEADS - 1) // HEADS):
                for split in range(splits):
                    r = block(q, kc, vc, table, bs, kv_heads, kvh, token, hc, group, D, seq, split,
                              splits, window, softcap, scale,
                              None if masks is None else masks[token])
                    for head, st in r.items(): parts.setdefault(head, []).append(st)
        for head, sts in parts.items():  # combine_kernel
            mx = max(s[0] for s in sts)
            total = sum(s[1] * np.exp(s[0] - mx) for s in sts if s[0] != -np.inf)
            acc = sum(s[2] * np.exp(s[0] - mx) for s in sts if s[0] != -np.inf)
            out[token, head] = acc / total
    return out


def reference(q, kc, vc, table, bs, kv_heads, pos0, window, softcap, scale, masks):
    tokens, heads, D = q.shape
    out = np.zeros((tokens, heads, D))
    for i in range(tokens):
        pos = pos0 + i
        first = max(0, pos - window + 1) if window > 0 else 0
        keys = [j for j in range(first, pos + 1)
                if masks is None or j < pos0 or (masks[i] >> (j - pos0)) & 1]
        for head in range(heads):
            kvh = head // (heads // kv_heads)
            rows = [(table[j // bs] * bs + j % bs) * kv_heads + kvh for j in keys]
            K = kc[rows].astype(np.float64); V = vc[rows].astype(np.float64)
            sc = K @ q[i, head].astype(np.float64) * scale
            if softcap > 0: sc = softcap * np.tanh(sc / softcap)
            p = np.exp(sc - sc.max()); p /= p.sum()
            out[i, head] = p @ V
    return out


# D, heads, kv heads, cached keys, new tokens, splits, window, softcap, tree, block size
cases = ((64, 9, 3, 70, 1, 1, 0, 0.0, False, 16),     # SmolLM2's heads, one split
         (128, 8, 2, 150, 1, 4, 0, 0.0, False, 16),   # Qwen3's group, splits
         (128, 20, 2, 40, 1, 2, 0, 30.0, False, 16),  # two head chunks (8 + 2), soft-capping
         (256, 4, 1, 90, 1, 2, 48, 0.0, False, 16),   # Gemma 3's heads, window: tiles straddle
         (64, 4, 2, 60, 1, 3, 37, 0.0, False, 8),     # blocks of 8 tokens: every tile straddles
         (64, 4, 2, 33, 5, 2, 0, 0.0, True, 16))      # a token tree of 5 nodes
for D, heads, kv_heads, cached, fresh, splits, window, softcap, tree, bs in cases:
    table, kc, vc, q = paged_case(rng, cached, fresh, heads, kv_heads, D, bs)
    # Tree: node i sees itself and its ancestors (parents: 0 <- 1, 0 <- 2, 1 <- 3, 2 <- 4).
    parents = [-1, 0, 0, 1, 2]
    masks = None
    if tree:
        masks = []
        for i in range(fresh):
            mk, n = 0, i
            while n >= 0: mk |= 1 << n; n = parents[n]
            masks.append(mk)
    scale = 1.0 / np.sqrt(D)
    seq = (0, fresh, cached, 0)
    got = kernel(q, kc, vc, table, bs, kv_heads, seq, splits, window, softcap, scale, masks)
    want = reference(q, kc, vc, table, bs, kv_heads, cached, window, softcap, scale, masks)
    err = float(np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)))
    print(f"D {D} heads {heads}/{kv_heads} keys {cached}+{fresh} splits {splits} window {window} "
          f"softcap {softcap} tree {tree}: rel rms {err:.2g}")
    assert np.isfinite(got).all() and err < 1e-5, err
print("ok")

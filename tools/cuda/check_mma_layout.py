#!/usr/bin/env python3
"""Mirrors the index math of the int8 tensor-core products (src/backend/cuda/mma_blocks.cuh's
per-type decode, gemv_mma.cu's and gemm_q8.cu's fragment and tile bookkeeping, quantize_q8.cu's
activation groups) in numpy, under the PTX ISA's mma.sync m16n8k32 / m16n8k16 .s8 fragment
layouts, and checks:
  1. decode: every weight element f * q + c equals PyPI gguf's dequantization (8 block types);
  2. gemv_mma (16 rows a block, warps splitting the blocks; Q4_K's wide-load tile kernel with its
     own lane order, Q6_K's through a shared-memory copy of its 2-byte aligned blocks) and gemm_q8 (64 x 64 tiles, 8 blocks
     of activations staged a step, partial tiles and chunks) give W . x_q, the weights times the
     8-bit activations, to float rounding: the fragments, lanes and columns line up.
A check of the arithmetic for whoever edits the kernels, not of the kernels themselves (that is
cuda_device_test on the GPU).
  .venv/bin/python tools/cuda/check_mma_layout.py
"""
import numpy as np
from gguf import quants, GGMLQuantizationType as Q

rng = np.random.default_rng(1)
BLOCK = {Q.Q4_0: (32, 18), Q.Q4_1: (32, 20), Q.Q5_0: (32, 22), Q.Q5_1: (32, 24),
         Q.Q8_0: (32, 34), Q.Q4_K: (256, 144), Q.Q5_K: (256, 176), Q.Q6_K: (256, 210)}
FP16_FIELDS = {Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,),
               Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}
GROUP = {t: 256 if BLOCK[t][0] == 256 else 32 for t in BLOCK}


def f16(b, off): return float(np.frombuffer(bytes(b[off:off + 2]), dtype=np.float16)[0])
def word(b, off): return int.from_bytes(bytes(b[off:off + 4]), "little")
def vsub4(a, c): return sum((((a >> (8 * i)) - (c >> (8 * i))) & 0xFF) << (8 * i) for i in range(4))
def bytes_s8(w): return [((w >> (8 * i)) & 0xFF) - 256 * (((w >> (8 * i)) & 0xFF) > 127) for i in range(4)]
def bit4(bits): return ((bits & 1) << 4) | ((bits & 2) << 11) | ((bits & 4) << 18) | ((bits & 8) << 25)


def k_scale_min(sc, s):
    if s < 4: return sc[s] & 63, sc[s + 4] & 63
    return (sc[s + 4] & 0xF) | ((sc[s - 4] >> 6) << 4), (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4)


def decode(qt, row, blk, t):
    """mma::decode<T>: (lo word, hi word, f_lo, f_hi, c) of block `blk` of `row` for lane t."""
    c = 0.0
    if qt == Q.Q4_0:
        b = 18 * blk; w = word(row, b + 2 + 4 * t)
        lo, hi = vsub4(w & 0x0F0F0F0F, 0x08080808), vsub4((w >> 4) & 0x0F0F0F0F, 0x08080808)
        f = f_hi = f16(row, b)
    elif qt == Q.Q4_1:
        b = 20 * blk; w = word(row, b + 4 + 4 * t)
        lo, hi = w & 0x0F0F0F0F, (w >> 4) & 0x0F0F0F0F
        f = f_hi = f16(row, b); c = f16(row, b + 2)
    elif qt in (Q.Q5_0, Q.Q5_1):
        affine = qt == Q.Q5_1; nbytes, qh_off = (24, 4) if affine else (22, 2)
        b = nbytes * blk; qh = word(row, b + qh_off); w = word(row, b + qh_off + 4 + 4 * t)
        lo = (w & 0x0F0F0F0F) | bit4((qh >> (4 * t)) & 0xF)
        hi = ((w >> 4) & 0x0F0F0F0F) | bit4((qh >> (16 + 4 * t)) & 0xF)
        if not affine: lo, hi = vsub4(lo, 0x10101010), vsub4(hi, 0x10101010)
        f = f_hi = f16(row, b)
        if affine: c = f16(row, b + 2)
    elif qt == Q.Q8_0:
        b = 34 * blk; lo, hi = word(row, b + 2 + 4 * t), word(row, b + 18 + 4 * t)
        f = f_hi = f16(row, b)
    elif qt in (Q.Q4_K, Q.Q5_K):
        five = qt == Q.Q5_K; b = (blk // 8) * (176 if five else 144); s = blk % 8
        qs = b + (48 if five else 16) + (s // 2) * 32; shift = 4 * (s % 2)
        lo = (word(row, qs + 4 * t) >> shift) & 0x0F0F0F0F
        hi = (word(row, qs + 16 + 4 * t) >> shift) & 0x0F0F0F0F
        if five:
            lo |= ((word(row, b + 16 + 4 * t) >> s) & 0x01010101) << 4
            hi |= ((word(row, b + 32 + 4 * t) >> s) & 0x01010101) << 4
        sc, m = k_scale_min(row[b + 4:b + 16], s)
        f = f_hi = f16(row, b) * sc; c = -f16(row, b + 2) * m
    elif qt == Q.Q6_K:
        b = (blk // 8) * 210; cc = blk % 8; h, q = cc // 4, cc % 4
        ql, qh, shift = b + 64 * h + 32 * (q & 1), b + 128 + 32 * h, 4 * (q >> 1)
        def quants_at(off):
            nib = (word(row, ql + off) >> shift) & 0x0F0F0F0F
            top = ((word(row, qh + off) >> (2 * q)) & 0x03030303) << 4
            return vsub4(nib | top, 0x20202020)
        lo, hi = quants_at(4 * t), quants_at(16 + 4 * t)
        d = f16(row, b + 208); sc = np.frombuffer(bytes(row[b + 192:b + 208]), np.int8)
        f, f_hi = d * float(sc[2 * cc]), d * float(sc[2 * cc + 1])
    return lo & 0xFFFFFFFF, hi & 0xFFFFFFFF, f, f_hi, c


def random_rows(qt, m, k):
    elems, nbytes = BLOCK[qt]
    raw = rng.integers(0, 256, size=(m * (k // elems), nbytes), dtype=np.uint8)
    for off in FP16_FIELDS[qt]:  # finite scales
        raw[:, off:off + 2] = np.frombuffer(
            np.float16(rng.uniform(0.01, 0.1, size=raw.shape[0])).astype(np.float16).tobytes(),
            np.uint8).reshape(-1, 2)
    return raw.reshape(m, -1)


def check_decode(qt):
    k = 512
    rows = random_rows(qt, 3, k)
    ref = quants.dequantize(rows, qt).reshape(3, k)
    worst = 0.0
    for r in range(3):
        row = rows[r].tobytes()
        for blk in range(k // 32):
            for t in range(4):
                lo, hi, f, f_hi, c = decode(qt, row, blk, t)
                for i, (q, part) in enumerate([(v, 0) for v in bytes_s8(lo)] + [(v, 1) for v in bytes_s8(hi)]):
                    e = blk * 32 + (16 if part else 0) + 4 * t + (i % 4)
                    got = (f_hi if part else f) * q + c
                    worst = max(worst, abs(got - float(ref[r, e])))
    assert worst < 1e-5, (qt.name, worst)
    return worst


def quantize(x, group):
    """quantize_q8 (group 32 or 256): qs [n, k] int8, d and s [n, k / 32]."""
    n, k = x.shape
    xg = x.reshape(n, k // group, group).astype(np.float32)
    amax = np.abs(xg).max(axis=2, keepdims=True)
    inv = np.where(amax == 0, np.float32(0), np.float32(127) / np.where(amax == 0, 1, amax)).astype(np.float32)
    qs = np.rint((xg * inv).astype(np.float32)).astype(np.int8).reshape(n, k)
    d = np.repeat((amax[:, :, 0] / np.float32(127)).astype(np.float32), group // 32, axis=1)
    s = d * qs.reshape(n, k // 32, 32).astype(np.int64).sum(axis=2)
    return qs, d.astype(np.float64), s.astype(np.float64)


def mma_k32(A, B): return A.astype(np.int64) @ B.astype(np.int64)


def warp_block_products(qt, rows_bytes, m, row0, blocks, cols, qs, d, s, n, per16):
    """One warp's 16 rows (row0..row0+15) x 8 columns (`cols`), over `blocks`: mirrors the
    lanes' decode, fragments, mma and block_product. Returns acc[lane][4]."""
    acc = np.zeros((32, 4))
    for blk in blocks:
        A = np.zeros((16, 32), np.int64); Bm = np.zeros((32, 8), np.int64)
        fr = {}
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            ra, rb = min(row0 + g, m - 1), min(row0 + g + 8, m - 1)
            fa = decode(qt, rows_bytes[ra], blk, t); fb = decode(qt, rows_bytes[rb], blk, t)
            fr[lane] = (fa, fb)
            A[g, 4 * t:4 * t + 4] = bytes_s8(fa[0]); A[g + 8, 4 * t:4 * t + 4] = bytes_s8(fb[0])
            A[g, 16 + 4 * t:20 + 4 * t] = bytes_s8(fa[1]); A[g + 8, 16 + 4 * t:20 + 4 * t] = bytes_s8(fb[1])
            col = cols[g]  # B column g: activation row cols[g] (None: zeros)
            if col is not None:
                Bm[4 * t:4 * t + 4, g] = qs[col, blk * 32 + 4 * t: blk * 32 + 4 * t + 4]
                Bm[16 + 4 * t:20 + 4 * t, g] = qs[col, blk * 32 + 16 + 4 * t: blk * 32 + 20 + 4 * t]
        if per16:
            Dlo = A[:, :16] @ Bm[:16]; Dhi = A[:, 16:] @ Bm[16:]
        else:
            D = mma_k32(A, Bm)
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            fa, fb = fr[lane]
            c0, c1 = cols[2 * t], cols[2 * t + 1]
            dx = [d[c, blk] if c is not None else 0.0 for c in (c0, c1)]
            sx = [s[c, blk] if c is not None else 0.0 for c in (c0, c1)]
            for i, (rr, fx, cc) in enumerate([(g, fa, 0), (g, fa, 1), (g + 8, fb, 0), (g + 8, fb, 1)]):
                col = 2 * t + cc
                if per16:
                    v = dx[cc] * (fx[2] * Dlo[rr, col] + fx[3] * Dhi[rr, col])
                else:
                    v = fx[2] * dx[cc] * D[rr, col]
                acc[lane, i] += v + fx[4] * sx[cc]
    return acc


def q4k_scales(hd, c2):
    """quant_device.cuh's q4k_scales: sub-blocks 2 c2, 2 c2 + 1 from the header's 16 bytes."""
    shift = 16 * (c2 & 1)
    w0, w1, w2 = (word(hd, 4) >> shift, word(hd, 8) >> shift, word(hd, 12) >> shift)
    if c2 < 2:
        return w0 & 63, (w0 >> 8) & 63, w1 & 63, (w1 >> 8) & 63
    return ((w2 & 0xF) | (((w0 >> 6) & 3) << 4), ((w2 >> 8) & 0xF) | (((w0 >> 14) & 3) << 4),
            ((w2 >> 4) & 0xF) | (((w1 >> 6) & 3) << 4), ((w2 >> 12) & 0xF) | (((w1 >> 14) & 3) << 4))


def q4k_tile_products(rows_bytes, m, row0, super_blocks, cols, qs, d, s):
    """gemv_mma.cu's gemv_q4k_tile_kernel, one warp: 16 rows x 8 columns over `super_blocks`,
    lanes loading 8 quant bytes of each 32-byte chunk (k slot 4t+i = element 8t+i, slot
    16+4t+i = element 8t+4+i). Returns acc[lane][4]."""
    acc = np.zeros((32, 4))
    for sb in super_blocks:
        for c in range(4):
            for h in range(2):
                sub = 2 * c + h
                A = np.zeros((16, 32), np.int64); Bm = np.zeros((32, 8), np.int64)
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for rr, r in ((g, min(row0 + g, m - 1)), (g + 8, min(row0 + g + 8, m - 1))):
                        q = rows_bytes[r][sb * 144 + 16 + 32 * c + 8 * t: sb * 144 + 24 + 32 * c + 8 * t]
                        nib = [(b >> (4 * h)) & 0xF for b in q]
                        A[rr, 4 * t:4 * t + 4] = nib[:4]; A[rr, 16 + 4 * t:20 + 4 * t] = nib[4:]
                    col = cols[g]
                    if col is not None:
                        e0 = sb * 256 + 32 * sub + 8 * t
                        Bm[4 * t:4 * t + 4, g] = qs[col, e0:e0 + 4]
                        Bm[16 + 4 * t:20 + 4 * t, g] = qs[col, e0 + 4:e0 + 8]
                D = mma_k32(A, Bm)
                blk = sb * 8 + sub
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for i, (rr, cc) in enumerate([(g, 0), (g, 1), (g + 8, 0), (g + 8, 1)]):
                        r = min(row0 + rr, m - 1)
                        hd = rows_bytes[r][sb * 144: sb * 144 + 16]
                        sc0, sc1, m0, m1 = q4k_scales(hd, c)
                        f = f16(hd, 0) * (sc1 if h else sc0)
                        off = -f16(hd, 2) * (m1 if h else m0)
                        col = cols[2 * t + cc]
                        dx = d[col, blk] if col is not None else 0.0
                        sx = s[col, blk] if col is not None else 0.0
                        acc[lane, i] += f * dx * D[rr, 2 * t + cc] + off * sx
    return acc


def q6k_tile_products(flat, row_offsets, m, row0, super_blocks, cols, qs, d):
    """gemv_mma.cu's gemv_q6k_tile_kernel, one warp: each row's 210-byte block copied from its
    16-byte aligned 224-byte window of the weights (`flat`, rows at `row_offsets`) into a
    240-byte shared-memory row, the lanes' words read back from there (2-byte aligned: two
    aligned words funnel-shifted), two m16n8k16 a sub-block. Returns acc[lane][4]."""
    acc = np.zeros((32, 4))
    for sb in super_blocks:
        win = np.zeros((16, 240), np.uint8); lead = [0] * 16
        for r in range(16):
            block = row_offsets[min(row0 + r, m - 1)] + sb * 210
            aligned = block & ~15
            win[r, :224] = flat[aligned:aligned + 224]
            lead[r] = block & 15

        def ww(r, off):
            a = off & ~3
            return (int.from_bytes(bytes(win[r, a:a + 8]), "little") >> (8 * (off & 3))) & 0xFFFFFFFF
        for cc in range(8):
            h, q = cc // 4, cc % 4
            shift = 4 * (q >> 1); ql = 64 * h + 32 * (q & 1); qh = 128 + 32 * h

            def quants(r, off):
                nib = (ww(r, lead[r] + ql + off) >> shift) & 0x0F0F0F0F
                top = ((ww(r, lead[r] + qh + off) >> (2 * q)) & 0x03030303) << 4
                return vsub4(nib | top, 0x20202020)
            Alo = np.zeros((16, 16), np.int64); Ahi = np.zeros((16, 16), np.int64)
            Blo = np.zeros((16, 8), np.int64); Bhi = np.zeros((16, 8), np.int64)
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for rr in (g, g + 8):
                    Alo[rr, 4 * t:4 * t + 4] = bytes_s8(quants(rr, 4 * t))
                    Ahi[rr, 4 * t:4 * t + 4] = bytes_s8(quants(rr, 16 + 4 * t))
                col = cols[g]
                if col is not None:
                    e0 = sb * 256 + 32 * cc
                    Blo[4 * t:4 * t + 4, g] = qs[col, e0 + 4 * t:e0 + 4 * t + 4]
                    Bhi[4 * t:4 * t + 4, g] = qs[col, e0 + 16 + 4 * t:e0 + 20 + 4 * t]
            Dlo, Dhi = Alo @ Blo, Ahi @ Bhi
            blk = sb * 8 + cc
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for i, (rr, c2) in enumerate([(g, 0), (g, 1), (g + 8, 0), (g + 8, 1)]):
                    dd = f16(bytes(win[rr]), lead[rr] + 208)
                    sc = [int(np.int8(win[rr, lead[rr] + 192 + 2 * cc + j])) for j in (0, 1)]
                    col = cols[2 * t + c2]
                    dx = d[col, blk] if col is not None else 0.0
                    acc[lane, i] += dx * (dd * sc[0] * Dlo[rr, 2 * t + c2] + dd * sc[1] * Dhi[rr, 2 * t + c2])
    return acc


def emulate(qt, rows_bytes, m, k, x, kernel):
    n = x.shape[0]
    qs, d, s = quantize(x, GROUP[qt])
    y = np.full((n, m), np.nan)
    blocks = k // 32
    per16 = qt == Q.Q6_K
    if kernel == "gemv_q6k_tile":  # as gemv_q4k_tile; the rows laid out from a 2-byte offset
        cols = [c if c < n else None for c in range(8)]
        base = 2  # 2-byte aligned blocks: leads 2, 4, ..., 14 and 0 occur over the super-blocks
        flat = np.zeros(base + m * len(rows_bytes[0]) + 32, np.uint8)
        offsets = [base + r * len(rows_bytes[0]) for r in range(m)]
        for r in range(m):
            flat[offsets[r]:offsets[r] + len(rows_bytes[r])] = np.frombuffer(rows_bytes[r], np.uint8)
        for bx in range((m + 15) // 16):
            total = np.zeros((32, 4))
            for warp in range(8):
                total += q6k_tile_products(flat, offsets, m, bx * 16, range(warp, k // 256, 8),
                                           cols, qs, d)
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for i in range(4):
                    row = bx * 16 + g + (8 if i >= 2 else 0); col = 2 * t + i % 2
                    if row < m and col < n: y[col, row] = total[lane, i]
    elif kernel == "gemv_q4k_tile":  # 16 rows a block; 8 warps split the super-blocks; n <= 8
        cols = [c if c < n else None for c in range(8)]
        for bx in range((m + 15) // 16):
            total = np.zeros((32, 4))
            for warp in range(8):
                total += q4k_tile_products(rows_bytes, m, bx * 16, range(warp, k // 256, 8),
                                           cols, qs, d, s)
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for i in range(4):
                    row = bx * 16 + g + (8 if i >= 2 else 0); col = 2 * t + i % 2
                    if row < m and col < n: y[col, row] = total[lane, i]
    elif kernel == "gemv_mma":  # grid: 16 rows a block; 4 warps split the blocks; n <= 8
        cols = [c if c < n else None for c in range(8)]
        for bx in range((m + 15) // 16):
            total = np.zeros((32, 4))
            for warp in range(4):
                total += warp_block_products(qt, rows_bytes, m, bx * 16, range(warp, blocks, 4),
                                             cols, qs, d, s, n, per16)
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for i in range(4):
                    row = bx * 16 + g + (8 if i >= 2 else 0); col = 2 * t + i % 2
                    if row < m and col < n: y[col, row] = total[lane, i]
    else:  # gemm_q8: 64 x 64 tiles, warp w rows 16 w.., 8 fragments of 8 columns, chunks of 8
        for bx in range((n + 63) // 64):
            for by in range((m + 63) // 64):
                for warp in range(4):
                    row0 = by * 64 + warp * 16
                    for f in range(8):
                        cols = [bx * 64 + 8 * f + g for g in range(8)]
                        cols = [c if c < n else None for c in cols]
                        acc = np.zeros((32, 4))
                        for chunk in range(0, blocks, 8):
                            nb = min(8, blocks - chunk)
                            acc += warp_block_products(qt, rows_bytes, m, row0,
                                                       range(chunk, chunk + nb), cols, qs, d, s, n, per16)
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            c0 = bx * 64 + 8 * f + 2 * t
                            for i, (row, col) in enumerate([(row0 + g, c0), (row0 + g, c0 + 1),
                                                            (row0 + g + 8, c0), (row0 + g + 8, c0 + 1)]):
                                if row < m and col < n: y[col, row] = acc[lane, i]
    # Reference: the dequantized weights times the dequantized 8-bit activations.
    w = quants.dequantize(np.stack([np.frombuffer(r, np.uint8) for r in rows_bytes]), qt).reshape(m, k)
    xq = qs.astype(np.float64) * np.repeat(d, 32, axis=1)
    ref = xq @ w.astype(np.float64).T
    scale = np.sqrt((np.abs(xq) @ np.abs(w.astype(np.float64)).T) ** 2 + 1e-30)
    return float(np.max(np.abs(y - ref) / scale))


for qt in BLOCK:
    print(f"{qt.name:5} decode: max |f q + c - gguf| {check_decode(qt):.2g}")

for qt in BLOCK:
    elems = BLOCK[qt][0]
    # k: 10 blocks of 32 (a partial chunk) or 2 super-blocks; m and n: partial tiles.
    k = 320 if elems == 32 else 512
    cases = [("gemv_mma", 21, 5), ("gemm_q8", 70, 70)]
    if qt == Q.Q4_K:  # 9 super-blocks: one warp of the 8 takes two
        cases += [("gemv_q4k_tile", 21, 5), ("gemv_q4k_tile", 16, 8)]
    if qt == Q.Q6_K:
        cases += [("gemv_q6k_tile", 21, 5)]
    for kernel, m, n in cases:
        if kernel in ("gemv_q4k_tile", "gemv_q6k_tile"): k = 256 * 9
        rows = random_rows(qt, m, k)
        rows_bytes = [rows[r].tobytes() for r in range(m)]
        x = rng.normal(size=(n, k)).astype(np.float32)
        err = emulate(qt, rows_bytes, m, k, x, kernel)
        print(f"{qt.name:5} {kernel:8} m{m} n{n} k{k}: max error / scale {err:.2g}")
        # gguf dequantizes in float32 (Q5_K's d * sc * q - dmin * m rounds): 1e-6, not 1e-15;
        # a wrong lane, column or byte shows as an error of order 1.
        assert err < 1e-6, (qt.name, kernel, err)
print("ok")

"""The PTX ISA's warp-wide matrix loads, in numpy, for the CUDA kernels' mirrors
(check_attention_decode_mma.py, check_attention_prefill.py): which lane gets which halves."""
import numpy as np


def ldmatrix_x4(smem, rows, cols, trans):
    """rows[lane], cols[lane]: the address lane gives (matrix lane // 8, its row lane % 8).
    Returns regs[lane, j, 2]."""
    regs = np.zeros((32, 4, 2), np.float16)
    for j in range(4):
        M = np.stack([smem[rows[8 * j + i], cols[8 * j + i]:cols[8 * j + i] + 8] for i in range(8)])
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            regs[lane, j] = (M[2 * t, g], M[2 * t + 1, g]) if trans else (M[g, 2 * t], M[g, 2 * t + 1])
    return regs


def movmatrix_trans(reg):
    """reg[lane, 2]: lane (g, t) holds row g, columns 2t, 2t + 1 of an 8x8 matrix."""
    M = np.zeros((8, 8), np.float16)
    for lane in range(32):
        M[lane >> 2, 2 * (lane & 3)] = reg[lane, 0]
        M[lane >> 2, 2 * (lane & 3) + 1] = reg[lane, 1]
    return np.stack([(M[2 * (lane & 3), lane >> 2], M[2 * (lane & 3) + 1, lane >> 2])
                     for lane in range(32)])

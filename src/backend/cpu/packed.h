// Row-interleaved ("packed") weight layouts for the AVX-512 VNNI kernels: groups of kPackRows (16)
// weight rows stored block by block, with the codes of the 16 rows interleaved 4 bytes at a time,
// so that one zmm holds 4 consecutive codes of each of the 16 rows and one vpdpbusd multiplies them
// by 4 broadcast activation bytes: 64 multiply-adds per instruction, with the per-row scales
// applied once per (sub-)block in 16-lane vectors. Decode (n = 1) and prefill use the same layout.
//
// Layout per group of 16 rows (g) and block index b (GGUF block b of each of the 16 rows):
//   Q8_0 (544 B, = 16 row blocks):  d[16] fp16 | q[8 steps][16 rows][4] = qs ^ 0x80 (unsigned)
//   Q4_0 (288 B, = 16 row blocks):  d[16] fp16 | qs[4 steps][16 rows][4] = the GGUF qs[4s + i]
//                                    (low nibble element 4s + i, high 16 + 4s + i); AVX2 only
//   Q4_1 (320 B, = 16 row blocks):  d[16] fp16 | m[16] fp16 | qs as Q4_0's; AVX2 only
//   Q5_0 (352 B, = 16 row blocks):  d[16] fp16 | qs[4 steps][16 rows][4] = the GGUF qs[4s + i]
//                                    (low nibble element 4s + i, high nibble 16 + 4s + i) |
//                                    hmask[8] u64: hmask[2s + h] bit 4r + i = bit 4 of element
//                                    16h + 4s + i of row r (one AVX-512 byte mask per load)
//   Q4_K (2368 B, 16 x 144 + 64):   d[16] dmin[16] fp16 | sc[8][16] mn[8][16] (6-bit values in
//                                    bytes) | q[32 loads][16 rows][4]: load L = 8p + s holds the
//                                    codes of elements 64p + 4s + i (low nibble) and
//                                    64p + 32 + 4s + i (high nibble), i < 4
//   Q6_K (3360 B, = 16 row blocks): d[16] fp16 | sc[16][16] int8 | ql[32 loads][16][4] |
//                                    qh[16][16][4]: load L = 8p + 4h + s holds elements
//                                    64p + 16h + 4s + i (low nibble) and 64p + 32 + 16h + 4s + i
//                                    (high nibble); qh[L / 2] bits 4(L % 2) + {0,1} / {2,3} hold
//                                    their top 2 bits; code 0..63, x = d * sc * (code - 32)
// The group's blocks follow each other; groups follow each other.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant.h"

namespace tern::cpu {

inline constexpr int64_t kPackRows = 16;

// Whether W[rows x cols] of `type` can be packed and this CPU (path) has the packed kernels:
// Q8_0, Q5_0, Q4_K and Q6_K on the AVX-512 path, Q4_0, Q4_1 and Q4_K on the AVX2 path; rows a
// multiple of 16.
bool can_pack(TensorType type, int64_t rows, int64_t cols, CpuPath path = default_cpu_path());

// Bytes of the packed form of W[rows x cols].
size_t packed_bytes(TensorType type, int64_t rows, int64_t cols);

// Writes the packed form of W (GGUF row-major blocks) to dst (packed_bytes long). Requires
// can_pack's type and shape conditions (not the CPU's).
void pack_rows(TensorType type, const void* w, int64_t rows, int64_t cols, void* dst,
               ThreadPool& pool);

// Row r of a packed W back to floats (tests, and get_rows on a packed table).
void dequantize_packed_row(TensorType type, const void* packed, int64_t cols, int64_t r,
                           float* dst);

// Y[n x rows] = X[n x cols] . W^T for a packed W (matmul.cpp).
Result<void> matmul_packed(TensorType type, const void* packed, int64_t rows, int64_t cols,
                           const float* x, int64_t n, float* y, ThreadPool& pool,
                           const KernelOptions& options = {});

}  // namespace tern::cpu

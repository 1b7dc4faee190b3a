// The int8 tensor-core view of GGUF weight blocks, shared by gemv_mma.cu (2 <= n <= 8) and
// gemm_q8.cu (n > 8): for one 32-element block of a weight row, the four bytes of elements
// [4 t, 4 t + 4) and [16 + 4 t, 16 + 4 t + 4) that lane t (= lane % 4) holds in an mma.sync
// m16n8k32 .s8 A fragment, as signed 8-bit integers q, with the row's factors for the block:
// weight = f * q + c (f per 16 elements for Q6_K). So a block's part of a dot product with 8-bit
// activations (scale dx, quants qx, dx * sum(qx) = sx) is f * dx * sum(q * qx) + c * sx: the
// integer sum is exact, and only the float scaling differs in order from the CPU backend's
// kernels (which compute the same products: backend/cpu/dot_scalar.cpp).
// Layouts: backend/quant_blocks.h; tools/cuda/check_mma_layout.py checks this index math against
// PyPI gguf's dequantization.
#pragma once

#include <cstdint>

#include "backend/cuda/quant_device.cuh"

namespace tern::cuda::mma {

__device__ __forceinline__ uint32_t ldg32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint32_t*>(p));
}

// The little-endian word at p, 2-byte aligned (blocks of 18, 22, 34 or 210 bytes), from aligned
// loads.
__device__ __forceinline__ uint32_t ldg32_half_aligned(const uint8_t* p) {
  const auto* a = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  const uint32_t shift = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3) * 8;
  return shift == 0 ? __ldg(a) : __funnelshift_r(__ldg(a), __ldg(a + 1), shift);
}

__device__ __forceinline__ float ldg_half(const uint8_t* p) {
  return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
}

// Bits 0..3 of `bits` moved to bit 4 of bytes 0..3 (the fifth bit of Q5_0/Q5_1 quants).
__device__ __forceinline__ uint32_t bits_to_byte_bit4(uint32_t bits) {
  return ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
}

// A lane's share of one 32-element block of one weight row.
struct Frag {
  uint32_t lo = 0, hi = 0;  // quants of elements 4 t.. and 16 + 4 t.. (four signed bytes each)
  float f_lo = 0.0f, f_hi = 0.0f;  // scale of the lo and hi elements (equal unless Q6_K)
  float c = 0.0f;                  // offset per activation sum (0 for the symmetric types)
};

// Which types the int8 tensor-core products take, and their element count per block.
__host__ __device__ constexpr bool supported(TensorType t) {
  return t == TensorType::Q4_0 || t == TensorType::Q4_1 || t == TensorType::Q5_0 ||
         t == TensorType::Q5_1 || t == TensorType::Q8_0 || t == TensorType::Q4_K ||
         t == TensorType::Q5_K || t == TensorType::Q6_K;
}
// Types whose scale changes every 16 elements: two m16n8k16 products a block.
__host__ __device__ constexpr bool scale_per_16(TensorType t) {
  return t == TensorType::Q6_K;
}
// Types with a per-block offset (weight = f q + c).
__host__ __device__ constexpr bool has_offset(TensorType t) {
  return t == TensorType::Q4_1 || t == TensorType::Q5_1 || t == TensorType::Q4_K ||
         t == TensorType::Q5_K;
}

// Block `blk` (32-element index along the row) of the row at `row`, for lane t.
template <TensorType T>
__device__ __forceinline__ Frag decode(const uint8_t* row, int64_t blk, int t) {
  Frag r;
  if constexpr (T == TensorType::Q4_0) {  // 18 bytes: d, 16 bytes of nibbles (l, l + 16)
    const uint8_t* b = row + blk * 18;
    const uint32_t w = ldg32_half_aligned(b + 2 + 4 * t);
    r.lo = __vsub4(w & 0x0F0F0F0Fu, 0x08080808u);
    r.hi = __vsub4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    r.f_lo = r.f_hi = ldg_half(b);
  } else if constexpr (T == TensorType::Q4_1) {  // 20 bytes: d, m, nibbles
    const uint8_t* b = row + blk * 20;
    const uint32_t w = ldg32(b + 4 + 4 * t);
    r.lo = w & 0x0F0F0F0Fu;
    r.hi = (w >> 4) & 0x0F0F0F0Fu;
    r.f_lo = r.f_hi = ldg_half(b);
    r.c = ldg_half(b + 2);
  } else if constexpr (T == TensorType::Q5_0 || T == TensorType::Q5_1) {
    // 22 bytes: d, qh (bit l = fifth bit of element l), nibbles; Q5_1 (24): d, m, qh, nibbles.
    constexpr bool kAffine = T == TensorType::Q5_1;
    constexpr int kBytes = kAffine ? 24 : 22, kQh = kAffine ? 4 : 2;
    const uint8_t* b = row + blk * kBytes;
    const uint32_t qh = ldg32_half_aligned(b + kQh);
    const uint32_t w = ldg32_half_aligned(b + kQh + 4 + 4 * t);
    r.lo = (w & 0x0F0F0F0Fu) | bits_to_byte_bit4((qh >> (4 * t)) & 0xFu);
    r.hi = ((w >> 4) & 0x0F0F0F0Fu) | bits_to_byte_bit4((qh >> (16 + 4 * t)) & 0xFu);
    if constexpr (!kAffine) {
      r.lo = __vsub4(r.lo, 0x10101010u);
      r.hi = __vsub4(r.hi, 0x10101010u);
    }
    r.f_lo = r.f_hi = ldg_half(b);
    if constexpr (kAffine) r.c = ldg_half(b + 2);
  } else if constexpr (T == TensorType::Q8_0) {  // 34 bytes: d, 32 int8
    const uint8_t* b = row + blk * 34;
    r.lo = ldg32_half_aligned(b + 2 + 4 * t);
    r.hi = ldg32_half_aligned(b + 18 + 4 * t);
    r.f_lo = r.f_hi = ldg_half(b);
  } else if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
    // 144 bytes a 256 super-block: d, dmin, 12 scale bytes, 128 bytes of nibbles (sub-block s:
    // the low (s even) or high nibbles of bytes 32 (s / 2)..); Q5_K (176): qh[32] before the
    // nibbles, bit s of qh[l] the fifth bit of element l of sub-block s.
    constexpr bool kFive = T == TensorType::Q5_K;
    const uint8_t* b = row + (blk / 8) * (kFive ? 176 : 144);
    const int s = static_cast<int>(blk % 8);
    const uint8_t* qs = b + (kFive ? 48 : 16) + (s / 2) * 32;
    const uint32_t shift = 4 * static_cast<uint32_t>(s % 2);
    r.lo = (ldg32(qs + 4 * t) >> shift) & 0x0F0F0F0Fu;
    r.hi = (ldg32(qs + 16 + 4 * t) >> shift) & 0x0F0F0F0Fu;
    if constexpr (kFive) {
      r.lo |= ((ldg32(b + 16 + 4 * t) >> s) & 0x01010101u) << 4;
      r.hi |= ((ldg32(b + 32 + 4 * t) >> s) & 0x01010101u) << 4;
    }
    int sc, m;
    k_scale_min(b + 4, s, sc, m);
    r.f_lo = r.f_hi = ldg_half(b) * static_cast<float>(sc);
    r.c = -ldg_half(b + 2) * static_cast<float>(m);
  } else if constexpr (T == TensorType::Q6_K) {
    // 210 bytes a super-block: ql[128], qh[64], 16 int8 scales, d. Element l of sub-block
    // cc = 4 h + q: low nibble (q < 2) or high nibble of ql[64 h + 32 (q & 1) + l], bits 2 q of
    // qh[32 h + l], minus 32; scale scales[2 cc + l / 16].
    const uint8_t* b = row + (blk / 8) * 210;
    const int cc = static_cast<int>(blk % 8), h = cc / 4, q = cc % 4;
    const uint8_t* ql = b + 64 * h + 32 * (q & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const uint32_t shift = 4 * static_cast<uint32_t>(q >> 1);
    const auto quants = [&](int off) {
      const uint32_t nib = (ldg32_half_aligned(ql + off) >> shift) & 0x0F0F0F0Fu;
      const uint32_t top = ((ldg32_half_aligned(qh + off) >> (2 * q)) & 0x03030303u) << 4;
      return __vsub4(nib | top, 0x20202020u);
    };
    r.lo = quants(4 * t);
    r.hi = quants(16 + 4 * t);
    const float d = ldg_half(b + 208);
    r.f_lo = d * static_cast<float>(static_cast<int8_t>(__ldg(b + 192 + 2 * cc)));
    r.f_hi = d * static_cast<float>(static_cast<int8_t>(__ldg(b + 192 + 2 * cc + 1)));
  }
  return r;
}

// D = A (16 x 32, s8, row-major) . B (32 x 8, s8, column-major), int32. Fragments (PTX ISA,
// m16n8k32 .s8): group g = lane / 4, t = lane % 4; a0 row g, a1 row g + 8, a2 row g, a3 row
// g + 8, each four consecutive k from 4 t (a0, a1) or 16 + 4 t (a2, a3); b0, b1 column g,
// k from 4 t and 16 + 4 t; d0, d1 row g, columns 2 t and 2 t + 1; d2, d3 row g + 8.
__device__ __forceinline__ void mma_k32(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1, int (&d)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}

// D = A (16 x 16, s8) . B (16 x 8, s8), int32 (m16n8k16 .s8: a0 row g, a1 row g + 8, each four
// consecutive k from 4 t; b0 column g, k from 4 t; D as for m16n8k32).
__device__ __forceinline__ void mma_k16(uint32_t a0, uint32_t a1, uint32_t b0, int (&d)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%7, %8, %9, %10};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

// acc (the lane's D elements: row g col 2t, row g col 2t+1, row g+8 col 2t, row g+8 col 2t+1)
// += one block's products of weight rows (fa: row g, fb: row g + 8) and activation columns
// (b0, b1 the B fragment; dx, sx the two columns' activation scales and scaled sums).
template <TensorType T>
__device__ __forceinline__ void block_product(float (&acc)[4], const Frag& fa, const Frag& fb,
                                              uint32_t b0, uint32_t b1, float dx0, float dx1,
                                              float sx0, float sx1) {
  if constexpr (scale_per_16(T)) {
    int lo[4], hi[4];
    mma_k16(fa.lo, fb.lo, b0, lo);
    mma_k16(fa.hi, fb.hi, b1, hi);
    acc[0] += dx0 * (fa.f_lo * static_cast<float>(lo[0]) + fa.f_hi * static_cast<float>(hi[0]));
    acc[1] += dx1 * (fa.f_lo * static_cast<float>(lo[1]) + fa.f_hi * static_cast<float>(hi[1]));
    acc[2] += dx0 * (fb.f_lo * static_cast<float>(lo[2]) + fb.f_hi * static_cast<float>(hi[2]));
    acc[3] += dx1 * (fb.f_lo * static_cast<float>(lo[3]) + fb.f_hi * static_cast<float>(hi[3]));
  } else {
    int d[4];
    mma_k32(fa.lo, fb.lo, fa.hi, fb.hi, b0, b1, d);
    acc[0] += fa.f_lo * dx0 * static_cast<float>(d[0]);
    acc[1] += fa.f_lo * dx1 * static_cast<float>(d[1]);
    acc[2] += fb.f_lo * dx0 * static_cast<float>(d[2]);
    acc[3] += fb.f_lo * dx1 * static_cast<float>(d[3]);
  }
  if constexpr (has_offset(T)) {
    acc[0] += fa.c * sx0;
    acc[1] += fa.c * sx1;
    acc[2] += fb.c * sx0;
    acc[3] += fb.c * sx1;
  }
}

// Calls f.template operator()<T>() for the int8 tensor-core types; false for the others.
template <typename F>
bool dispatch(TensorType type, F&& f) {
  switch (type) {
#define TERN_MMA_CASE(T)                    \
  case TensorType::T:                       \
    f.template operator()<TensorType::T>(); \
    return true;
    TERN_MMA_CASE(Q4_0)
    TERN_MMA_CASE(Q4_1)
    TERN_MMA_CASE(Q5_0)
    TERN_MMA_CASE(Q5_1)
    TERN_MMA_CASE(Q8_0)
    TERN_MMA_CASE(Q4_K)
    TERN_MMA_CASE(Q5_K)
    TERN_MMA_CASE(Q6_K)
#undef TERN_MMA_CASE
    default:
      return false;
  }
}

}  // namespace tern::cuda::mma

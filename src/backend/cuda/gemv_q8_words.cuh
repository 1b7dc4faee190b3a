// gemv_q8_words: the loads and integer dots that gemv_q8.cu's kernels build on: the 8-bit
// activations a product reads (Acts: quants, block scales and sums, written by quantize_q8.cu),
// unaligned weight words from aligned 32-bit loads (GGUF blocks of 34 or 210 bytes are only
// 2-byte aligned), 16- and 8-byte read-only loads, and __dp4a dots of eight or four words.
// Private to gemv_q8.cu (its one translation unit includes it).
#pragma once

#include <cstdint>

namespace tern::cuda::q8dot {

struct Acts {
  const int8_t* qs;  // [n, k]
  const float* d;    // [n, k / 32]
  const float* s;    // [n, k / 32]
  int64_t k;
  // The row-pair kernels prefetch their rows into L2 before the PDL wait. TERN_CUDA_GEMV_PREFETCH=0
  // turns that off for A/B runs (dropping the same prefetch from the F32/F16/BF16 pairs made the
  // BF16 decode step faster, 5.8 -> 5.0 ms; not yet measured for these kernels).
  int prefetch = 1;
};

__device__ __forceinline__ uint32_t u16x2(const uint8_t* p) {
  const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16);
}

// The aligned word holding p's first byte, and p's offset into it in bits.
__device__ __forceinline__ const uint32_t* aligned_down(const uint8_t* p) {
  return reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
}
__device__ __forceinline__ uint32_t misalignment_bits(const uint8_t* p) {
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3) * 8;
}

// The 8 little-endian words at p (2-byte aligned at least), from 9 aligned 32-bit loads.
__device__ __forceinline__ void words8(const uint8_t* p, uint32_t (&w)[8]) {
  const uint32_t* a = aligned_down(p);
  const uint32_t shift = misalignment_bits(p);
  uint32_t r[9];
#pragma unroll
  for (int i = 0; i < 9; ++i) r[i] = __ldg(a + i);
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = __funnelshift_r(r[i], r[i + 1], shift);
}

// The 8 activation words of 32-element block `blk` of row j.
__device__ __forceinline__ void load_x(const Acts& a, int j, int64_t blk, int (&x)[8]) {
  const int4* p = reinterpret_cast<const int4*>(a.qs + j * a.k + blk * 32);
  const int4 v0 = __ldg(p), v1 = __ldg(p + 1);
  x[0] = v0.x, x[1] = v0.y, x[2] = v0.z, x[3] = v0.w;
  x[4] = v1.x, x[5] = v1.y, x[6] = v1.z, x[7] = v1.w;
}

__device__ __forceinline__ int dot8(const int (&w)[8], const int (&x)[8]) {
  int s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = __dp4a(w[i], x[i], s);
  return s;
}
__device__ __forceinline__ int dot4(const int (&w)[8], const int (&x)[8], int first) {
  int s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) s = __dp4a(w[first + i], x[first + i], s);
  return s;
}

// Bit i (< 4) of `bits` moved to bit 4 of byte i.
__device__ __forceinline__ int spread4(uint32_t bits) {
  return static_cast<int>(((bits & 0xFu) * 0x00204081u & 0x01010101u) << 4);
}

__device__ __forceinline__ int4 ldg16(const void* p) {
  return __ldg(reinterpret_cast<const int4*>(p));
}
__device__ __forceinline__ int2 ldg8(const void* p) {
  return __ldg(reinterpret_cast<const int2*>(p));
}
// The two little-endian words starting `shift` bits into the aligned word a[0], from 3 aligned
// 32-bit loads.
__device__ __forceinline__ void words2_at(const uint32_t* a, uint32_t shift, uint32_t& w0,
                                          uint32_t& w1) {
  const uint32_t r0 = __ldg(a), r1 = __ldg(a + 1), r2 = __ldg(a + 2);
  w0 = __funnelshift_r(r0, r1, shift);
  w1 = __funnelshift_r(r1, r2, shift);
}
// The two little-endian words at p (2-byte aligned).
__device__ __forceinline__ void words2(const uint8_t* p, uint32_t& w0, uint32_t& w1) {
  words2_at(aligned_down(p), misalignment_bits(p), w0, w1);
}

}  // namespace tern::cuda::q8dot

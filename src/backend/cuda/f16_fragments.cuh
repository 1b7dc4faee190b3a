// f16_fragments: the tensor-core pieces the attention kernels share: mma.sync m16n8k16 (f16 in,
// f32 accumulate) and its fragment layout, ldmatrix / movmatrix, cp.async copies into shared
// memory, and the split of floats into two f16 halves that keeps float precision.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace tern::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read then).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Four 8x8 matrices of halves; lanes 8j..8j+7 give the row addresses of matrix j. Register j of
// lane (g = lane / 4, t = lane % 4) gets row g, columns 2t and 2t + 1 of matrix j (.trans: of
// its transpose).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
// The warp's 8x8 matrix of halves (lane: row g, columns 2t, 2t + 1) transposed, same layout.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_half2(__half lo, __half hi) {
  return static_cast<uint32_t>(__half_as_ushort(lo)) |
         (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
}
// 2^x by the hardware approximation (ex2.approx.ftz: ~2 ulp, results below 2^-126 flushed to 0;
// exp2f adds a denormal fix-up around it). exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// x0, x1 split into f16 high parts and the f16 rounding of the remainders.
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
  hi = pack_half2(h0, h1);
  lo = pack_half2(__float2half_rn(x0 - __half2float(h0)), __float2half_rn(x1 - __half2float(h1)));
}

// D (16 x 8, f32) += A (16 x 16, f16, row-major) . B (16 x 8, f16, column-major). Fragments (PTX
// ISA, m16n8k16 .f16): a0 row g, k 2t and 2t + 1; a1 row g + 8, the same k; a2 row g, k 2t + 8
// and 2t + 9; a3 row g + 8, those k; b0 k 2t, 2t + 1 of column g; b1 k 2t + 8, 2t + 9; d0, d1
// row g, columns 2t, 2t + 1; d2, d3 row g + 8.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace tern::cuda

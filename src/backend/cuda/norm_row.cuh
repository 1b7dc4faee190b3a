// The row norm's 8-bit quantization pieces (norm.cu's row kernels) and the norm tail: a decode
// row's residual add + RMSNorm (+ 8-bit copy) run by the last block of the product that wrote
// one of its inputs (NormTail, kernels.h), instead of a launch of its own.
// Reads: the row's two addends (one of them the product's output, read back from L2 once every
// block has written it) and the norm weights; writes the sum, the normed row and its 8-bit copy:
// ~16 KB each way for a row of 4,096, by one block of the product.
// Why: the one-block norm launch costs ~2.8 us of a decode step's graph (71 a step on Qwen3-8B:
// ~200 of ~2,780 us, 2026-12-06, H100), mostly the grid boundaries around it rather than its work.
// The tail's arithmetic is the row kernel's, its sum of squares reduced in the row kernel's
// order (the virtual warps a one-step row kernel of ceil(cols / 128) * 32 threads has), so the
// results equal the launch's bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/norm_rope.cuh"

namespace tern::cuda {

// The largest |value| of the 32-element block that 8 consecutive lanes hold (a float4 each).
__device__ __forceinline__ float block_amax8(const float4& y) {
  float amax = fmaxf(fmaxf(fabsf(y.x), fabsf(y.y)), fmaxf(fabsf(y.z), fabsf(y.w)));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax;
}

// The 8-bit block of 32 elements held by 8 consecutive lanes, quantized with the scale of `amax`
// (its own or its group's) as quantize_q8 does (integer sums do not depend on the order).
__device__ __forceinline__ void quantize_float4(const float4& y, float amax, int64_t first,
                                                bool valid, int8_t* qs, float* d_out,
                                                float* s_out) {
  const float d = amax / 127.0f;
  const float id = amax == 0.0f ? 0.0f : 127.0f / amax;  // the CPU's arithmetic (quantize_q8.cu)
  const int q0 = __float2int_rn(y.x * id), q1 = __float2int_rn(y.y * id);
  const int q2 = __float2int_rn(y.z * id), q3 = __float2int_rn(y.w * id);
  if (valid) {
    *reinterpret_cast<uint32_t*>(qs + first) =
        (static_cast<uint32_t>(q0) & 0xFFu) | ((static_cast<uint32_t>(q1) & 0xFFu) << 8) |
        ((static_cast<uint32_t>(q2) & 0xFFu) << 16) | (static_cast<uint32_t>(q3) << 24);
  }
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (valid && (threadIdx.x & 7) == 0) {
    d_out[first / 32] = d;
    s_out[first / 32] = d * static_cast<float>(sum);
  }
}

// Whether this block is the last of its grid to get here (every thread calls it once the block's
// outputs are written); the count goes back to zero in norm_tail. The block barrier orders the
// block's writes before thread 0's release; its acquire (then the barrier) orders the other
// blocks' writes before this block's reads (the split-K serial reduction's pattern, as CUTLASS's
// semaphore has it): no fence by each writer.
__device__ __forceinline__ bool last_block_of_grid(uint32_t* counter) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(before)
                 : "l"(counter)
                 : "memory");
    last = before == gridDim.x - 1;
  }
  __syncthreads();
  return last;
}

// The tail's work, by every thread of a block of kThreads (the last one of the product's grid).
// Thread t holds quads t + j * kThreads: the lanes the row kernel's warp (t + j * kThreads) / 32
// has, so its sums of squares reduce as that warp's do; the warps' totals then add in order.
template <int kThreads>
__device__ __forceinline__ void norm_tail(const NormTail& t) {
  static_assert(kThreads % 32 == 0 && kNormTailMaxQuads % kThreads == 0, "block shape");
  constexpr int kPer = kNormTailMaxQuads / kThreads;
  __shared__ float partial[kNormTailMaxQuads / 32];
  __shared__ __align__(16) float group_amax[kNormTailMaxQuads / 8];
  const int quads = static_cast<int>(t.cols / 4);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const auto* a4 = reinterpret_cast<const float4*>(t.a);
  const auto* b4 = reinterpret_cast<const float4*>(t.b);
  const auto* w4 = reinterpret_cast<const float4*>(t.weight);
  float4 v[kPer], w[kPer];
  float s[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    w[j] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);  // x * 1 is x: as the row kernel's "no weight"
    if (i < quads) {
      v[j] = __ldcg(a4 + i);  // through L2: b was written by the grid's other blocks
      const float4 y = __ldcg(b4 + i);
      v[j].x += y.x, v[j].y += y.y, v[j].z += y.z, v[j].w += y.w;
      if (w4 != nullptr) w[j] = w4[i];
    }
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    s[j] = 0.0f;
    if (i < quads) {
      reinterpret_cast<float4*>(t.sum)[i] = v[j];
      s[j] += sum_of_squares(v[j]);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) s[j] += __shfl_xor_sync(0xffffffffu, s[j], off);
  }
  const int vwarps = (quads + 31) / 32;  // the warps of the row kernel this stands for
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int vwarp = (static_cast<int>(threadIdx.x) + j * kThreads) / 32;
      if (vwarp < vwarps) partial[vwarp] = s[j];
    }
  }
  __syncthreads();
  float total = 0.0f;
  for (int k = 0; k < vwarps; ++k) total += partial[k];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(t.cols) + t.eps);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    float4 y = make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv);
    y.x *= w[j].x, y.y *= w[j].y, y.z *= w[j].z, y.w *= w[j].w;
    if (i < quads) reinterpret_cast<float4*>(t.out)[i] = y;
    v[j] = y;
  }
  if (t.qs != nullptr) {
    float amax[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      amax[j] = block_amax8(v[j]);
      if (t.group == 256 && i < quads && (lane & 7) == 0) group_amax[i / 8] = amax[j];
    }
    if (t.group == 256) __syncthreads();
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      const bool valid = i < quads;
      float scale_amax = amax[j];
      if (t.group == 256 && valid) {
        // The group's 8 block maxima (32-byte aligned: a group starts at a multiple of 8).
        const auto* g = reinterpret_cast<const float4*>(group_amax + ((i / 8) & ~7));
        const float4 g0 = g[0], g1 = g[1];
        scale_amax = fmaxf(scale_amax, fmaxf(fmaxf(fmaxf(g0.x, g0.y), fmaxf(g0.z, g0.w)),
                                             fmaxf(fmaxf(g1.x, g1.y), fmaxf(g1.z, g1.w))));
      }
      quantize_float4(v[j], scale_amax, int64_t{i} * 4, valid, t.qs, t.qd, t.qsum);
    }
  }
  if (threadIdx.x == 0) *t.counter = 0;  // for the next launch that counts on it
}

}  // namespace tern::cuda

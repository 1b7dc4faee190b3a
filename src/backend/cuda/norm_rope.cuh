// One head row's RMS norm (Qwen3-style q/k norms) and RoPE by one warp: the arithmetic that
// rms_norm_rope_kernel (norm.cu) runs and that the v4 decode attention
// (attention_decode_f16_bf16.cu) runs when it takes that launch's work over. Both call these
// functions, so their results agree bit for bit with each other and with rms_norm followed by
// rope (the roundings that matter are pinned).
// Reads: the row (head_dim floats), its norm weights, the position and the inverse frequencies;
// writes the rotated row to the caller's registers (and the normed row to a warp's shared
// memory slice, for the rotation's partners). No roofline figure of its own (device functions).
#pragma once

#include <cuda_fp16.h>

#include "backend/cuda/kernels.h"

namespace tern::cuda {

// A float4's sum of squares with its rounding pinned: y * y, then x, z and w fused in. The fused
// q/k norm + RoPE must equal row_norm_kernel + rope bit for bit, and left to itself the compiler
// contracts x*x + y*y + ... into FMAs after the code around it: reading the weights earlier in
// row_norm_kernel turned its fma(x, x, y*y) into fma(y, y, x*x) and moved one f16 k-cache value
// of cuda_device_test's fused case.
__device__ __forceinline__ float sum_of_squares(float4 v) {
  float q = __fmul_rn(v.y, v.y);
  q = __fmaf_rn(v.x, v.x, q);
  q = __fmaf_rn(v.z, v.z, q);
  return __fmaf_rn(v.w, v.w, q);
}

// Four floats as F16 (round to nearest, store_kv's conversion), packed for one 8-byte store.
__device__ __forceinline__ uint2 f16x4(const float4& f) {
  const uint32_t a = __half_as_ushort(__float2half_rn(f.x)),
                 b = __half_as_ushort(__float2half_rn(f.y));
  const uint32_t c = __half_as_ushort(__float2half_rn(f.z)),
                 d = __half_as_ushort(__float2half_rn(f.w));
  return make_uint2(a | (b << 16), c | (d << 16));
}

// What a lane of a row's warp needs besides the row itself, none of it written by a launch of
// the step (so it is read before the PDL wait): its float4s of the norm weights and each of its
// elements' rotation (sincos: the longest arithmetic here). Lane holds elements 4i..4i+3 for
// i = lane + 32 s, s < QUADS.
template <int QUADS>
struct RopeLane {
  float4 weight[QUADS];
  float sines[QUADS][4], cosines[QUADS][4];
};

template <int QUADS>
__device__ __forceinline__ void rope_lane_setup(const NormRopeLaunch& l, const float* weight,
                                                bool norm, int64_t token, int lane,
                                                RopeLane<QUADS>& r) {
  const int quads = static_cast<int>(l.head_dim / 4), half = static_cast<int>(l.rotary_dim / 2);
  const float pos = static_cast<float>(l.positions[token]) * l.position_scale;
#pragma unroll
  for (int s = 0; s < QUADS; ++s) {
    const int i = lane + 32 * s;
    r.weight[s] = norm && weight != nullptr && i < quads
                      ? reinterpret_cast<const float4*>(weight)[i]
                      : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int e = 4 * i + c;
      r.sines[s][c] = 0.0f, r.cosines[s][c] = 1.0f;
      if (i >= quads || e >= 2 * half) continue;  // past the rotary dims: the normed value
      const int pair = l.neox ? (e < half ? e : e - half) : e / 2;
      sincosf(pos * l.inv_freq[pair], &r.sines[s][c], &r.cosines[s][c]);
    }
  }
}

// The row at `src` normed (when `norm`) and rotated, into out (the lane's float4s; lanes past
// head_dim / 4 get zeros). The sum of squares is reduced in the row kernel's order for a row of
// head_dim (a float4's squares, then each warp-sized step reduced over the lanes, the steps
// added in order). `normed`: the warp's head_dim / 4 float4s of shared memory.
template <int QUADS>
__device__ __forceinline__ void norm_rope_row(const NormRopeLaunch& l, const float* src, bool norm,
                                              float eps, const RopeLane<QUADS>& r, float4* normed,
                                              int lane, float4 (&out)[QUADS]) {
  const int quads = static_cast<int>(l.head_dim / 4);
  const int cols = static_cast<int>(l.head_dim), half = static_cast<int>(l.rotary_dim / 2);
  const bool neox = l.neox;
  float4 val[QUADS];
#pragma unroll
  for (int s = 0; s < QUADS; ++s) {
    const int i = lane + 32 * s;
    val[s] =
        i < quads ? reinterpret_cast<const float4*>(src)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < QUADS; ++s) {
    if (!norm || 32 * s >= quads) break;  // uniform: the row kernel has no such warp
    float sum = 0.0f;
    sum += sum_of_squares(val[s]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    total += sum;
  }
  const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
#pragma unroll
  for (int s = 0; s < QUADS; ++s) {
    const int i = lane + 32 * s;
    if (i >= quads) continue;
    float4 y =
        norm ? make_float4(val[s].x * inv, val[s].y * inv, val[s].z * inv, val[s].w * inv) : val[s];
    if (norm) {
      const float4 w = r.weight[s];
      y.x *= w.x, y.y *= w.y, y.z *= w.z, y.w *= w.w;
    }
    normed[i] = y;
    val[s] = y;
  }
  __syncwarp();
  const float* n = reinterpret_cast<const float*>(normed);
  // rope_kernel's arithmetic for element e of the row: its pair (a, b) rotated by the pair's angle.
  auto rotated = [&](int e, float own, float sn, float cs) {
    if (e >= 2 * half) return own;  // past the rotary dims: the normed value
    const int pair = neox ? (e < half ? e : e - half) : e / 2;
    const bool first = neox ? e < half : (e & 1) == 0;
    const int a = neox ? pair : 2 * pair;
    const int b = neox ? pair + half : 2 * pair + 1;
    const float x0 = n[a], x1 = n[b];
    // (rope.cu's roundings, pinned in both.)
    return first ? __fmaf_rn(x0, cs, -__fmul_rn(x1, sn)) : __fmaf_rn(x0, sn, __fmul_rn(x1, cs));
  };
#pragma unroll
  for (int s = 0; s < QUADS; ++s) {
    const int i = lane + 32 * s;
    out[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i >= quads) continue;
    const int e = 4 * i;
    out[s] = make_float4(rotated(e, val[s].x, r.sines[s][0], r.cosines[s][0]),
                         rotated(e + 1, val[s].y, r.sines[s][1], r.cosines[s][1]),
                         rotated(e + 2, val[s].z, r.sines[s][2], r.cosines[s][2]),
                         rotated(e + 3, val[s].w, r.sines[s][3], r.cosines[s][3]));
  }
}

}  // namespace tern::cuda

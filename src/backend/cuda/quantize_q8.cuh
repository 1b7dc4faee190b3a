// quantize_q8.cuh: the 8-bit activation arithmetic that quantize_q8.cu's group-256 kernel and the
// gate/up product's fused quantization (gemv_q8.cu) share, so both write the same bytes.
#pragma once

#include <cstdint>

namespace tern::cuda {

// One warp quantizes 32 values (a block of activations) with one scale: lane l holds value l.
// Writes qs[0..31], d[0] and s[0] (the scale, and the scale x sum of the 8-bit values). The CPU
// backend's arithmetic (acts_avx2.cpp, acts_avx512.cpp, quantize.cpp): x * (127 / amax) rounded
// half to even, so both backends make the same 8-bit activations (1 / d differs from 127 / amax
// in the last bit, and roundf rounds halves away).
__device__ __forceinline__ void quantize_group32_warp(float v, int lane, int8_t* qs, float* d_out,
                                                      float* s_out) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
  const int q = __float2int_rn(v * id);
  qs[lane] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    d_out[0] = d;
    s_out[0] = d * static_cast<float>(sum);
  }
}

// One warp quantizes 256 values (a K-quant super-block of activations) with one scale: lane l
// holds values 8 l .. 8 l + 7 in v, so block j of 32 is lanes 4 j .. 4 j + 3. Writes qs[0..255],
// and d[0..7], s[0..7] (the scale and scale x sum of each block of 32: the same d for all 8).
// The CPU backend's arithmetic: q = x * (127 / amax) rounded half to even, d = amax / 127.
__device__ __forceinline__ void quantize_group256_warp(const float (&v)[8], int lane, int8_t* qs,
                                                       float* d_out, float* s_out) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  // (1 / d differs from 127 / amax in the last bit, and roundf rounds halves away.)
  const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
  uint32_t packed[2] = {0u, 0u};
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int q = __float2int_rn(v[i] * id);
    sum += q;
    packed[i / 4] |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (i % 4));
  }
  *reinterpret_cast<uint2*>(qs + lane * 8) = make_uint2(packed[0], packed[1]);
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (lane % 4 == 0) {
    d_out[lane / 4] = d;
    s_out[lane / 4] = d * static_cast<float>(sum);
  }
}

}  // namespace tern::cuda

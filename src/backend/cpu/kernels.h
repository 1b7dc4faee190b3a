// Internal: the per-path dot-product kernels behind matvec/matmul, and the activation formats
// they read. Not part of the public API (include quant.h instead).
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "base/tensor_type.h"

namespace tern::cpu::detail {

// How activations are prepared for a weight type.
enum class ActFormat { F32, Q8x32, Q8x256 };

// Quantized activations of one row of `cols` values.
//   Q8x32:  qs[cols] int8, d[cols/32] fp32 scales, isum[cols/32] = sum of the block's qs,
//           ds[2 * cols/32] = {d, d * isum} per block (fp32; read by the AVX-512 kernels).
//   Q8x256: qs[cols] int8, d[cols/256] fp32 scales, bsums[cols/16] = sums of 16 consecutive qs.
//   F32:    f32[cols].
struct Acts {
  const float* f32 = nullptr;
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  const int32_t* isum = nullptr;
  const float* ds = nullptr;
  const int16_t* bsums = nullptr;
  // Q8x32 rows prepared for the multi-row kernels (GemmKernel::lanes), one entry per 4 activations
  // (the int32 lanes of vpdpbusd): lane_d = the block's d; lane_bias = -bias * (sum of the 4 qs);
  // lane_dsum = d * (sum of the 4 qs).
  const float* lane_d = nullptr;
  const int32_t* lane_bias = nullptr;
  const float* lane_dsum = nullptr;
};

// Dot product of one weight row (GGUF blocks) with prepared activations.
using DotFn = float (*)(const void* w_row, const Acts& x, int64_t cols);

// Products of one weight row with `rows` (1..kGemmRows) activation rows: y[j * y_stride] for j <
// rows. Used by matmul for n > 1: the weight blocks are decoded once for all the rows.
constexpr int kGemmRows = 4;
using GemmFn = void (*)(const void* w_row, const Acts* x, int rows, int64_t cols, float* y,
                        int64_t y_stride);
struct GemmKernel {
  GemmFn fn = nullptr;
  bool lanes = false;   // needs Acts::lane_d and lane_bias (bias types) or lane_dsum (affine)
  int bias = 0;         // weight = d * (code - bias) [+ m]
  bool affine = false;  // has a per-block m: reads lane_dsum instead of lane_bias
};
// gemm_avx512.cpp; fn == nullptr when the type has no multi-row kernel.
GemmKernel gemm_avx512(TensorType type);
// gemm_avx2.cpp: the 4-, 5- and 8-bit 32-element types, IQ4_NL, Q4_K, Q5_K and Q6_K; fn ==
// nullptr for the others.
GemmKernel gemm_avx2(TensorType type);

// gemm_packed_avx512.cpp: one group of 16 packed weight rows (packed.h) against 1..kGemmRows
// activation rows; writes 16 outputs per activation row (y[j * y_stride + 0..15]). nullptr when
// the type has no packed layout.
GemmFn packed_avx512(TensorType type);
// gemm_packed_avx2.cpp: the same without VNNI (vpmaddubsw); Q4_0, Q4_1 and Q4_K, nullptr for the
// others.
GemmFn packed_avx2(TensorType type);

ActFormat act_format(TensorType type);

// The kernel of `path` for `type`, or nullptr when the path has no specialised kernel for the type
// (callers then fall back to the scalar one, which exists for every supported type).
DotFn dot_scalar(TensorType type);
DotFn dot_avx2(TensorType type);
DotFn dot_avx512(TensorType type);    // dot_avx512_q.cpp; defers to dot_avx512_k
DotFn dot_avx512_k(TensorType type);  // dot_avx512_k.cpp: the 256-element super-block types

// Quantizes one activation row into the given buffers (sized by the caller): d = amax / 127,
// q = round-to-nearest-even(x * 127 / amax). The SIMD versions (acts_avx2.cpp, acts_avx512.cpp)
// are bit-identical to these scalar ones (quantize.cpp).
void quantize_acts_q8x32(const float* x, int64_t cols, int8_t* qs, float* d, int32_t* isum);
void quantize_acts_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void quantize_acts_q8x32_avx2(const float* x, int64_t cols, int8_t* qs, float* d, int32_t* isum);
void quantize_acts_q8x256_avx2(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums);
void quantize_acts_q8x32_avx512(const float* x, int64_t cols, int8_t* qs, float* d, int32_t* isum);
void quantize_acts_q8x256_avx512(const float* x, int64_t cols, int8_t* qs, float* d,
                                 int16_t* bsums);

using QuantizeQ8x32Fn = void (*)(const float*, int64_t, int8_t*, float*, int32_t*);
using QuantizeQ8x256Fn = void (*)(const float*, int64_t, int8_t*, float*, int16_t*);
QuantizeQ8x32Fn quantize_acts_q8x32_fn(CpuPath path);    // matmul.cpp
QuantizeQ8x256Fn quantize_acts_q8x256_fn(CpuPath path);  // matmul.cpp

}  // namespace tern::cpu::detail

// quantize_q8: F32 activations x [n, k] to 8-bit blocks of 32 for the integer products (gemv_q8,
// gemv_mma, gemm_q8): qs [n, k] int8, then d [n, k/32] and s [n, k/32] floats, with d = amax / 127
// and q = x * (127 / amax) rounded half to even, as the CPU backend quantizes, and s = d * sum(q)
// (for the weights' offset terms). amax is taken over each `group` of values: 32 (the CPU's
// Q8x32, for the 32-element block types) or 256 (its Q8x256, for the K-quants: the 8 blocks of
// 32 share one scale), so both backends make the same 8-bit activations for every weight type.
// group 32: one warp per block; group 256: one warp per group, 8 values a lane.
// Reads 4 bytes per element, writes 1.25. Measured (group 32): 25% of the copy bandwidth at 2,048
// tokens of 4096 (a warp a block of 32: 128 bytes read a warp, too little in flight), one token
// launch-bound (H200, tern-cuda-bench --elementwise); group 256 not timed apart.
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quantize_q8.cuh"

namespace tern::cuda {
namespace {

__global__ void quantize_q8_kernel(const float* x, int64_t blocks, int8_t* qs, float* d_out,
                                   float* s_out) {
  pdl_launch_dependents();
  pdl_wait();

  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (b >= blocks) return;
  quantize_group32_warp(x[b * 32 + lane], lane, qs + b * 32, d_out + b, s_out + b);
}

// One warp per 256 values: lane l holds values 8 l .. 8 l + 7, so block j (of 32) is lanes
// 4 j .. 4 j + 3.
__global__ void quantize_q8_group256_kernel(const float* x, int64_t groups, int8_t* qs,
                                            float* d_out, float* s_out) {
  pdl_launch_dependents();
  pdl_wait();

  const int64_t gi = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (gi >= groups) return;
  const float* src = x + gi * 256 + lane * 8;  // scalar loads: x need not be 16-byte aligned
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = src[i];
  quantize_group256_warp(v, lane, qs + gi * 256, d_out + gi * 8, s_out + gi * 8);
}

}  // namespace

int q8_group(TensorType type) {
  // The 256-element super-block types: the CPU backend's act_format gives those it multiplies
  // (Q2_K..Q6_K, IQ4_XS) Q8x256; the others have no 8-bit product on either backend.
  return tensor_type_info(type).block_elements == 256 ? 256 : 32;
}

size_t q8_activation_bytes(int64_t n, int64_t k) {
  const size_t qs = (static_cast<size_t>(n * k) + 15) / 16 * 16;
  return qs + 2 * static_cast<size_t>(n * (k / 32)) * sizeof(float);
}

cudaError_t quantize_q8(const float* x, int64_t n, int64_t k, int group, void* xq,
                        cudaStream_t stream) {
  if ((group != 32 && group != 256) || k % group != 0) return cudaErrorInvalidValue;
  const int64_t blocks = n * (k / 32);
  if (blocks == 0) return cudaSuccess;
  const Q8Activations a = q8_activations(xq, n, k);
  auto* qs = const_cast<int8_t*>(a.qs);
  auto* d = const_cast<float*>(a.d);
  auto* s = const_cast<float*>(a.s);
  if (group == 256) {
    const int64_t groups = blocks / 8;
    (void)launch_pdl(quantize_q8_group256_kernel, static_cast<unsigned>((groups + 7) / 8), 256,
                     stream, x, groups, qs, d, s);
  } else {
    (void)launch_pdl(quantize_q8_kernel, static_cast<unsigned>((blocks + 7) / 8), 256, stream, x,
                     blocks, qs, d, s);
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda

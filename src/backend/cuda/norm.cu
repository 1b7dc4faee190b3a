// rms_norm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight (weight optional).
// One block per row; reads the row twice (the second time from L1), writes it once.
// Fused forms (the device queues them in place of the op sequences, with the same arithmetic in
// the same order, so their results equal the unfused ones bit for bit):
//  - add_rms_norm_q8: the residual add (reads a and b, writes sum), the norm of the sum, and the
//    8-bit quantization of the output for the next GEMV (writes 1.25 bytes per element more);
//  - rms_norm_rope: the per-head q/k norm of Qwen3-style models followed by RoPE, one block per
//    (token, head): reads and writes the head once instead of twice.
// These are one-row kernels of a decode step: launch latency, not bandwidth, bounds them
// (a 4096-float row is 16 KB: well under a microsecond at the copy bandwidth).
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* weight, float eps, int64_t cols, float* out) {
  const float* in = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* o = out + static_cast<int64_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += in[i] * in[i];
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float v = in[i] * inv;
    o[i] = weight != nullptr ? v * weight[i] : v;
  }
}

// One 32-element block of `v` (a value per lane) quantized as quantize_q8 does.
__device__ __forceinline__ void quantize_lane(float v, int64_t block, int lane, int8_t* qs,
                                              float* d_out, float* s_out) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  const int q = static_cast<int>(roundf(v * id));
  qs[block * 32 + lane] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    d_out[block] = d;
    s_out[block] = d * static_cast<float>(sum);
  }
}

template <bool kAdd, bool kQuant>
__global__ void __launch_bounds__(kThreads)
    add_rms_norm_kernel(const float* a, const float* b, float* sum_out, const float* weight,
                        float eps, int64_t cols, float* out, int8_t* qs, float* qd, float* qsum) {
  pdl_launch_dependents();
  pdl_wait();

  const int64_t r = blockIdx.x;
  const float* in = (kAdd ? sum_out : a) + r * cols;
  float* o = out + r * cols;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    float v;
    if constexpr (kAdd) {
      v = a[r * cols + i] + b[r * cols + i];
      sum_out[r * cols + i] = v;
    } else {
      v = in[i];
    }
    sum += v * v;
  }
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  // kQuant: cols % 32 == 0, so each warp's 32 consecutive elements are one 8-bit block.
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float v = in[i] * inv;
    const float y = weight != nullptr ? v * weight[i] : v;
    o[i] = y;
    if constexpr (kQuant) {
      quantize_lane(y, (r * cols + i) / 32, static_cast<int>(threadIdx.x % 32), qs, qd, qsum);
    }
  }
}

constexpr int kMaxRopeHead = 512;

__global__ void __launch_bounds__(kThreads)
    rms_norm_rope_kernel(float* x, const float* weight, float eps, int64_t cols, int64_t heads,
                         const int32_t* positions, const float* inv_freq, int64_t half, bool neox,
                         float position_scale) {
  pdl_launch_dependents();
  pdl_wait();

  const int64_t row = blockIdx.x;  // token * heads + head
  float* v = x + row * cols;
  __shared__ float normed[kMaxRopeHead];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += v[i] * v[i];
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float y = v[i] * inv;
    normed[i] = weight != nullptr ? y * weight[i] : y;
  }
  __syncthreads();
  const float pos = static_cast<float>(positions[row / heads]) * position_scale;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    if (i < half) {  // the pair's first element: rotate both
      float s, c;
      sincosf(pos * inv_freq[i], &s, &c);
      const int64_t ia = neox ? i : 2 * i;
      const int64_t ib = neox ? i + half : 2 * i + 1;
      const float x0 = normed[ia], x1 = normed[ib];
      v[ia] = x0 * c - x1 * s;
      v[ib] = x0 * s + x1 * c;
    }
    if (i >= 2 * half) v[i] = normed[i];  // past the rotary dims: the normed value
  }
}

}  // namespace

cudaError_t add_rms_norm_q8(const float* a, const float* b, float* sum, const float* weight,
                            float eps, int64_t rows, int64_t cols, float* out, void* xq,
                            cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  int8_t* qs = static_cast<int8_t*>(xq);
  float* qd = nullptr;
  float* qsum = nullptr;
  if (xq != nullptr) {
    if (cols % 32 != 0) return cudaErrorInvalidValue;
    qd = reinterpret_cast<float*>(qs + (static_cast<size_t>(rows * cols) + 15) / 16 * 16);
    qsum = qd + rows * (cols / 32);
  }
  const unsigned grid = static_cast<unsigned>(rows);
  if (b != nullptr && xq != nullptr) {
    (void)launch_pdl(add_rms_norm_kernel<true, true>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  } else if (b != nullptr) {
    (void)launch_pdl(add_rms_norm_kernel<true, false>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  } else if (xq != nullptr) {
    (void)launch_pdl(add_rms_norm_kernel<false, true>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  } else {
    (void)launch_pdl(add_rms_norm_kernel<false, false>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  }
  return cudaGetLastError();
}

cudaError_t rms_norm_rope(float* x, const float* weight, float eps, int64_t head_dim, int64_t heads,
                          int64_t n, const int32_t* positions, const float* inv_freq,
                          int64_t rotary_dim, bool neox, float position_scale,
                          cudaStream_t stream) {
  if (n * heads == 0) return cudaSuccess;
  if (head_dim > kMaxRopeHead || rotary_dim > head_dim) return cudaErrorInvalidValue;
  (void)launch_pdl(rms_norm_rope_kernel, static_cast<unsigned>(n * heads), kThreads, stream, x,
                   weight, eps, head_dim, heads, positions, inv_freq, rotary_dim / 2, neox,
                   position_scale);
  return cudaGetLastError();
}

cudaError_t rms_norm(const float* x, const float* weight, float eps, int64_t rows, int64_t cols,
                     float* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, eps, cols, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda

// rms_norm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight (weight optional).
// One block per row; reads the row twice (the second time from L1), writes it once.
#include "backend/cuda/kernels.h"

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

}  // namespace

cudaError_t rms_norm(const float* x, const float* weight, float eps, int64_t rows, int64_t cols,
                     float* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, eps, cols, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda

// Element-wise ops on F32 activations: add, add_row_vector (bias), scale, add_weighted_rows
// (a mixture-of-experts layer's scatter of one expert's outputs), and the gated
// activations silu(gate) * up and gelu_tanh(gate) * up. Each reads its inputs once and writes
// its output once; grid-stride loops. Launched with PDL (their launch overlaps the kernel before;
// plain launches would break the PDL chain of the unfused step). In the fused decode step these
// run only where no fusion applies (the residual adds are folded into the norms, silu_mul into
// the gate/up GEMV). Measured: one token launch-bound (1-3% of the copy bandwidth); 2,048 tokens
// add 80%, silu_mul 66% (H200, tern-cuda-bench --elementwise).
#include "backend/cuda/gated_activation.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 8192 ? blocks : 8192);
}

// Launched with PDL (pdl.cuh): each kernel waits for the one before it first.
#define TERN_FOR_EACH(i, n)                                                              \
  pdl_launch_dependents();                                                               \
  pdl_wait();                                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  TERN_FOR_EACH(i, n) out[i] = a[i] + b[i];
}

__global__ void add_row_kernel(float* x, const float* v, int64_t rows, int64_t cols) {
  TERN_FOR_EACH(i, rows * cols) x[i] += v[i % cols];
}

__global__ void scale_kernel(float* x, float f, int64_t n) {
  TERN_FOR_EACH(i, n) x[i] *= f;
}

__global__ void add_weighted_rows_kernel(const float* src, const int32_t* rows,
                                         const float* weights, int64_t n, int64_t cols,
                                         float* dst) {
  TERN_FOR_EACH(i, n * cols) {
    const int64_t r = i / cols, c = i % cols;
    dst[static_cast<int64_t>(rows[r]) * cols + c] += weights[r] * src[i];
  }
}

__global__ void silu_mul_kernel(const float* g, const float* u, float* out, int64_t n) {
  TERN_FOR_EACH(i, n) {
    out[i] = silu_times(g[i], u[i]);
  }
}

__global__ void gelu_mul_kernel(const float* g, const float* u, float* out, int64_t n) {
  TERN_FOR_EACH(i, n) {
    out[i] = gelu_times(g[i], u[i]);
  }
}

#undef TERN_FOR_EACH

}  // namespace

cudaError_t add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  (void)launch_pdl(add_kernel, grid_for(n), 256, stream, a, b, out, n);
  return cudaGetLastError();
}

cudaError_t add_row_vector(float* x, const float* v, int64_t rows, int64_t cols,
                           cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  (void)launch_pdl(add_row_kernel, grid_for(rows * cols), 256, stream, x, v, rows, cols);
  return cudaGetLastError();
}

cudaError_t scale(float* x, float factor, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  (void)launch_pdl(scale_kernel, grid_for(n), 256, stream, x, factor, n);
  return cudaGetLastError();
}

cudaError_t add_weighted_rows(const float* src, const int32_t* rows, const float* weights,
                              int64_t n, int64_t cols, float* dst, cudaStream_t stream) {
  if (n * cols == 0) return cudaSuccess;
  (void)launch_pdl(add_weighted_rows_kernel, grid_for(n * cols), 256, stream, src, rows, weights, n,
                   cols, dst);
  return cudaGetLastError();
}

cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n,
                     cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  (void)launch_pdl(silu_mul_kernel, grid_for(n), 256, stream, gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  (void)launch_pdl(gelu_mul_kernel, grid_for(n), 256, stream, gate, up, out, n);
  return cudaGetLastError();
}

}  // namespace tern::cuda

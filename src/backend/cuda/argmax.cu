// argmax_rows: greedy sampling on the GPU. One block of 1024 threads a row of logits: each thread
// keeps the best (value, index) of a strided slice (16-byte loads, four in flight), then warp
// shuffles and shared memory reduce them; ties go to the lower index, as std::max_element on
// the CPU breaks them. Only the int32 ids then travel back to the host (4 bytes a row instead of
// the vocabulary's 600 KB for Qwen3).
// Reads: x [rows, cols] F32 once. Writes: ids [rows] int32. Measured: 3% of the copy bandwidth
// for one 151,936-wide row (one SM reads it), 21% for 8 rows (H200, tern-cuda-bench --elementwise).
#include <cfloat>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 1024;

struct Best {
  float value;
  int32_t index;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

__device__ __forceinline__ void consider(Best& best, float v, int32_t i) {
  if (v > best.value) best = {v, i};  // indices rise within a thread: '>' keeps the first
}

__global__ void argmax_rows_kernel(const float* x, int64_t cols, int32_t* ids) {
  pdl_launch_dependents();
  pdl_wait();
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  Best best{-FLT_MAX, INT32_MAX};
  const int t = static_cast<int>(threadIdx.x);
  int64_t scalar_from = 0;
  if ((reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const auto* row4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = cols / 4;
    int64_t i = t;
    for (; i + 3 * kThreads < n4; i += 4 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = row4[i + u * kThreads];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const auto base = static_cast<int32_t>(4 * (i + u * kThreads));
        consider(best, v[u].x, base);
        consider(best, v[u].y, base + 1);
        consider(best, v[u].z, base + 2);
        consider(best, v[u].w, base + 3);
      }
    }
    for (; i < n4; i += kThreads) {
      const float4 v = row4[i];
      const auto base = static_cast<int32_t>(4 * i);
      consider(best, v.x, base);
      consider(best, v.y, base + 1);
      consider(best, v.z, base + 2);
      consider(best, v.w, base + 3);
    }
    scalar_from = 4 * n4;
  }
  for (int64_t i = scalar_from + t; i < cols; i += kThreads)
    consider(best, row[i], static_cast<int32_t>(i));
  // A row of NaNs (or all -inf) still names an index.
  if (best.index == INT32_MAX && t == 0) best = {-FLT_MAX, 0};

#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const Best other{__shfl_xor_sync(0xFFFFFFFFu, best.value, off),
                     __shfl_xor_sync(0xFFFFFFFFu, best.index, off)};
    best = better(best, other);
  }
  __shared__ Best warps[kThreads / 32];
  if (t % 32 == 0) warps[t / 32] = best;
  __syncthreads();
  if (t < 32) {
    best = warps[t];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const Best other{__shfl_xor_sync(0xFFFFFFFFu, best.value, off),
                       __shfl_xor_sync(0xFFFFFFFFu, best.index, off)};
      best = better(best, other);
    }
    if (t == 0) ids[blockIdx.x] = best.index;
  }
}

}  // namespace

cudaError_t argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* ids,
                        cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  (void)launch_pdl(argmax_rows_kernel, static_cast<unsigned>(rows), kThreads, stream, x, cols, ids);
  return cudaGetLastError();
}

}  // namespace tern::cuda

// gemv_float: decode matrix-vector products for F32, F16 and BF16 weights, y[j, :] = W . x[j, :]
// for j < n <= 8. One warp per row, four rows per block; 16-byte weight loads when each row is
// 16-byte aligned (k a multiple of 8, or of 4 for F32), element loads otherwise.
// Reads: the weights once, n * k * 4 activation bytes per row (from L1/L2). Writes n * m floats.
// Measured on the H200 (2026-12-03, tern-cuda-bench, inside a CUDA graph; copy roofline 4229 GB/s;
// n = 1): BF16 and F16 12288x4096 and 4096x12288 (100 MB, past the L2) at 77-79%; 1024x4096 41%.
// In the decode step of the BF16 Qwen3-8B file (2026-12-04, PDL launches with the rows prefetched
// into L2): 7.7 ms of GPU time a token for ~16.4 GB, ~2.1 TB/s (50%): 124 tok/s, llama.cpp 202.
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"

namespace tern::cuda {
namespace {

constexpr int kRowsPerBlock = 4;

template <TensorType T>
__device__ __forceinline__ float element(const void* w, int64_t i) {
  if constexpr (T == TensorType::F32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (T == TensorType::F16) {
    return half_bits_to_float(static_cast<const uint16_t*>(w)[i]);
  } else {
    return bf16_bits_to_float(static_cast<const uint16_t*>(w)[i]);
  }
}

// 8 consecutive elements from a 16-byte-aligned (32 for F32) address.
template <TensorType T>
__device__ __forceinline__ void load8(const void* w, int64_t i, float (&v)[8]) {
  if constexpr (T == TensorType::F32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w) + i);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w) + i);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      if constexpr (T == TensorType::F16) {
        v[2 * p] = half_bits_to_float(static_cast<uint16_t>(words[p] & 0xFFFF));
        v[2 * p + 1] = half_bits_to_float(static_cast<uint16_t>(words[p] >> 16));
      } else {
        v[2 * p] = __uint_as_float(words[p] << 16);
        v[2 * p + 1] = __uint_as_float(words[p] & 0xFFFF0000u);
      }
    }
  }
}

template <TensorType T, int N>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    gemv_float_kernel(const void* w, int64_t m, int64_t k, const float* x, int n, float* y,
                      bool vector_path) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= m) return;
  constexpr int64_t kElemBytes = T == TensorType::F32 ? 4 : 2;
  prefetch_l2(static_cast<const char*>(w) + row * k * kElemBytes,
              static_cast<size_t>(k * kElemBytes), lane);  // weights: before the wait
  pdl_launch_dependents();
  pdl_wait();
  float acc[N];
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = 0.0f;
  const int64_t base = row * k;
  if (vector_path) {
    for (int64_t i = lane * 8; i < k; i += 32 * 8) {
      float v[8];
      load8<T>(w, base + i, v);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if (j < n) {
          const float4* xp = reinterpret_cast<const float4*>(x + j * k + i);
          const float4 a = __ldg(xp), b = __ldg(xp + 1);
          acc[j] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y +
                    v[6] * b.z + v[7] * b.w;
        }
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += 32) {
      const float v = element<T>(w, base + i);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if (j < n) acc[j] += v * x[j * k + i];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float s = acc[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && j < n) y[j * m + row] = s;
  }
}

template <TensorType T>
void launch(const void* w, int64_t m, int64_t k, const float* x, int64_t n, float* y,
            cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((m + kRowsPerBlock - 1) / kRowsPerBlock));
  const bool vec = k % 8 == 0;
  const int ni = static_cast<int>(n);
  if (n <= 2) {
    (void)launch_pdl(gemv_float_kernel<T, 2>, grid, 32 * kRowsPerBlock, stream, w, m, k, x, ni, y,
                     vec);
  } else {
    (void)launch_pdl(gemv_float_kernel<T, 8>, grid, 32 * kRowsPerBlock, stream, w, m, k, x, ni, y,
                     vec);
  }
}

}  // namespace

cudaError_t gemv_float(TensorType type, const void* w, int64_t m, int64_t k, const float* x,
                       int64_t n, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  switch (type) {
    case TensorType::F32:
      launch<TensorType::F32>(w, m, k, x, n, y, stream);
      break;
    case TensorType::F16:
      launch<TensorType::F16>(w, m, k, x, n, y, stream);
      break;
    case TensorType::BF16:
      launch<TensorType::BF16>(w, m, k, x, n, y, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda

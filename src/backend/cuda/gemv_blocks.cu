// gemv_blocks: decode matrix-vector products for every GGUF block type with F32 activations:
// each lane decodes a 32-element chunk of the weight row to floats and dots it with x. The
// fallback for types without an integer-dot kernel (Q2_K, Q3_K, IQ4_NL, IQ4_XS) and the
// reference the faster kernels are timed against. One warp per row, four rows per block.
// Reads: the weights once, n * k * 4 activation bytes per row (from L1/L2). Writes n * m floats.
// Measured: 9% of the copy bandwidth for Q4_K 12288x4096, 17% for Q8_0, n = 1 (H200,
// tern-cuda-bench): the float dequantization, not memory, bounds it.
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_device.cuh"

namespace tern::cuda {
namespace {

constexpr int kRowsPerBlock = 4;

template <TensorType T, int N>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    gemv_blocks_kernel(const uint8_t* w, int64_t m, int64_t k, size_t row_bytes, const float* x,
                       int n, float* y) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= m) return;
  const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
  float acc[N];
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = 0.0f;
  for (int64_t c = lane; c < k / 32; c += 32) {
    float v[32];
    dequant_chunk<T>(wr, c, v);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < n) {
        const float4* xp = reinterpret_cast<const float4*>(x + j * k + c * 32);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float4 xv = __ldg(xp + i);
          s += v[4 * i] * xv.x + v[4 * i + 1] * xv.y + v[4 * i + 2] * xv.z + v[4 * i + 3] * xv.w;
        }
        acc[j] += s;
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

}  // namespace

cudaError_t gemv_blocks(TensorType type, const void* w, int64_t m, int64_t k, const float* x,
                        int64_t n, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  const auto& info = tensor_type_info(type);
  const size_t row_bytes = static_cast<size_t>(k / info.block_elements) * info.block_bytes;
  const dim3 grid(static_cast<unsigned>((m + kRowsPerBlock - 1) / kRowsPerBlock));
  const auto* p = static_cast<const uint8_t*>(w);
  const int ni = static_cast<int>(n);
  const bool ok = dispatch_block_type(type, [&]<TensorType T>() {
    if (n <= 2) {
      gemv_blocks_kernel<T, 2>
          <<<grid, 32 * kRowsPerBlock, 0, stream>>>(p, m, k, row_bytes, x, ni, y);
    } else {
      gemv_blocks_kernel<T, 8>
          <<<grid, 32 * kRowsPerBlock, 0, stream>>>(p, m, k, row_bytes, x, ni, y);
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tern::cuda

// gemm_q8: y [n, m] = W [m, k] . x^T for many activation rows (prefill, n > 8) with quantized
// weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) and 8-bit activations quantized as
// the CPU backend does (quantize_q8, one scale per 32 or per 256 values), on the int8 tensor
// cores (mma_blocks.cuh): the same integer products as the CPU's kernels and the GPU's decode
// GEMVs, so prefill, decode and the CPU agree to the float summation order. The BF16 path
// (dequantize + cuBLAS) rounds activations to 8 significant bits instead: another answer.
// Tiles: a block of 4 warps computes 64 weight rows x 64 activation rows; each warp 16 rows x
// 8 fragments of 8 columns (acc: 32 floats a lane). The activations of a chunk of 8 blocks (256
// values a column, 17 KB with the scales) are staged in shared memory and read by all 4 warps;
// each warp decodes its rows' weights straight from global memory (L1/L2), once per 64 columns.
// Column tiles are the fast grid dimension, so the blocks sharing a row tile run together and
// read the weights from DRAM about once.
// Reads the weights ceil(n / 64) times (mostly from L2) and the activations ceil(m / 64) times;
// writes n * m floats.
// Measured: correct (cuda_device_test Int8ProductsEqualTheCpuBackend) but below 25% of the int8
// tensor-core peak, prefill ~0.37x the dequantize + cuBLAS BF16 path (H100, Qwen3-8B Q4_K_M): the
// per-block float scaling after every mma and the weights decoded again for each 64 columns
// dominate. So it stays behind TERN_CUDA_MMQ=1 (CudaDevice::set_int8_prefill) until it is at
// least even with the BF16 path.
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_blocks.cuh"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kTileRows = 16 * kWarps;
constexpr int kFrags = 8;  // column fragments of 8 a warp
constexpr int kTileCols = 8 * kFrags;
constexpr int kChunkBlocks = 8;  // 32-element blocks staged a step (one K-quant super-block)
// Bytes a staged column: 256 quants plus 16, so the 8 columns x 4 words a B fragment reads fall
// in 32 different banks (column stride 68 words: 4 g + t).
constexpr int kColumnStride = kChunkBlocks * 32 + 16;

template <TensorType T>
__global__ void __launch_bounds__(32 * kWarps)
    gemm_q8_kernel(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs, const float* xd,
                   const float* xs, int64_t k, int64_t n, float* y) {
  __shared__ __align__(16) int8_t sq[kTileCols * kColumnStride];
  __shared__ __align__(16) float sd[kChunkBlocks][kTileCols];
  __shared__ __align__(16) float ss[kChunkBlocks][kTileCols];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane >> 2, t = lane & 3;
  const int64_t col_base = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int64_t row_a = static_cast<int64_t>(blockIdx.y) * kTileRows + warp * 16 + g;
  const int64_t row_b = row_a + 8;
  // Rows past the end read the last row and are not written.
  const uint8_t* wa = w + static_cast<size_t>(row_a < m ? row_a : m - 1) * row_bytes;
  const uint8_t* wb = w + static_cast<size_t>(row_b < m ? row_b : m - 1) * row_bytes;
  const int64_t blocks = k / 32;
  float acc[kFrags][4] = {};
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t chunk = 0; chunk < blocks; chunk += kChunkBlocks) {
    const int nb = static_cast<int>(blocks - chunk < kChunkBlocks ? blocks - chunk : kChunkBlocks);
    // Stage the chunk's quants (16-byte pieces; zeros past n and past the row's end) ...
    for (int p = static_cast<int>(threadIdx.x); p < kTileCols * 16; p += 32 * kWarps) {
      const int col = p / 16, piece = p % 16;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (col_base + col < n && piece < 2 * nb) {
        v = __ldg(
            reinterpret_cast<const uint4*>(qs + (col_base + col) * k + chunk * 32 + piece * 16));
      }
      *reinterpret_cast<uint4*>(sq + col * kColumnStride + piece * 16) = v;
    }
    // ... and their scales and scaled sums ([block][column], so a lane's two columns are a
    // float2).
    for (int p = static_cast<int>(threadIdx.x); p < kTileCols * kChunkBlocks; p += 32 * kWarps) {
      const int col = p / kChunkBlocks, j = p % kChunkBlocks;
      float dv = 0.0f, sv = 0.0f;
      if (col_base + col < n && j < nb) {
        dv = __ldg(xd + (col_base + col) * blocks + chunk + j);
        if constexpr (mma::has_offset(T)) sv = __ldg(xs + (col_base + col) * blocks + chunk + j);
      }
      sd[j][col] = dv;
      ss[j][col] = sv;
    }
    __syncthreads();
    for (int j = 0; j < nb; ++j) {
      const mma::Frag fa = mma::decode<T>(wa, chunk + j, t), fb = mma::decode<T>(wb, chunk + j, t);
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        const int8_t* column = sq + (8 * f + g) * kColumnStride + j * 32;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(column + 4 * t);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(column + 16 + 4 * t);
        const float2 dx = *reinterpret_cast<const float2*>(&sd[j][8 * f + 2 * t]);
        float2 sx = make_float2(0.0f, 0.0f);
        if constexpr (mma::has_offset(T))
          sx = *reinterpret_cast<const float2*>(&ss[j][8 * f + 2 * t]);
        mma::block_product<T>(acc[f], fa, fb, b0, b1, dx.x, dx.y, sx.x, sx.y);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
    const int64_t c0 = col_base + 8 * f + 2 * t, c1 = c0 + 1;
    if (row_a < m) {
      if (c0 < n) y[c0 * m + row_a] = acc[f][0];
      if (c1 < n) y[c1 * m + row_a] = acc[f][1];
    }
    if (row_b < m) {
      if (c0 < n) y[c0 * m + row_b] = acc[f][2];
      if (c1 < n) y[c1 * m + row_b] = acc[f][3];
    }
  }
}

}  // namespace

bool gemm_q8_supported(TensorType type, int64_t k) {
  return mma::supported(type) && k % tensor_type_info(type).block_elements == 0 && k % 32 == 0;
}

cudaError_t gemm_q8(TensorType type, const void* w, int64_t m, int64_t k, const void* xq, int64_t n,
                    float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (!gemm_q8_supported(type, k) || (reinterpret_cast<uintptr_t>(xq) & 15) != 0 ||
      (m + kTileRows - 1) / kTileRows > 65535) {
    return cudaErrorInvalidValue;
  }
  const auto& info = tensor_type_info(type);
  const size_t row_bytes = static_cast<size_t>(k / info.block_elements) * info.block_bytes;
  const Q8Activations a = q8_activations(xq, n, k);
  const dim3 grid(static_cast<unsigned>((n + kTileCols - 1) / kTileCols),
                  static_cast<unsigned>((m + kTileRows - 1) / kTileRows));
  const auto* p = static_cast<const uint8_t*>(w);
  mma::dispatch(type, [&]<TensorType T>() {
    (void)launch_pdl(gemm_q8_kernel<T>, grid, 32 * kWarps, stream, p, m, row_bytes, a.qs, a.d, a.s,
                     k, n, y);
  });
  return cudaGetLastError();
}

}  // namespace tern::cuda

// gemv_mma: products of 2 <= n <= 8 activation rows (several sequences a decode step) with
// quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) on the int8 tensor cores:
// a warp multiplies 16 weight rows, one 32-element block a step (mma_blocks.cuh: the quants as
// signed bytes, mma.sync m16n8k32, or two m16n8k16 for Q6_K's scale per 16), by the 8-bit
// activations of up to 8 rows, and scales each integer product by the block's weight and
// activation scales (plus the offset term): the CPU backend's arithmetic, summed in another order.
// Why: at n = 8 the dp4a row-pair kernel computes 8 dot products per weight decoded and the step
// is compute-heavy (Qwen3-8B Q4_K_M, 8 sequences: 7.8 ms of GPU time for weights read in ~1.2
// ms, 2026-12-05); one mma does 16 x 8 x 32 products.
// Grid: one block of 4 warps per 16 rows; the warps split the row's blocks and add up in shared
// memory. Reads the weights once, each activation row once per block (L1/L2); writes n * m floats.
// Activations: quantize_q8's layout (qs [n, k], d and s [n, k / 32]).
// Measured (2026-12-05, H100, Qwen3-8B Q4_K_M, 8 sequences after 512-token prompts): correct
// (the int8 product tests pass with it), but 378.6 tok/s in all against 939.9 with the dp4a
// row pairs: one 16-row tile a warp leaves too few warps in flight to stream the weights. With
// four blocks' loads issued before their products (below): 431.4 against 974.2 (H100, same
// call): still scattered 2- and 4-byte loads, eight rows a warp instruction. It stays behind
// TERN_CUDA_GEMV_MMA=1 (gemv_mma_enabled).
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_blocks.cuh"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

constexpr int kMmaWarps = 4;
constexpr int kMmaUnroll = 4;  // blocks a warp loads before multiplying

template <TensorType T>
__global__ void __launch_bounds__(32 * kMmaWarps)
    gemv_mma_kernel(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs,
                    const float* xd, const float* xs, int64_t k, int n, float* y) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane >> 2, t = lane & 3;
  const int64_t row_a = static_cast<int64_t>(blockIdx.x) * 16 + g, row_b = row_a + 8;
  // Rows past the end read the last row and are not written.
  const uint8_t* wa = w + static_cast<size_t>(row_a < m ? row_a : m - 1) * row_bytes;
  const uint8_t* wb = w + static_cast<size_t>(row_b < m ? row_b : m - 1) * row_bytes;
  const int64_t blocks = k / 32;
  // Lane g holds B column g (activation row g; zeros past n); D columns 2 t and 2 t + 1.
  const bool has_col = g < n;
  const int8_t* xq = qs + static_cast<int64_t>(has_col ? g : 0) * k;
  const int col0 = 2 * t, col1 = 2 * t + 1;
  pdl_launch_dependents();
  pdl_wait();
  // One block's fragments and activation scales, loaded before any product uses them.
  struct Step {
    mma::Frag fa, fb;
    uint32_t b0 = 0, b1 = 0;
    float dx0 = 0.0f, dx1 = 0.0f, sx0 = 0.0f, sx1 = 0.0f;
  };
  const auto load = [&](int64_t blk, Step& st) {
    st.fa = mma::decode<T>(wa, blk, t);
    st.fb = mma::decode<T>(wb, blk, t);
    st.b0 = has_col ? __ldg(reinterpret_cast<const uint32_t*>(xq + blk * 32 + 4 * t)) : 0u;
    st.b1 = has_col ? __ldg(reinterpret_cast<const uint32_t*>(xq + blk * 32 + 16 + 4 * t)) : 0u;
    st.dx0 = col0 < n ? __ldg(xd + col0 * blocks + blk) : 0.0f;
    st.dx1 = col1 < n ? __ldg(xd + col1 * blocks + blk) : 0.0f;
    if constexpr (mma::has_offset(T)) {
      st.sx0 = col0 < n ? __ldg(xs + col0 * blocks + blk) : 0.0f;
      st.sx1 = col1 < n ? __ldg(xs + col1 * blocks + blk) : 0.0f;
    }
  };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // kMmaUnroll blocks' loads in flight before their products (2026-12-05 on the H100 one block
  // at a time gave 1.34x one sequence for 8: each warp waited on its scattered 4-byte loads).
  // The products keep the block order, so the sums are those of the one-at-a-time loop.
  int64_t blk = warp;
  for (; blk + (kMmaUnroll - 1) * kMmaWarps < blocks; blk += kMmaUnroll * kMmaWarps) {
    Step st[kMmaUnroll];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) load(blk + u * kMmaWarps, st[u]);
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      mma::block_product<T>(acc, st[u].fa, st[u].fb, st[u].b0, st[u].b1, st[u].dx0, st[u].dx1,
                            st[u].sx0, st[u].sx1);
    }
  }
  for (; blk < blocks; blk += kMmaWarps) {
    Step st;
    load(blk, st);
    mma::block_product<T>(acc, st.fa, st.fb, st.b0, st.b1, st.dx0, st.dx1, st.sx0, st.sx1);
  }
  // The warps add up their partial D fragments in a fixed order; the first writes the valid ones.
  __shared__ float part[kMmaWarps][32][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) part[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) sum += part[v][lane][i];
    const int64_t row = i < 2 ? row_a : row_b;
    const int col = i % 2 == 0 ? col0 : col1;
    if (row < m && col < n) y[static_cast<int64_t>(col) * m + row] = sum;
  }
}

}  // namespace

bool gemv_mma_enabled(TensorType type, int64_t k) {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_MMA");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on && mma::supported(type) && k % tensor_type_info(type).block_elements == 0;
}

cudaError_t gemv_mma(TensorType type, const void* w, int64_t m, int64_t k, const int8_t* qs,
                     const float* d, const float* s, int64_t n, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (n > 8 || !mma::supported(type)) return cudaErrorInvalidValue;
  const auto& info = tensor_type_info(type);
  if (k % info.block_elements != 0) return cudaErrorInvalidValue;
  const size_t row_bytes = static_cast<size_t>(k / info.block_elements) * info.block_bytes;
  const dim3 grid(static_cast<unsigned>((m + 15) / 16));
  const auto* p = static_cast<const uint8_t*>(w);
  const int ni = static_cast<int>(n);
  mma::dispatch(type, [&]<TensorType T>() {
    (void)launch_pdl(gemv_mma_kernel<T>, grid, 32 * kMmaWarps, stream, p, m, row_bytes, qs, d, s, k,
                     ni, y);
  });
  return cudaGetLastError();
}

}  // namespace tern::cuda

// gemv_mma: products of 2 <= n <= 8 activation rows (several sequences a decode step) with
// quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) on the int8 tensor cores:
// a warp multiplies 16 weight rows, one 32-element block a step (mma_blocks.cuh: the quants as
// signed bytes, mma.sync m16n8k32, or two m16n8k16 for Q6_K's scale per 16), by the 8-bit
// activations of up to 8 rows, and scales each integer product by the block's weight and
// activation scales (plus the offset term): the CPU backend's arithmetic, summed in another order.
// Why: at n = 8 the dp4a row-pair kernel computes 8 dot products per weight decoded and the step
// is compute-heavy; one mma does 16 x 8 x 32 products.
// Grid: one block of 4 warps per 16 rows; the warps split the row's blocks and add up in shared
// memory. Reads the weights once, each activation row once per block (L1/L2); writes n * m floats.
// Activations: quantize_q8's layout (qs [n, k], d and s [n, k / 32]).
// Measured: a Qwen3-8B Q4_K_M step of 8 sequences reads the file at 25% of the copy bandwidth on
// average (H100); these kernels' fraction alone is not measured. The generic kernel (one 16-row
// tile a warp, scattered 2- and 4-byte loads) lost to the dp4a row pairs and stays behind
// TERN_CUDA_GEMV_MMA=1; Q4_K and Q6_K have their own wide-load tile kernels (below), the default
// for 2 <= n <= 8.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_blocks.cuh"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

constexpr int kMmaWarps = 4;
constexpr int kMmaUnroll = 4;  // blocks a warp loads before multiplying

// The block's W warps add up their partial D fragments (rows row0 .. row0 + 15, columns 0..7) in
// a fixed order through shared memory; the first warp writes the valid ones, y[col, row]. Every
// thread of the block must call it.
template <int W>
__device__ __forceinline__ void store_tile(const float (&acc)[4], int64_t row0, int64_t m, int n,
                                           float* y) {
  __shared__ float part[W][32][4];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) part[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < W; ++v) sum += part[v][lane][i];
    const int64_t row = row0 + g + (i < 2 ? 0 : 8);
    const int col = 2 * t + i % 2;
    if (row < m && col < n) y[static_cast<int64_t>(col) * m + row] = sum;
  }
}

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
  // kMmaUnroll blocks' loads in flight before their products (one block at a time, each warp
  // waited on its scattered 4-byte loads).
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
  store_tile<kMmaWarps>(acc, static_cast<int64_t>(blockIdx.x) * 16, m, n, y);
}

// Q4_K: sixteen rows a warp as above, but the quants come in wide loads, each
// 32-byte sector of a row used whole: lane (g, t) loads bytes [8 t, 8 t + 8) of each of the
// four 32-byte quant chunks of rows g and g + 8 (8-byte loads) and the rows' 16-byte headers.
// The 32 elements of sub-block 2c (low nibbles) or 2c + 1 (high nibbles) go to the mma in the
// order "k slot 4 t + i holds element 8 t + i, slot 16 + 4 t + i element 8 t + 4 + i"; the
// activations' B fragment (bytes [8 t, 8 t + 8) of the sub-block, one 8-byte load) follows the
// same order, so the integer sum is the block's dot product. A warp takes one super-block of
// its 16 rows a step (2.3 KB of weights in flight), the block's 8 warps split k.
// Measured (H100, Qwen3-8B Q4_K_M, `tern bench --parallel 1 --parallel 8`, same calls): 8
// sequences 953.8 / 957.2 -> 1126.2 / 1127.1 aggregate tok/s (3.34-3.38x -> 3.98-3.99x one
// sequence): the default for Q4_K since then.
// Reads: the weights once, each activation row once per 16 rows (L1/L2). Writes n * m floats.
constexpr int kQ4kTileWarps = 8;

__global__ void __launch_bounds__(32 * kQ4kTileWarps)
    gemv_q4k_tile_kernel(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs,
                         const float* xd, const float* xs, int64_t k, int n, float* y) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane >> 2, t = lane & 3;
  const int64_t row_a = static_cast<int64_t>(blockIdx.x) * 16 + g, row_b = row_a + 8;
  // Rows past the end read the last row and are not written.
  const uint8_t* wa = w + static_cast<size_t>(row_a < m ? row_a : m - 1) * row_bytes;
  const uint8_t* wb = w + static_cast<size_t>(row_b < m ? row_b : m - 1) * row_bytes;
  const int64_t super_blocks = k / 256, blocks = k / 32;
  const bool has_col = g < n;  // lane g holds B column g (activation row g)
  const int8_t* xq = qs + static_cast<int64_t>(has_col ? g : 0) * k;
  const int col0 = 2 * t, col1 = 2 * t + 1;  // the lane's D columns
  const bool ok0 = col0 < n, ok1 = col1 < n;
  const float* xd0 = xd + (ok0 ? col0 : 0) * blocks;
  const float* xd1 = xd + (ok1 ? col1 : 0) * blocks;
  const float* xs0 = xs + (ok0 ? col0 : 0) * blocks;
  const float* xs1 = xs + (ok1 ? col1 : 0) * blocks;
  pdl_launch_dependents();
  pdl_wait();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t sb = warp; sb < super_blocks; sb += kQ4kTileWarps) {
    const uint8_t* ba = wa + sb * 144;
    const uint8_t* bb = wb + sb * 144;
    const int4 ha = __ldg(reinterpret_cast<const int4*>(ba));
    const int4 hb = __ldg(reinterpret_cast<const int4*>(bb));
    int2 qa[4], qb[4], xv[8];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      qa[c] = __ldg(reinterpret_cast<const int2*>(ba + 16 + 32 * c + 8 * t));
      qb[c] = __ldg(reinterpret_cast<const int2*>(bb + 16 + 32 * c + 8 * t));
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      xv[s] = has_col ? __ldg(reinterpret_cast<const int2*>(xq + sb * 256 + 32 * s + 8 * t))
                      : make_int2(0, 0);
    }
    const uint32_t dda = static_cast<uint32_t>(ha.x), ddb = static_cast<uint32_t>(hb.x);
    const float da = half_bits_to_float(static_cast<uint16_t>(dda & 0xFFFF));
    const float dmina = half_bits_to_float(static_cast<uint16_t>(dda >> 16));
    const float db = half_bits_to_float(static_cast<uint16_t>(ddb & 0xFFFF));
    const float dminb = half_bits_to_float(static_cast<uint16_t>(ddb >> 16));
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      int sca[2], ma[2], scb[2], mb[2];
      q4k_scales(ha, c, sca[0], sca[1], ma[0], ma[1]);
      q4k_scales(hb, c, scb[0], scb[1], mb[0], mb[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * c + h;
        const uint32_t shift = 4 * h;
        const uint32_t a0 = (static_cast<uint32_t>(qa[c].x) >> shift) & 0x0F0F0F0Fu;
        const uint32_t a2 = (static_cast<uint32_t>(qa[c].y) >> shift) & 0x0F0F0F0Fu;
        const uint32_t a1 = (static_cast<uint32_t>(qb[c].x) >> shift) & 0x0F0F0F0Fu;
        const uint32_t a3 = (static_cast<uint32_t>(qb[c].y) >> shift) & 0x0F0F0F0Fu;
        int d[4];
        mma::mma_k32(a0, a1, a2, a3, static_cast<uint32_t>(xv[s].x), static_cast<uint32_t>(xv[s].y),
                     d);
        // As mma::block_product: weight = f q + c with f = d sc, c = -dmin m.
        const float fa = da * static_cast<float>(sca[h]), fb = db * static_cast<float>(scb[h]);
        const float ca = -dmina * static_cast<float>(ma[h]);
        const float cb = -dminb * static_cast<float>(mb[h]);
        const int64_t blk = sb * 8 + s;
        const float dx0 = ok0 ? __ldg(xd0 + blk) : 0.0f, dx1 = ok1 ? __ldg(xd1 + blk) : 0.0f;
        const float sx0 = ok0 ? __ldg(xs0 + blk) : 0.0f, sx1 = ok1 ? __ldg(xs1 + blk) : 0.0f;
        acc[0] += fa * dx0 * static_cast<float>(d[0]);
        acc[1] += fa * dx1 * static_cast<float>(d[1]);
        acc[2] += fb * dx0 * static_cast<float>(d[2]);
        acc[3] += fb * dx1 * static_cast<float>(d[3]);
        acc[0] += ca * sx0;
        acc[1] += ca * sx1;
        acc[2] += cb * sx0;
        acc[3] += cb * sx1;
      }
    }
  }
  store_tile<kQ4kTileWarps>(acc, static_cast<int64_t>(blockIdx.x) * 16, m, n, y);
}

// Q6_K: the same tiles of 16 rows a warp, one
// super-block a step, 8 warps splitting k. Q6_K blocks are 210 bytes, 2-byte aligned, so the warp
// first copies its 16 rows' blocks into shared memory with 16-byte loads (each row's aligned
// 224-byte window, 7 loads a lane), then every lane reads its A fragments from there: sub-block
// cc = 4 h + q, elements l of [4 t, 4 t + 4) and [16 + 4 t, 16 + 4 t + 4) (low or high nibble of
// ql[64 h + 32 (q & 1) + l], bits 2 q of qh[32 h + l], minus 32), two m16n8k16 products a
// sub-block for its two scales (mma::decode<Q6_K>'s lane order and block_product's arithmetic).
constexpr int kQ6kTileWarps = 8;
constexpr int kQ6kWindow = 224;  // an aligned window holding any 210-byte block
constexpr int kQ6kStride = 240;  // a row's window in shared memory (16-byte aligned)

// The little-endian word at byte `off` (2-byte aligned) of a shared-memory window.
__device__ __forceinline__ uint32_t window_word(const uint8_t* win, int off) {
  const auto* a = reinterpret_cast<const uint32_t*>(win + (off & ~3));
  return __funnelshift_r(a[0], a[1], static_cast<uint32_t>(off & 3) * 8);
}

__global__ void __launch_bounds__(32 * kQ6kTileWarps)
    gemv_q6k_tile_kernel(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs,
                         const float* xd, int64_t k, int n, float* y) {
  __shared__ __align__(16) uint8_t stage[kQ6kTileWarps][16][kQ6kStride];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t super_blocks = k / 256, blocks = k / 32;
  const bool has_col = g < n;
  const int8_t* xq = qs + static_cast<int64_t>(has_col ? g : 0) * k;
  const int col0 = 2 * t, col1 = 2 * t + 1;
  const bool ok0 = col0 < n, ok1 = col1 < n;
  const float* xd0 = xd + (ok0 ? col0 : 0) * blocks;
  const float* xd1 = xd + (ok1 ? col1 : 0) * blocks;
  uint8_t(*win)[kQ6kStride] = stage[warp];
  pdl_launch_dependents();
  pdl_wait();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t sb = warp; sb < super_blocks; sb += kQ6kTileWarps) {
    // The 16 rows' blocks, each from its aligned window: lane i copies 16-byte pieces i, i + 32,
    // ... of the 16 x 14 (rows past the end read the last row and are not written); a piece that
    // starts past the block's end is skipped, so reads stay inside the 16-byte aligned span that
    // holds the block (past the tensor's end only when that end is not 16-byte aligned).
    int lead[2];  // where the block starts in the windows of rows g and g + 8
#pragma unroll
    for (int j = 0; j < 16 * (kQ6kWindow / 16) / 32; ++j) {
      const int piece = lane + 32 * j, r = piece / (kQ6kWindow / 16), c = piece % (kQ6kWindow / 16);
      const int64_t row = row0 + r < m ? row0 + r : m - 1;
      const uintptr_t block = reinterpret_cast<uintptr_t>(w + row * row_bytes + sb * 210);
      const auto* aligned = reinterpret_cast<const int4*>(block & ~uintptr_t{15});
      if (16 * c < static_cast<int>(block & 15) + 210) {
        *reinterpret_cast<int4*>(&win[r][16 * c]) = __ldg(aligned + c);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + g + 8 * h < m ? row0 + g + 8 * h : m - 1;
      lead[h] = static_cast<int>(reinterpret_cast<uintptr_t>(w + row * row_bytes + sb * 210) & 15);
    }
    __syncwarp();
    const uint8_t* wa = win[g] + lead[0];
    const uint8_t* wb = win[g + 8] + lead[1];
    const float da = half_bits_to_float(static_cast<uint16_t>(window_word(win[g], lead[0] + 208)));
    const float db =
        half_bits_to_float(static_cast<uint16_t>(window_word(win[g + 8], lead[1] + 208)));
#pragma unroll
    for (int cc = 0; cc < 8; ++cc) {
      const int h = cc / 4, q = cc % 4;
      const uint32_t shift = 4 * static_cast<uint32_t>(q >> 1);
      const int ql = 64 * h + 32 * (q & 1), qh = 128 + 32 * h;
      const auto quants = [&](const uint8_t* base, int lead, int off) {
        const uint32_t nib = (window_word(base - lead, lead + ql + off) >> shift) & 0x0F0F0F0Fu;
        const uint32_t top = ((window_word(base - lead, lead + qh + off) >> (2 * q)) & 0x03030303u)
                             << 4;
        return __vsub4(nib | top, 0x20202020u);
      };
      const uint32_t a_lo = quants(wa, lead[0], 4 * t), a_hi = quants(wa, lead[0], 16 + 4 * t);
      const uint32_t b_lo = quants(wb, lead[1], 4 * t), b_hi = quants(wb, lead[1], 16 + 4 * t);
      const float fa_lo = da * static_cast<float>(static_cast<int8_t>(wa[192 + 2 * cc]));
      const float fa_hi = da * static_cast<float>(static_cast<int8_t>(wa[193 + 2 * cc]));
      const float fb_lo = db * static_cast<float>(static_cast<int8_t>(wb[192 + 2 * cc]));
      const float fb_hi = db * static_cast<float>(static_cast<int8_t>(wb[193 + 2 * cc]));
      const int64_t e0 = sb * 256 + 32 * cc;
      const uint32_t x_lo =
          has_col ? __ldg(reinterpret_cast<const uint32_t*>(xq + e0 + 4 * t)) : 0u;
      const uint32_t x_hi =
          has_col ? __ldg(reinterpret_cast<const uint32_t*>(xq + e0 + 16 + 4 * t)) : 0u;
      int lo[4], hi[4];
      mma::mma_k16(a_lo, b_lo, x_lo, lo);
      mma::mma_k16(a_hi, b_hi, x_hi, hi);
      const int64_t blk = sb * 8 + cc;
      const float dx0 = ok0 ? __ldg(xd0 + blk) : 0.0f, dx1 = ok1 ? __ldg(xd1 + blk) : 0.0f;
      acc[0] += dx0 * (fa_lo * static_cast<float>(lo[0]) + fa_hi * static_cast<float>(hi[0]));
      acc[1] += dx1 * (fa_lo * static_cast<float>(lo[1]) + fa_hi * static_cast<float>(hi[1]));
      acc[2] += dx0 * (fb_lo * static_cast<float>(lo[2]) + fb_hi * static_cast<float>(hi[2]));
      acc[3] += dx1 * (fb_lo * static_cast<float>(lo[3]) + fb_hi * static_cast<float>(hi[3]));
    }
    __syncwarp();  // the window is rewritten by the next step's copies
  }
  store_tile<kQ6kTileWarps>(acc, row0, m, n, y);
}

}  // namespace

// Which types take these kernels for 2 <= n <= 8: Q4_K and Q6_K by default (their wide-load tile
// kernels, measured faster than the dp4a row pairs at 8 sequences); the rest keep the dp4a row
// pairs. TERN_CUDA_GEMV_MMA=q4k: Q4_K alone; =1: every int8 mma type; =0: none.
bool gemv_mma_enabled(TensorType type, int64_t k) {
  static const int mode = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_MMA");
    if (v == nullptr) return 3;
    if (std::strcmp(v, "1") == 0) return 1;
    if (std::strcmp(v, "q4k") == 0) return 2;
    return std::strcmp(v, "0") == 0 ? 0 : 3;
  }();
  const bool on = mode == 1 || (mode >= 2 && type == TensorType::Q4_K) ||
                  (mode == 3 && type == TensorType::Q6_K);
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
  if (type == TensorType::Q6_K) {
    (void)launch_pdl(gemv_q6k_tile_kernel, grid, 32 * kQ6kTileWarps, stream, p, m, row_bytes, qs, d,
                     k, ni, y);
    return cudaGetLastError();
  }
  if (type == TensorType::Q4_K) {
    (void)launch_pdl(gemv_q4k_tile_kernel, grid, 32 * kQ4kTileWarps, stream, p, m, row_bytes, qs, d,
                     s, k, ni, y);
    return cudaGetLastError();
  }
  mma::dispatch(type, [&]<TensorType T>() {
    (void)launch_pdl(gemv_mma_kernel<T>, grid, 32 * kMmaWarps, stream, p, m, row_bytes, qs, d, s, k,
                     ni, y);
  });
  return cudaGetLastError();
}

}  // namespace tern::cuda

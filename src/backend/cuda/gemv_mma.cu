// gemv_mma: Q4_K, Q6_K and Q8_0 products of 2 <= n <= 8 activation rows (several sequences a decode
// step) on the int8 tensor cores, mma.sync.m16n8k32.s8: a warp multiplies 16 weight rows (the 4-bit
// quants unpacked to bytes, one 32-element sub-block a step) by the 8-bit activations of up to 8
// rows, then scales each int32 product by the sub-block's scale and the activation block's scale
// and subtracts the min term, as gemv_q8's dp4a kernels do. Activations come quantized per 32
// (quantize_q8.cu: qs [n, k], d and s [n, k / 32]).
// Why: at n = 8 the dp4a row-pair kernel computes 8 dot products per weight decoded and the step
// is compute-heavy (Qwen3-8B Q4_K_M, 8 sequences: 7.8 ms of GPU time for weights read in ~1.2
// ms, 2026-12-05); one mma does 16 x 8 x 32 products.
// Grid: one block of 4 warps per 16 rows; the warps split the superblocks (Q4_K) or blocks (Q8_0)
// and add up in shared memory. Reads the weights once, each activation row once per block (L1/L2).
// Writes n * m floats. Not yet run on a GPU: behind TERN_CUDA_GEMV_MMA=1 (gemv_mma_enabled) until
// it is measured.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"

namespace tern::cuda {
namespace {

constexpr int kMmaWarps = 4;
constexpr int kQ4KBytes = 144;  // d, dmin (2 x fp16), 12 scale bytes, 128 quant bytes

__device__ __forceinline__ uint32_t ldg32(const void* p) {
  return __ldg(static_cast<const uint32_t*>(p));
}

// The little-endian word at p (2-byte aligned: Q8_0's 34-byte blocks), from aligned loads.
__device__ __forceinline__ uint32_t ldg32_half_aligned(const uint8_t* p) {
  const auto* a = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  const uint32_t shift = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3) * 8;
  return shift == 0 ? __ldg(a) : __funnelshift_r(__ldg(a), __ldg(a + 1), shift);
}

// The block's warps add up their partial D fragments; the first warp writes the valid ones.
__device__ __forceinline__ void store_tile(const float (&acc)[4], int64_t m, int n, float* y) {
  __shared__ float part[kMmaWarps][32][4];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) part[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  const int64_t row_a = static_cast<int64_t>(blockIdx.x) * 16 + (lane >> 2);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) sum += part[v][lane][i];
    const int64_t row = i < 2 ? row_a : row_a + 8;
    const int col = 2 * (lane & 3) + i % 2;
    if (row < m && col < n) y[static_cast<int64_t>(col) * m + row] = sum;
  }
}

// acc (the lane's D elements: row a col 0, row a col 1, row b col 0, row b col 1) += the mma's
// int32 products times the rows' weight scales (fa, fb) and the columns' activation scales.
__device__ __forceinline__ void add_scaled(float (&acc)[4], const int (&d)[4], float fa, float fb,
                                           float dx0, float dx1) {
  acc[0] += fa * dx0 * static_cast<float>(d[0]);
  acc[1] += fa * dx1 * static_cast<float>(d[1]);
  acc[2] += fb * dx0 * static_cast<float>(d[2]);
  acc[3] += fb * dx1 * static_cast<float>(d[3]);
}

// A lane's share of its block's tile: weight rows g and g + 8 of the block's 16 (rows past the
// end read the last row and are not written), activation row g as the B column, and D columns
// 2 t and 2 t + 1. Waits for the previous kernel (PDL) before anything is read.
struct TileLane {
  int warp, t;
  const uint8_t* wa;
  const uint8_t* wb;
  bool has_col;
  int col0, col1;
  const int8_t* xq;
  int64_t blocks;  // 32-element activation blocks a row
  int n;

  __device__ TileLane(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs, int64_t k,
                      int n_rows)
      : warp(static_cast<int>(threadIdx.x / 32)),
        t(static_cast<int>(threadIdx.x % 4)),
        blocks(k / 32),
        n(n_rows) {
    const int g = static_cast<int>(threadIdx.x % 32) >> 2;
    const int64_t row_a = static_cast<int64_t>(blockIdx.x) * 16 + g, row_b = row_a + 8;
    wa = w + static_cast<size_t>(row_a < m ? row_a : m - 1) * row_bytes;
    wb = w + static_cast<size_t>(row_b < m ? row_b : m - 1) * row_bytes;
    has_col = g < n;
    col0 = 2 * t;
    col1 = 2 * t + 1;
    xq = qs + static_cast<int64_t>(has_col ? g : 0) * k;
    pdl_launch_dependents();
    pdl_wait();
  }
  // Four activation quants of block `blk` from element `offset` (0 for columns past n).
  __device__ uint32_t b(int64_t blk, int offset) const {
    return has_col ? ldg32(xq + blk * 32 + offset) : 0u;
  }
  // A per-block activation value (d or s) of D column `col` (0 past n).
  __device__ float act(const float* v, int col, int64_t blk) const {
    return col < n ? __ldg(v + col * blocks + blk) : 0.0f;
  }
};

// D = A (16 x 32, s8, row-major) . B (32 x 8, s8, column-major), int32. Fragments (PTX ISA,
// m16n8k32 .s8): group g = lane / 4, t = lane % 4; a0 row g, a1 row g + 8, a2 row g, a3 row
// g + 8, each four consecutive k from t * 4 (a0, a1) or 16 + t * 4 (a2, a3); b0, b1 column g,
// k from t * 4 and 16 + t * 4; d0, d1 row g, columns 2 t and 2 t + 1; d2, d3 row g + 8.
__device__ __forceinline__ void mma_s8(const uint32_t (&a)[4], const uint32_t (&b)[2],
                                       int (&d)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0), "r"(0), "r"(0),
        "r"(0));
}

// D = A (16 x 16, s8) . B (16 x 8, s8), int32 (m16n8k16 .s8: a0 row g, a1 row g + 8, each four
// consecutive k from t * 4; b0 column g, k from t * 4; D as for m16n8k32).
__device__ __forceinline__ void mma_s8_k16(uint32_t a0, uint32_t a1, uint32_t b0, int (&d)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%7, %8, %9, %10};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

__global__ void __launch_bounds__(32 * kMmaWarps)
    gemv_mma_q4k_kernel(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs,
                        const float* xd, const float* xs, int64_t k, int n, float* y) {
  const TileLane L(w, m, row_bytes, qs, k, n);
  const int t = L.t;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t sb = L.warp; sb < k / 256; sb += kMmaWarps) {
    const uint8_t* ba = L.wa + sb * kQ4KBytes;
    const uint8_t* bb = L.wb + sb * kQ4KBytes;
    const float da = half_bits_to_float(load_u16(ba)), mina = half_bits_to_float(load_u16(ba + 2));
    const float db = half_bits_to_float(load_u16(bb)), minb = half_bits_to_float(load_u16(bb + 2));
#pragma unroll
    for (int c2 = 0; c2 < 4; ++c2) {  // a 64-element chunk: sub-blocks 2 c2 (low nibbles), 2 c2 + 1
      const uint32_t qa_lo = ldg32(ba + 16 + c2 * 32 + t * 4);
      const uint32_t qa_hi = ldg32(ba + 16 + c2 * 32 + 16 + t * 4);
      const uint32_t qb_lo = ldg32(bb + 16 + c2 * 32 + t * 4);
      const uint32_t qb_hi = ldg32(bb + 16 + c2 * 32 + 16 + t * 4);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int s = 2 * c2 + half;
        const int64_t blk = sb * 8 + s;
        const uint32_t shift = 4 * half;
        const uint32_t a[4] = {(qa_lo >> shift) & 0x0F0F0F0Fu, (qb_lo >> shift) & 0x0F0F0F0Fu,
                               (qa_hi >> shift) & 0x0F0F0F0Fu, (qb_hi >> shift) & 0x0F0F0F0Fu};
        const uint32_t b[2] = {L.b(blk, t * 4), L.b(blk, 16 + t * 4)};
        int d[4];
        mma_s8(a, b, d);
        int sca, mna, scb, mnb;
        k_scale_min(ba + 4, s, sca, mna);
        k_scale_min(bb + 4, s, scb, mnb);
        const float dx0 = L.act(xd, L.col0, blk), dx1 = L.act(xd, L.col1, blk);
        const float sx0 = L.act(xs, L.col0, blk), sx1 = L.act(xs, L.col1, blk);
        const float fa = da * static_cast<float>(sca), ma = mina * static_cast<float>(mna);
        const float fb = db * static_cast<float>(scb), mb = minb * static_cast<float>(mnb);
        add_scaled(acc, d, fa, fb, dx0, dx1);
        acc[0] -= ma * sx0, acc[1] -= ma * sx1, acc[2] -= mb * sx0, acc[3] -= mb * sx1;
      }
    }
  }
  store_tile(acc, m, n, y);
}

// Q8_0: 34-byte blocks (fp16 d, 32 int8 quants); a warp step is one block of its 16 rows.
__global__ void __launch_bounds__(32 * kMmaWarps)
    gemv_mma_q8_0_kernel(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs,
                         const float* xd, int64_t k, int n, float* y) {
  const TileLane L(w, m, row_bytes, qs, k, n);
  const int t = L.t;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t blk = L.warp; blk < L.blocks; blk += kMmaWarps) {
    const uint8_t* ba = L.wa + blk * 34;
    const uint8_t* bb = L.wb + blk * 34;
    const uint32_t a[4] = {ldg32_half_aligned(ba + 2 + t * 4), ldg32_half_aligned(bb + 2 + t * 4),
                           ldg32_half_aligned(ba + 18 + t * 4),
                           ldg32_half_aligned(bb + 18 + t * 4)};
    const uint32_t b[2] = {L.b(blk, t * 4), L.b(blk, 16 + t * 4)};
    int d[4];
    mma_s8(a, b, d);
    const float da = half_bits_to_float(load_u16(ba)), db = half_bits_to_float(load_u16(bb));
    const float dx0 = L.act(xd, L.col0, blk), dx1 = L.act(xd, L.col1, blk);
    add_scaled(acc, d, da, db, dx0, dx1);
  }
  store_tile(acc, m, n, y);
}

// Q6_K: 210-byte superblocks (128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales,
// fp16 d) with a scale per 16 elements, so one m16n8k16 step per 16 elements. Element
// e = 128 h + 32 q + l: low nibble of ql[64 h + 32 (q & 1) + l] (q < 2) or its high nibble,
// bits 2 q of qh[32 h + l], scale scales[8 h + 2 q + l / 16], minus 32.
__global__ void __launch_bounds__(32 * kMmaWarps)
    gemv_mma_q6k_kernel(const uint8_t* w, int64_t m, size_t row_bytes, const int8_t* qs,
                        const float* xd, int64_t k, int n, float* y) {
  const TileLane L(w, m, row_bytes, qs, k, n);
  const int t = L.t;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t sb = L.warp; sb < k / 256; sb += kMmaWarps) {
    const uint8_t* ba = L.wa + sb * 210;
    const uint8_t* bb = L.wb + sb * 210;
    const float da = half_bits_to_float(load_u16(ba + 208));
    const float db = half_bits_to_float(load_u16(bb + 208));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int sub = 0; sub < 2; ++sub) {  // l / 16: which 16 of each 32
        const int off = sub * 16 + t * 4;
        const uint32_t ha = ldg32_half_aligned(ba + 128 + 32 * h + off);
        const uint32_t hb = ldg32_half_aligned(bb + 128 + 32 * h + off);
#pragma unroll
        for (int q1 = 0; q1 < 2; ++q1) {  // q & 1: which 32 bytes of ql
          const uint32_t la = ldg32_half_aligned(ba + 64 * h + 32 * q1 + off);
          const uint32_t lb = ldg32_half_aligned(bb + 64 * h + 32 * q1 + off);
#pragma unroll
          for (int q2 = 0; q2 < 2; ++q2) {  // q >> 1: low or high nibbles
            const int q = q1 + 2 * q2;
            const auto quants = [&](uint32_t lo, uint32_t hi) {
              const uint32_t nib = (lo >> (4 * q2)) & 0x0F0F0F0Fu;
              const uint32_t top = ((hi >> (2 * q)) & 0x03030303u) << 4;
              return __vsub4(nib | top, 0x20202020u);
            };
            const int64_t blk = sb * 8 + 4 * h + q;
            const uint32_t b0 = L.b(blk, off);
            int d[4];
            mma_s8_k16(quants(la, ha), quants(lb, hb), b0, d);
            const int si = 8 * h + 2 * q + sub;
            const float fa = da * static_cast<float>(static_cast<int8_t>(ba[192 + si]));
            const float fb = db * static_cast<float>(static_cast<int8_t>(bb[192 + si]));
            const float dx0 = L.act(xd, L.col0, blk), dx1 = L.act(xd, L.col1, blk);
            add_scaled(acc, d, fa, fb, dx0, dx1);
          }
        }
      }
    }
  }
  store_tile(acc, m, n, y);
}

}  // namespace

bool gemv_mma_enabled(TensorType type, int64_t k) {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_MMA");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on &&
         ((type == TensorType::Q4_K && k % 256 == 0) || (type == TensorType::Q8_0 && k % 32 == 0));
}

cudaError_t gemv_mma(TensorType type, const void* w, int64_t m, int64_t k, const int8_t* qs,
                     const float* d, const float* s, int64_t n, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (n > 8) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((m + 15) / 16));
  const auto* p = static_cast<const uint8_t*>(w);
  const int ni = static_cast<int>(n);
  if (type == TensorType::Q4_K && k % 256 == 0) {
    const size_t row_bytes = static_cast<size_t>(k / 256) * kQ4KBytes;
    (void)launch_pdl(gemv_mma_q4k_kernel, grid, 32 * kMmaWarps, stream, p, m, row_bytes, qs, d, s,
                     k, ni, y);
  } else if (type == TensorType::Q6_K && k % 256 == 0) {
    const size_t row_bytes = static_cast<size_t>(k / 256) * 210;
    (void)launch_pdl(gemv_mma_q6k_kernel, grid, 32 * kMmaWarps, stream, p, m, row_bytes, qs, d, k,
                     ni, y);
  } else if (type == TensorType::Q8_0 && k % 32 == 0) {
    const size_t row_bytes = static_cast<size_t>(k / 32) * 34;
    (void)launch_pdl(gemv_mma_q8_0_kernel, grid, 32 * kMmaWarps, stream, p, m, row_bytes, qs, d, k,
                     ni, y);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda

// AVX-512 VNNI kernels for the row-interleaved weights of packed.h: one group of 16 weight rows
// against R (1..kPackedActRows) activation rows, 16 outputs per activation row in one zmm.
//
// Reads: the group's packed blocks (once per call; matmul_packed keeps a tile of groups in L2
// while it walks the activation rows) and the prepared activations (Q8x32 for Q8_0 and Q5_0, Q8x256
// for the K-quants). Writes: y[j * y_stride + 0..15] for each activation row j.
//
// The inner step is one vpdpbusd per 4 codes x 16 rows x activation row: the 16 int32 lanes are
// the 16 weight rows, the 4 activation bytes are broadcast. Integer sums per (sub-)block are then
// scaled per lane (vpmulld by the sub-block scales, or one fp32 FMA by d_w x d_x per block). The
// code offsets (Q8_0's 128 after the xor, Q6_K's 32) start the int32 accumulators at
// -offset x (sum of the block's activations), so they cost nothing in the loop.
//
// Measured: decode 0.71-0.91 of the all-core read bandwidth (Q4_K 0.81-0.91), 2 cores of an AMD
// EPYC, Zen 4 (bench_cpu_matvec MatvecPacked/MatmulPacked rows: bench/results/cpu-kernels.md).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_util.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

// 4 activation bytes in every 32-bit lane.
inline __m512i bcast4(const int8_t* p) {
  return _mm512_set1_epi32(static_cast<int32_t>(load_u32(reinterpret_cast<const uint8_t*>(p))));
}

inline __m512 load_ph16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Decode (one activation row) streams the weights from DRAM, where the hardware streamer stops at
// page boundaries: step `step` of `steps` in a block prefetches its share of the block `ahead`
// bytes on. Spread over the steps rather than issued at once, which stalls on the miss buffers
// (a burst of 53 per Q6_K block halved its DRAM rate). With more rows the group sits in L2.
template <size_t kBytes, int kSteps>
inline void prefetch_share(const uint8_t* block, size_t ahead, int step) {
  constexpr size_t kLines = (kBytes + 63) / 64;
  const size_t first = kLines * static_cast<size_t>(step) / kSteps;
  const size_t last = kLines * static_cast<size_t>(step + 1) / kSteps;
  for (size_t line = first; line < last; ++line)
    _mm_prefetch(reinterpret_cast<const char*>(block + ahead + 64 * line), _MM_HINT_T0);
}

inline __m512i load512(const void* p) {
  return _mm512_loadu_si512(p);
}

// Q8_0 group block: d[16] fp16, q[8][16][4] unsigned (qs ^ 0x80). 544 bytes.
template <int R>
void packed_q8_0(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  constexpr size_t kBytes = 544;
  const auto* g = static_cast<const uint8_t*>(w);
  const int64_t nb = cols / kQK;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBytes) {
    const __m512 dw = load_ph16(reinterpret_cast<const uint16_t*>(g));
    const uint8_t* q = g + 32;
    __m512i sum[R];
    for (int j = 0; j < R; ++j) sum[j] = _mm512_set1_epi32(-128 * x[j].isum[b]);
    for (int s = 0; s < 8; ++s) {
      if constexpr (R == 1) prefetch_share<kBytes, 8>(g, 8 * kBytes, s);
      const __m512i codes = load512(q + 64 * s);
      for (int j = 0; j < R; ++j)
        sum[j] = _mm512_dpbusd_epi32(sum[j], codes, bcast4(x[j].qs + b * kQK + 4 * s));
    }
    for (int j = 0; j < R; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j]),
                               _mm512_mul_ps(dw, _mm512_set1_ps(x[j].d[b])), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * y_stride, acc[j]);
}

// Q5_0 group block: d[16] fp16, qs[4][16][4] nibbles, hmask[8] u64 (bit 4 of each code). 352
// bytes. The high bit is added under a byte mask (vpaddb with k-mask), then codes 0..31 less 16.
template <int R>
void packed_q5_0(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  constexpr size_t kBytes = 352;
  const auto* g = static_cast<const uint8_t*>(w);
  const int64_t nb = cols / kQK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBytes) {
    const __m512 dw = load_ph16(reinterpret_cast<const uint16_t*>(g));
    const uint8_t* q = g + 32;
    const auto* hmask = reinterpret_cast<const uint64_t*>(g + 288);
    __m512i sum[R];
    for (int j = 0; j < R; ++j) sum[j] = _mm512_set1_epi32(-16 * x[j].isum[b]);
    for (int s = 0; s < 4; ++s) {
      if constexpr (R == 1) prefetch_share<kBytes, 4>(g, 8 * kBytes, s);
      const __m512i raw = load512(q + 64 * s);
      __m512i lo = _mm512_and_si512(raw, m4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(hmask[2 * s]), lo, bit4);
      hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(hmask[2 * s + 1]), hi, bit4);
      for (int j = 0; j < R; ++j) {
        const int8_t* a = x[j].qs + b * kQK + 4 * s;
        sum[j] = _mm512_dpbusd_epi32(sum[j], lo, bcast4(a));
        sum[j] = _mm512_dpbusd_epi32(sum[j], hi, bcast4(a + 16));
      }
    }
    for (int j = 0; j < R; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j]),
                               _mm512_mul_ps(dw, _mm512_set1_ps(x[j].d[b])), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * y_stride, acc[j]);
}

// Q4_K group block: d[16] dmin[16] fp16, sc[8][16] mn[8][16], q[32][16][4] nibbles. 2368 bytes.
template <int R>
void packed_q4_k(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  constexpr size_t kBytes = 2368;
  const auto* g = static_cast<const uint8_t*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBytes) {
    const auto* d16 = reinterpret_cast<const uint16_t*>(g);
    const uint8_t* sc = g + 64;
    const uint8_t* mn = g + 192;
    const uint8_t* q = g + 320;
    __m512i total[R], mins[R];
    for (int j = 0; j < R; ++j) {
      total[j] = _mm512_setzero_si512();
      mins[j] = _mm512_setzero_si512();
    }
    for (int p = 0; p < 4; ++p) {
      __m512i lo_sum[R], hi_sum[R];
      for (int j = 0; j < R; ++j) {
        lo_sum[j] = _mm512_setzero_si512();
        hi_sum[j] = _mm512_setzero_si512();
      }
      for (int s = 0; s < 8; ++s) {
        const uint8_t* qs = q + 64 * (8 * p + s);
        if constexpr (R == 1) prefetch_share<kBytes, 32>(g, 2 * kBytes, 8 * p + s);
        const __m512i raw = load512(qs);
        const __m512i lo = _mm512_and_si512(raw, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        for (int j = 0; j < R; ++j) {
          const int8_t* a = x[j].qs + b * kQKK + 64 * p + 4 * s;
          lo_sum[j] = _mm512_dpbusd_epi32(lo_sum[j], lo, bcast4(a));
          hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, bcast4(a + 32));
        }
      }
      const __m512i sc_lo = _mm512_cvtepu8_epi32(load128(sc + 16 * (2 * p)));
      const __m512i sc_hi = _mm512_cvtepu8_epi32(load128(sc + 16 * (2 * p + 1)));
      for (int j = 0; j < R; ++j) {
        total[j] = _mm512_add_epi32(total[j], _mm512_mullo_epi32(lo_sum[j], sc_lo));
        total[j] = _mm512_add_epi32(total[j], _mm512_mullo_epi32(hi_sum[j], sc_hi));
      }
    }
    for (int k = 0; k < 8; ++k) {
      const __m512i m = _mm512_cvtepu8_epi32(load128(mn + 16 * k));
      for (int j = 0; j < R; ++j) {
        const int16_t* bs = x[j].bsums + b * 16 + 2 * k;
        mins[j] = _mm512_add_epi32(
            mins[j], _mm512_mullo_epi32(m, _mm512_set1_epi32(int32_t{bs[0]} + bs[1])));
      }
    }
    const __m512 dw = load_ph16(d16), dminw = load_ph16(d16 + 16);
    for (int j = 0; j < R; ++j) {
      const __m512 dx = _mm512_set1_ps(x[j].d[b]);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total[j]), _mm512_mul_ps(dw, dx), acc[j]);
      acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[j]), _mm512_mul_ps(dminw, dx), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * y_stride, acc[j]);
}

// Q6_K group block: d[16] fp16, sc[16][16] int8, ql[32][16][4], qh[16][16][4]. 3360 bytes.
template <int R>
void packed_q6_k(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  constexpr size_t kBytes = 3360;
  const auto* g = static_cast<const uint8_t*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m2 = _mm512_set1_epi8(0x03);
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBytes) {
    const auto* d16 = reinterpret_cast<const uint16_t*>(g);
    const auto* sc = reinterpret_cast<const int8_t*>(g + 32);
    const uint8_t* ql = g + 288;
    const uint8_t* qh = g + 288 + 2048;
    __m512i total[R];
    for (int j = 0; j < R; ++j) total[j] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      for (int h = 0; h < 2; ++h) {
        const int k_lo = 4 * p + h, k_hi = 4 * p + 2 + h;
        __m512i lo_sum[R], hi_sum[R];
        for (int j = 0; j < R; ++j) {
          const int16_t* bs = x[j].bsums + b * 16;
          lo_sum[j] = _mm512_set1_epi32(-32 * bs[k_lo]);
          hi_sum[j] = _mm512_set1_epi32(-32 * bs[k_hi]);
        }
        for (int s = 0; s < 4; ++s) {
          const int L = 8 * p + 4 * h + s;
          if constexpr (R == 1) prefetch_share<kBytes, 32>(g, 2 * kBytes, L);
          const __m512i raw = load512(ql + 64 * L);
          const __m512i high = _mm512_srli_epi16(load512(qh + 64 * (L / 2)), 4 * (L % 2));
          const __m512i lo = _mm512_or_si512(_mm512_and_si512(raw, m4),
                                             _mm512_slli_epi16(_mm512_and_si512(high, m2), 4));
          const __m512i hi = _mm512_or_si512(
              _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4),
              _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(high, 2), m2), 4));
          for (int j = 0; j < R; ++j) {
            const int8_t* a = x[j].qs + b * kQKK + 64 * p + 16 * h + 4 * s;
            lo_sum[j] = _mm512_dpbusd_epi32(lo_sum[j], lo, bcast4(a));
            hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, bcast4(a + 32));
          }
        }
        const __m512i sc_lo = _mm512_cvtepi8_epi32(load128(sc + 16 * k_lo));
        const __m512i sc_hi = _mm512_cvtepi8_epi32(load128(sc + 16 * k_hi));
        for (int j = 0; j < R; ++j) {
          total[j] = _mm512_add_epi32(total[j], _mm512_mullo_epi32(lo_sum[j], sc_lo));
          total[j] = _mm512_add_epi32(total[j], _mm512_mullo_epi32(hi_sum[j], sc_hi));
        }
      }
    }
    const __m512 dw = load_ph16(d16);
    for (int j = 0; j < R; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total[j]),
                               _mm512_mul_ps(dw, _mm512_set1_ps(x[j].d[b])), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * y_stride, acc[j]);
}

template <void (*K1)(const void*, const Acts*, int64_t, float*, int64_t),
          void (*K2)(const void*, const Acts*, int64_t, float*, int64_t),
          void (*K3)(const void*, const Acts*, int64_t, float*, int64_t),
          void (*K4)(const void*, const Acts*, int64_t, float*, int64_t)>
void dispatch(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t y_stride) {
  switch (rows) {
    case 4:
      return K4(w, x, cols, y, y_stride);
    case 3:
      return K3(w, x, cols, y, y_stride);
    case 2:
      return K2(w, x, cols, y, y_stride);
    default:
      return K1(w, x, cols, y, y_stride);
  }
}

}  // namespace

GemmFn packed_avx512(TensorType type) {
  switch (type) {
    case TensorType::Q8_0:
      return dispatch<packed_q8_0<1>, packed_q8_0<2>, packed_q8_0<3>, packed_q8_0<4>>;
    case TensorType::Q5_0:
      return dispatch<packed_q5_0<1>, packed_q5_0<2>, packed_q5_0<3>, packed_q5_0<4>>;
    case TensorType::Q4_K:
      return dispatch<packed_q4_k<1>, packed_q4_k<2>, packed_q4_k<3>, packed_q4_k<4>>;
    case TensorType::Q6_K:
      return dispatch<packed_q6_k<1>, packed_q6_k<2>, packed_q6_k<3>, packed_q6_k<4>>;
    default:
      return nullptr;
  }
}

}  // namespace tern::cpu::detail

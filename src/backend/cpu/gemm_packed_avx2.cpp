// AVX2 kernels for the row-interleaved weights of packed.h (Q4_0, Q4_1, Q4_K): one group of 16
// weight rows against 1..kGemmRows activation rows, as gemm_packed_avx512.cpp does with VNNI. A ymm
// holds 4 consecutive codes of 8 rows, so the group is taken in two halves of 8 rows; without VNNI
// the inner step is vpmaddubsw (4 codes x 8 rows by 4 broadcast activation bytes, pairs summed to
// int16) into int16 sums per sub-block: 8 steps of at most 2 x 15 x 128 stay below 2^15. Each
// sub-block's sums then meet the 8 rows' scales in one vpmaddwd (scale in both halves of the
// row's lane), the mins the activations' 16-element sums the same way.
//
// Why: the row-major AVX2 kernel (gemm_avx2.cpp) decodes a weight row's super-block and
// multiplies it into each activation row with a horizontal sum at the end (~0.15 vpmaddubsw a
// cycle). Here every vpmaddubsw feeds 8 rows' lanes.
//
// Q6_K stays row-major on AVX2: packed the same way (codes 0..63: two vpmaddubsw steps an int16
// sum) it was correct but slower, the two extra bits cost 8 more instructions a load.
//
// Reads: the group's packed blocks and the activations (Q8x256: qs, d, bsums) of the rows.
// Writes: y[j * y_stride + 0..15] for each activation row j. Measured end to end only (prefill
// +35-66% over the row-major kernels on an AVX2 AMD EPYC: bench/results/cpu-vs-llamacpp.md).
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_util.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

// 8 bytes (one per row) as 8 int32 lanes holding the byte in both 16-bit halves: the vpmaddwd
// factor that multiplies both int16 sums of a row's lane.
inline __m256i byte_pairs(const uint8_t* p) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

// Q4_K group block: d[16] dmin[16] fp16 | sc[8][16] mn[8][16] | q[32 loads][16 rows][4]; 2368
// bytes. H halves of 8 rows in one pass (2 for one activation row: each 64-byte load is used
// whole; 1 for two rows: the registers hold 2 x R sets of sums).
template <int R, int H>
void packed_q4_k_half(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride,
                      int first_half) {
  constexpr size_t kBytes = 2368;
  const auto* g = static_cast<const uint8_t*>(w);
  const int64_t nb = cols / kQKK;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[H][R];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < R; ++j) acc[h][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBytes) {
    const uint8_t* q = g + 320;
    __m256i total[H][R];
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < R; ++j) total[h][j] = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      __m256i lo_sum[H][R], hi_sum[H][R];  // sub-blocks 2p and 2p + 1, int16 pairs
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < R; ++j) lo_sum[h][j] = hi_sum[h][j] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const uint8_t* qs = q + 64 * (8 * p + s);
        if constexpr (H == 2)
          _mm_prefetch(reinterpret_cast<const char*>(qs + 2 * kBytes), _MM_HINT_T0);
        for (int h = 0; h < H; ++h) {
          const __m256i raw = load256(qs + 32 * (first_half + h));
          const __m256i lo = _mm256_and_si256(raw, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
          for (int j = 0; j < R; ++j) {
            const int8_t* a = x[j].qs + b * kQKK + 64 * p + 4 * s;
            lo_sum[h][j] = _mm256_add_epi16(lo_sum[h][j], _mm256_maddubs_epi16(lo, broadcast4(a)));
            hi_sum[h][j] =
                _mm256_add_epi16(hi_sum[h][j], _mm256_maddubs_epi16(hi, broadcast4(a + 32)));
          }
        }
      }
      for (int h = 0; h < H; ++h) {
        const int rows = 8 * (first_half + h);
        const __m256i sc_lo = byte_pairs(g + 64 + 16 * (2 * p) + rows);
        const __m256i sc_hi = byte_pairs(g + 64 + 16 * (2 * p + 1) + rows);
        for (int j = 0; j < R; ++j) {
          total[h][j] = _mm256_add_epi32(total[h][j],
                                         _mm256_add_epi32(_mm256_madd_epi16(lo_sum[h][j], sc_lo),
                                                          _mm256_madd_epi16(hi_sum[h][j], sc_hi)));
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      const int rows = 8 * (first_half + h);
      // Mins: sum over the 8 sub-blocks of m x (the sub-block's activation sum), the sums
      // (|.| <= 32 x 128) against m (< 64) in vpmaddwd's low halves (the high halves of m are 0).
      __m256i mins[R];
      for (int j = 0; j < R; ++j) mins[j] = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i m = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 192 + 16 * k + rows)));
        for (int j = 0; j < R; ++j) {
          const int16_t* bs = x[j].bsums + b * 16 + 2 * k;
          mins[j] = _mm256_add_epi32(
              mins[j],
              _mm256_madd_epi16(m, _mm256_set1_epi16(static_cast<int16_t>(bs[0] + bs[1]))));
        }
      }
      const auto* d16 = reinterpret_cast<const uint16_t*>(g) + rows;
      const __m256 dw = _mm256_cvtph_ps(load128(d16));
      const __m256 dminw = _mm256_cvtph_ps(load128(d16 + 16));
      for (int j = 0; j < R; ++j) {
        const __m256 dx = _mm256_set1_ps(x[j].d[b]);
        acc[h][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(total[h][j]), _mm256_mul_ps(dw, dx), acc[h][j]);
        acc[h][j] =
            _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins[j]), _mm256_mul_ps(dminw, dx), acc[h][j]);
      }
    }
  }
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < R; ++j)
      _mm256_storeu_ps(y + j * y_stride + 8 * (first_half + h), acc[h][j]);
}

// Q4_0 / Q4_1 group block (kMin): d[16] (m[16]) fp16 | qs[4 steps][16 rows][4]; 288 / 320 bytes
// (the GGUF bytes regrouped). Per 32-element block and row: d x (codes . activations), plus
// m x (the activations' sum) for Q4_1, or less d x 8 x that sum for Q4_0; the codes' 8 vpmaddubsw
// steps summed in int16 (at most 8 x 2 x 15 x 128), then to int32 by vpmaddwd.
template <bool kMin, int R, int H>
void packed_q4_half(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride,
                    int first_half) {
  constexpr size_t kBytes = kMin ? 320 : 288;
  constexpr size_t kCodes = kMin ? 64 : 32;  // where the codes start
  const auto* g = static_cast<const uint8_t*>(w);
  const int64_t nb = cols / kQK;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[H][R];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < R; ++j) acc[h][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBytes) {
    if constexpr (H == 2) {
      for (size_t line = 0; line < (kBytes + 63) / 64; ++line)
        _mm_prefetch(reinterpret_cast<const char*>(g + 8 * kBytes + 64 * line), _MM_HINT_T0);
    }
    for (int h = 0; h < H; ++h) {
      const int half = first_half + h;
      __m256i sum[R];
      for (int j = 0; j < R; ++j) sum[j] = _mm256_setzero_si256();
      for (int s = 0; s < 4; ++s) {
        const __m256i raw = load256(g + kCodes + 64 * s + 32 * half);
        const __m256i lo = _mm256_and_si256(raw, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        for (int j = 0; j < R; ++j) {
          const int8_t* a = x[j].qs + b * kQK + 4 * s;
          sum[j] = _mm256_add_epi16(sum[j], _mm256_maddubs_epi16(lo, broadcast4(a)));
          sum[j] = _mm256_add_epi16(sum[j], _mm256_maddubs_epi16(hi, broadcast4(a + 16)));
        }
      }
      const auto* d16 = reinterpret_cast<const uint16_t*>(g) + 8 * half;
      const __m256 dw = _mm256_cvtph_ps(load128(d16));
      for (int j = 0; j < R; ++j) {
        const float dx = x[j].d[b];
        __m256i dot = _mm256_madd_epi16(sum[j], ones);
        if constexpr (!kMin) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(8 * x[j].isum[b]));
        acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(dx)),
                                    acc[h][j]);
        if constexpr (kMin) {
          const __m256 mw = _mm256_cvtph_ps(load128(d16 + 16));
          acc[h][j] =
              _mm256_fmadd_ps(mw, _mm256_set1_ps(dx * static_cast<float>(x[j].isum[b])), acc[h][j]);
        }
      }
    }
  }
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < R; ++j)
      _mm256_storeu_ps(y + j * y_stride + 8 * (first_half + h), acc[h][j]);
}

using HalfKernel = void (*)(const void*, const Acts*, int64_t, float*, int64_t, int);

// One activation row: both halves in one pass (K12). Two or more: pairs of rows (K21), the last
// alone (K11), a half at a time.
template <HalfKernel K11, HalfKernel K21, HalfKernel K12>
void by_pairs(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t y_stride) {
  if (rows == 1) return K12(w, x, cols, y, y_stride, 0);
  for (int j = 0; j < rows; j += 2) {
    for (int half = 0; half < 2; ++half) {
      if (j + 1 < rows) {
        K21(w, x + j, cols, y + j * y_stride, y_stride, half);
      } else {
        K11(w, x + j, cols, y + j * y_stride, y_stride, half);
      }
    }
  }
}

}  // namespace

GemmFn packed_avx2(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
      return by_pairs<packed_q4_half<false, 1, 1>, packed_q4_half<false, 2, 1>,
                      packed_q4_half<false, 1, 2>>;
    case TensorType::Q4_1:
      return by_pairs<packed_q4_half<true, 1, 1>, packed_q4_half<true, 2, 1>,
                      packed_q4_half<true, 1, 2>>;
    case TensorType::Q4_K:
      return by_pairs<packed_q4_k_half<1, 1>, packed_q4_k_half<2, 1>, packed_q4_k_half<1, 2>>;
    default:
      return nullptr;
  }
}

}  // namespace tern::cpu::detail

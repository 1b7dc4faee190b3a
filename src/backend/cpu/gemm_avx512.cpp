// AVX-512 (F/BW/VL/DQ + VNNI) multi-row kernels for prefill: one weight row against up to
// kGemmRows (4) activation rows at once (kernels.h). Each weight block is read and decoded once
// and then multiplied into every activation row, so the decode work (nibble unpacking, scale
// shuffles, fp16 conversions) is shared by the rows instead of repeated per row as in the dot
// kernels. Reads: one weight row (GGUF blocks) and the prepared activations of the rows (from
// L1/L2: matmul.cpp keeps a group of rows hot while it walks a tile of weight rows). Writes: one
// float per activation row.
//
// 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): two blocks per zmm; one vpdpbusd
// of the unsigned codes with the int8 activations, started from the activation's per-lane bias
// term (Acts::lane_bias = -bias * sum of the lane's 4 activations) so the code offset costs
// nothing; then int32 -> fp32 and one FMA with (weight scale per lane x activation scale per lane,
// Acts::lane_d). Affine types add m x (d_x * lane sum) (Acts::lane_dsum) with one more FMA.
// Q4_K and Q6_K: the dot kernels' per-block structure (vpmaddubsw + vpdpwssd against the spread
// sub-block scales), with the codes and scale vectors of a super-block decoded once for all rows.
//
// Measured end to end only (prefill of the real models against llama.cpp, 2 AVX-512 cores:
// bench/results/cpu-vs-llamacpp.md); its fraction alone is not measured.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_util.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

__m256i nibble_codes(const uint8_t* qs) {
  const __m256i q = _mm256_broadcastsi128_si256(load128(qs));
  return _mm256_and_si256(_mm256_mask_srli_epi16(q, 0xFF00, q, 4), _mm256_set1_epi8(0x0F));
}

template <typename B>
__m256i five_bit_codes(const B& b) {
  const __m256i low = nibble_codes(b.qs);
  __mmask32 high;
  __builtin_memcpy(&high, b.qh, 4);
  return _mm256_mask_add_epi8(low, high, low, _mm256_set1_epi8(16));
}

// Codes of a block as unsigned bytes u with x = d * (u - bias) [+ m]; the bias is in
// gemm_avx512()'s table and folded into the activations' lane_bias.
struct Q4_0G {
  using Block = BlockQ4_0;
  static constexpr bool kMin = false;
  static __m256i codes(const Block& b) { return nibble_codes(b.qs); }
};
struct Q4_1G {
  using Block = BlockQ4_1;
  static constexpr bool kMin = true;
  static __m256i codes(const Block& b) { return nibble_codes(b.qs); }
};
struct Q5_0G {
  using Block = BlockQ5_0;
  static constexpr bool kMin = false;
  static __m256i codes(const Block& b) { return five_bit_codes(b); }
};
struct Q5_1G {
  using Block = BlockQ5_1;
  static constexpr bool kMin = true;
  static __m256i codes(const Block& b) { return five_bit_codes(b); }
};
struct Q8_0G {
  using Block = BlockQ8_0;
  static constexpr bool kMin = false;
  static __m256i codes(const Block& b) {
    return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};
struct IQ4_NLG {
  using Block = BlockIQ4_NL;
  static constexpr bool kMin = false;
  static __m256i codes(const Block& b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_add_epi8(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values)), _mm_set1_epi8(-128)));
    return _mm256_shuffle_epi8(table, nibble_codes(b.qs));
  }
};

template <typename C>
float block_m(const typename C::Block& b) {
  if constexpr (C::kMin) {
    return h2f(b.m);
  } else {
    return 0.0f;
  }
}

template <typename C, int R>
void gemm32(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  const auto* b = static_cast<const typename C::Block*>(w);
  const int64_t nb = cols / kQK;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i codes =
        _mm512_inserti64x4(_mm512_castsi256_si512(C::codes(b[i])), C::codes(b[i + 1]), 1);
    const __m512 dw =
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(h2f(b[i].d)), _mm512_set1_ps(h2f(b[i + 1].d)));
    __m512 mw;
    if constexpr (C::kMin) {
      mw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(block_m<C>(b[i])),
                                _mm512_set1_ps(block_m<C>(b[i + 1])));
    }
    const int64_t lane = 8 * i;  // 8 lanes of 4 elements per block
    for (int j = 0; j < R; ++j) {
      const __m512i init =
          C::kMin ? _mm512_setzero_si512() : _mm512_loadu_si512(x[j].lane_bias + lane);
      const __m512i dot = _mm512_dpbusd_epi32(init, codes, _mm512_loadu_si512(x[j].qs + i * kQK));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                               _mm512_mul_ps(dw, _mm512_loadu_ps(x[j].lane_d + lane)), acc[j]);
      if constexpr (C::kMin) {
        acc[j] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(x[j].lane_dsum + lane), acc[j]);
      }
    }
  }
  float tail[R] = {};
  if (i < nb) {  // an odd last block: 8 lanes
    const __m256i codes = C::codes(b[i]);
    const __m256 dw = _mm256_set1_ps(h2f(b[i].d));
    const __m256 mw = _mm256_set1_ps(block_m<C>(b[i]));
    const int64_t lane = 8 * i;
    for (int j = 0; j < R; ++j) {
      const __m256i init = C::kMin ? _mm256_setzero_si256() : load256(x[j].lane_bias + lane);
      const __m256i dot = _mm256_dpbusd_epi32(init, codes, load256(x[j].qs + i * kQK));
      __m256 part = _mm256_mul_ps(_mm256_cvtepi32_ps(dot),
                                  _mm256_mul_ps(dw, _mm256_loadu_ps(x[j].lane_d + lane)));
      if constexpr (C::kMin) {
        part = _mm256_fmadd_ps(mw, _mm256_loadu_ps(x[j].lane_dsum + lane), part);
      }
      tail[j] = hsum256(part);
    }
  }
  for (int j = 0; j < R; ++j) y[j * y_stride] = _mm512_reduce_add_ps(acc[j]) + tail[j];
}

__m512i spread_mask(int j0, int j1) {
  return _mm512_mask_blend_epi32(
      0xFF00, _mm512_set1_epi32(static_cast<int>(0x80008000u | (j0 << 16) | j0)),
      _mm512_set1_epi32(static_cast<int>(0x80008000u | (j1 << 16) | j1)));
}

__m256i min_mask() {
  return _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4,
                          -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
}

// Q4_K: 4 zmm of 64 codes (sub-blocks 2c, 2c+1) and their spread scales per super-block.
template <int R>
void gemm_q4_k(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  const auto* b = static_cast<const BlockQ4_K*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i sc_mask[4] = {spread_mask(0, 1), spread_mask(2, 3), spread_mask(4, 5),
                              spread_mask(6, 7)};
  const __m256i mmask = min_mask();
  __m512 acc[R];
  __m256 acc_min[R];
  for (int j = 0; j < R; ++j) {
    acc[j] = _mm512_setzero_ps();
    acc_min[j] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    uint64_t sc, mn;
    k_scales_mins(b[i].scales, &sc, &mn);
    const __m512i sc_bytes = _mm512_set1_epi64(static_cast<long long>(sc));
    __m512i codes[4], scales[4];
    for (int c = 0; c < 4; ++c) {
      const __m512i q = _mm512_broadcast_i64x4(load256(b[i].qs + 32 * c));
      codes[c] = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4), m4);
      scales[c] = _mm512_shuffle_epi8(sc_bytes, sc_mask[c]);
    }
    const __m256i mins16 =
        _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(mn)), mmask);
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int j = 0; j < R; ++j) {
      const int8_t* q8 = x[j].qs + i * kQKK;
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(codes[0], _mm512_loadu_si512(q8)),
                               scales[0]);
      s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(codes[1], _mm512_loadu_si512(q8 + 64)),
                               scales[1]);
      s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(codes[2], _mm512_loadu_si512(q8 + 128)),
                               scales[2]);
      s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(codes[3], _mm512_loadu_si512(q8 + 192)),
                               scales[3]);
      const __m256i min_prod = _mm256_madd_epi16(load256(x[j].bsums + i * 16), mins16);
      const float dx = x[j].d[i];
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(d * dx),
                               acc[j]);
      acc_min[j] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_prod), _mm256_set1_ps(dmin * dx), acc_min[j]);
    }
  }
  for (int j = 0; j < R; ++j) {
    y[j * y_stride] = _mm512_reduce_add_ps(acc[j]) - hsum256(acc_min[j]);
  }
}

alignas(64) constexpr int16_t kSubIndex[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5,
     6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8,  8,  8,  8,  8,  8,  8,  8,  9,  9,  9,  9,  9,  9,  9,  9,
     10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

// Q6_K: codes 0..63 (q + 32) in 4 zmm per super-block; the 32 comes off through the bsums.
template <int R>
void gemm_q6_k(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m2 = _mm512_set1_epi8(0x03);
  const __m512i shift_a =
      _mm512_mask_blend_epi32(0xFF00, _mm512_setzero_si512(), _mm512_set1_epi16(2));
  const __m512i shift_b =
      _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi16(4), _mm512_set1_epi16(6));
  __m512i index[4];
  for (int r = 0; r < 4; ++r) index[r] = _mm512_load_si512(kSubIndex[r]);
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b[i].scales));
    const __m512i scales512 = _mm512_castsi256_si512(scales16);
    __m512i codes[4], scales[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b[i].ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(load256(b[i].qh + 32 * h));
      codes[2 * h] = _mm512_or_si512(
          _mm512_and_si512(ql, m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_a), m2), 4));
      codes[2 * h + 1] = _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_b), m2), 4));
      scales[2 * h] = _mm512_permutexvar_epi16(index[2 * h], scales512);
      scales[2 * h + 1] = _mm512_permutexvar_epi16(index[2 * h + 1], scales512);
    }
    const float d = h2f(b[i].d);
    for (int j = 0; j < R; ++j) {
      const int8_t* q8 = x[j].qs + i * kQKK;
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(codes[0], _mm512_loadu_si512(q8)),
                               scales[0]);
      s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(codes[1], _mm512_loadu_si512(q8 + 64)),
                               scales[1]);
      s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(codes[2], _mm512_loadu_si512(q8 + 128)),
                               scales[2]);
      s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(codes[3], _mm512_loadu_si512(q8 + 192)),
                               scales[3]);
      // 32 * sum_k scale_k * bsum_k, in the low 8 int32 lanes (upper 8 zero).
      const __m256i bias =
          _mm256_slli_epi32(_mm256_madd_epi16(load256(x[j].bsums + i * 16), scales16), 5);
      const __m512i total =
          _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_zextsi256_si512(bias));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(d * x[j].d[i]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j * y_stride] = _mm512_reduce_add_ps(acc[j]);
}

template <template <int> class K>
void dispatch_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y,
                   int64_t y_stride) {
  switch (rows) {
    case 4:
      return K<4>::run(w, x, cols, y, y_stride);
    case 3:
      return K<3>::run(w, x, cols, y, y_stride);
    case 2:
      return K<2>::run(w, x, cols, y, y_stride);
    default:
      return K<1>::run(w, x, cols, y, y_stride);
  }
}

template <typename C>
struct G32 {
  template <int R>
  struct K {
    static void run(const void* w, const Acts* x, int64_t cols, float* y, int64_t s) {
      gemm32<C, R>(w, x, cols, y, s);
    }
  };
};
template <int R>
struct GQ4K {
  static void run(const void* w, const Acts* x, int64_t cols, float* y, int64_t s) {
    gemm_q4_k<R>(w, x, cols, y, s);
  }
};
template <int R>
struct GQ6K {
  static void run(const void* w, const Acts* x, int64_t cols, float* y, int64_t s) {
    gemm_q6_k<R>(w, x, cols, y, s);
  }
};

template <typename C>
void gemm32_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  dispatch_rows<G32<C>::template K>(w, x, rows, cols, y, s);
}
void q4_k_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  dispatch_rows<GQ4K>(w, x, rows, cols, y, s);
}
void q6_k_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  dispatch_rows<GQ6K>(w, x, rows, cols, y, s);
}

}  // namespace

GemmKernel gemm_avx512(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
      return {gemm32_rows<Q4_0G>, true, 8, false};
    case TensorType::Q4_1:
      return {gemm32_rows<Q4_1G>, true, 0, true};
    case TensorType::Q5_0:
      return {gemm32_rows<Q5_0G>, true, 16, false};
    case TensorType::Q5_1:
      return {gemm32_rows<Q5_1G>, true, 0, true};
    case TensorType::Q8_0:
      return {gemm32_rows<Q8_0G>, true, 128, false};
    case TensorType::IQ4_NL:
      return {gemm32_rows<IQ4_NLG>, true, 128, false};
    case TensorType::Q4_K:
      return {q4_k_rows, false, 0, false};
    case TensorType::Q6_K:
      return {q6_k_rows, false, 0, false};
    default:
      return {};
  }
}

}  // namespace tern::cpu::detail

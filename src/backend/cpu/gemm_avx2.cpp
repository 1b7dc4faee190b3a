// AVX2 multi-row kernels for prefill: one weight row against up to kGemmRows (4) activation rows
// at once (kernels.h), as gemm_avx512.cpp does with VNNI. Each 32-element weight block is read
// and decoded once (nibbles unpacked, the fifth bit spread, the fp16 scales converted) and then
// multiplied into every activation row, instead of once per row as in the dot kernels that
// AVX2 machines used for prefill before.
//
// Types: the 4- and 5-bit 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1): codes 0..31 as unsigned
// bytes against the int8 activations through vpmaddubsw (at most 2 x 31 x 127, no saturation)
// and vpmaddwd by ones, one int32 per lane of 4 elements, started from the activation's lane bias
// (Acts::lane_bias = -bias x the lane's activation sum); then int32 -> fp32 and one FMA with
// d_w x the lane's activation scale (Acts::lane_d); affine types add m x Acts::lane_dsum. Q8_0
// and IQ4_NL (signed levels), Q4_K, Q5_K and Q6_K: below. Q2_K and Q3_K keep the dot kernels.
//
// Reads: one weight row (GGUF blocks) and the prepared activations of the rows (from L1/L2:
// matmul.cpp keeps a group of rows hot while it walks a tile of weight rows). Writes: one float
// per activation row. Measured end to end only (prefill against llama.cpp on an AVX2 AMD EPYC:
// bench/results/cpu-vs-llamacpp.md); its fraction alone is not measured.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_util.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

// [low nibbles | high nibbles] of a block's 16 bytes: elements 0..31 in order.
__m256i nibble_codes(const uint8_t* qs) {
  return _mm256_and_si256(nibbles_raw(qs), _mm256_set1_epi8(0x0F));
}

// Bit 4 of element i is bit i of qh: 16 where it is set.
template <typename B>
__m256i five_bit_codes(const B& b) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  // Byte i of every 8 takes qh's byte i / 8, then keeps bit i % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_add_epi8(nibble_codes(b.qs), _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

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

template <typename C, int R>
void gemm32(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  const auto* b = static_cast<const typename C::Block*>(w);
  const int64_t nb = cols / kQK;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i codes = C::codes(b[i]);
    const __m256 dw = _mm256_set1_ps(h2f(b[i].d));
    const int64_t lane = 8 * i;  // 8 lanes of 4 elements per block
    for (int j = 0; j < R; ++j) {
      __m256i dot =
          _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load256(x[j].qs + i * kQK)), ones);
      if constexpr (!C::kMin) dot = _mm256_add_epi32(dot, load256(x[j].lane_bias + lane));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                               _mm256_mul_ps(dw, _mm256_loadu_ps(x[j].lane_d + lane)), acc[j]);
      if constexpr (C::kMin) {
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b[i].m)),
                                 _mm256_loadu_ps(x[j].lane_dsum + lane), acc[j]);
      }
    }
  }
  for (int j = 0; j < R; ++j) y[j * y_stride] = hsum256(acc[j]);
}

// Q8_0 and IQ4_NL: signed 8-bit levels (Q8_0's bytes; IQ4_NL's nibbles through its table), |w|
// once per block and each activation row's bytes given w's signs, so vpmaddubsw does not
// saturate (dot_i8). The same per-block arithmetic and order as the dot kernels.
struct Q8_0S {
  using Block = BlockQ8_0;
  static __m256i levels(const Block& b, __m256i) { return load256(b.qs); }
};
struct IQ4_NLS {
  using Block = BlockIQ4_NL;
  static __m256i levels(const Block& b, __m256i table) {
    return _mm256_shuffle_epi8(table, nibble_codes(b.qs));
  }
};

template <typename C, int R>
void gemm_signed(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  const auto* b = static_cast<const typename C::Block*>(w);
  const int64_t nb = cols / kQK;
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIQ4Values));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i v = C::levels(b[i], table);
    const __m256i magnitude = _mm256_sign_epi8(v, v);
    const float dw = h2f(b[i].d);
    for (int j = 0; j < R; ++j) {
      const __m256i xs = _mm256_sign_epi8(load256(x[j].qs + i * kQK), v);
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, xs), ones);
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * x[j].d[i]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j * y_stride] = hsum256(acc[j]);
}

// f(std::integral_constant<int, R>) for R = rows (1 to kGemmRows).
template <typename F>
void by_rows(int rows, F&& f) {
  switch (rows) {
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    default:
      return f(std::integral_constant<int, 1>{});
  }
}

template <typename C>
void signed_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  by_rows(rows, [&](auto r) { gemm_signed<C, decltype(r)::value>(w, x, cols, y, s); });
}

template <typename C>
void gemm32_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  by_rows(rows, [&](auto r) { gemm32<C, decltype(r)::value>(w, x, cols, y, s); });
}

// Q4_K and Q5_K: a super-block's 8 sub-blocks of 32 codes unpacked once (Q5_K: bit 4 of sub-block
// s's codes is bit s of qh[l]; codes up to 31, so vpmaddubsw cannot saturate); per activation
// row, each sub-block's vpmaddubsw pairs are summed by vpmaddwd against its scale, and the mins
// meet the activations' 16-element sums (Acts::bsums).
template <typename Block, int R>
void gemm_q45_k(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  const auto* b = static_cast<const Block*>(w);
  const int64_t nb = cols / kQKK;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  // The 8 min bytes as 16 int16, each twice (a sub-block of 32 has two sums of 16).
  const __m256i min_spread =
      _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4,
                       -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
  __m256 acc[R], acc_min[R];
  for (int j = 0; j < R; ++j) acc[j] = acc_min[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    uint64_t sc, mn;
    k_scales_mins(b[i].scales, &sc, &mn);
    uint8_t scale[8];
    std::memcpy(scale, &sc, 8);
    __m256i codes[8];  // sub-block 2c: low nibbles of qs[32c..], 2c + 1: their high nibbles
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(b[i].qs + 32 * c);
      codes[2 * c] = _mm256_and_si256(q, m4);
      codes[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      const __m256i qh = load256(b[i].qh);
      const __m256i bit = _mm256_set1_epi8(1);
      for (int s = 0; s < 8; ++s) {
        // Bit s of every byte (a 16-bit shift keeps each byte's own bit s in its bit 0).
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, s), bit);
        codes[s] = _mm256_or_si256(codes[s], _mm256_slli_epi16(high, 4));
      }
    }
    const __m256i mins16 =
        _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(mn)), min_spread);
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int j = 0; j < R; ++j) {
      const int8_t* q8 = x[j].qs + i * kQKK;
      __m256i sum = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        sum = _mm256_add_epi32(
            sum, _mm256_madd_epi16(_mm256_maddubs_epi16(codes[s], load256(q8 + 32 * s)),
                                   _mm256_set1_epi16(scale[s])));
      }
      const __m256i min_prod = _mm256_madd_epi16(load256(x[j].bsums + i * 16), mins16);
      const float dx = x[j].d[i];
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * dx), acc[j]);
      acc_min[j] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_prod), _mm256_set1_ps(dmin * dx), acc_min[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j * y_stride] = hsum256(acc[j]) - hsum256(acc_min[j]);
}

template <typename Block>
void q45_k_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  by_rows(rows, [&](auto r) { gemm_q45_k<Block, decltype(r)::value>(w, x, cols, y, s); });
}

// Q6_K: per half of 128, 4 vectors of 32 codes (0..63: the low 4 bits from ql, bits 4-5 from
// qh) against the activations, each 16 by its signed sub-block scale; the code offset of 32
// through the activations' 16-element sums.
template <int R>
void gemm_q6_k(const void* w, const Acts* x, int64_t cols, float* y, int64_t y_stride) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  const int64_t nb = cols / kQKK;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    __m256i codes[8], scales[8];  // elements 32t..32t+31, and the scales of their two 16s
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load256(b[i].ql + 64 * h), l1 = load256(b[i].ql + 64 * h + 32);
      const __m256i hb = load256(b[i].qh + 32 * h);
      codes[4 * h] =
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2));
      codes[4 * h + 1] =
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2));
      codes[4 * h + 2] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2));
      codes[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
    }
    for (int t = 0; t < 8; ++t) {
      scales[t] = _mm256_set_m128i(_mm_set1_epi16(b[i].scales[2 * t + 1]),
                                   _mm_set1_epi16(b[i].scales[2 * t]));
    }
    const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b[i].scales));
    const float d = h2f(b[i].d);
    for (int j = 0; j < R; ++j) {
      const int8_t* q8 = x[j].qs + i * kQKK;
      __m256i sum = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) {
        sum = _mm256_add_epi32(
            sum,
            _mm256_madd_epi16(_mm256_maddubs_epi16(codes[t], load256(q8 + 32 * t)), scales[t]));
      }
      // 32 x sum_k scale_k x bsum_k
      const __m256i offset =
          _mm256_slli_epi32(_mm256_madd_epi16(load256(x[j].bsums + i * 16), scales16), 5);
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sum, offset)),
                               _mm256_set1_ps(d * x[j].d[i]), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) y[j * y_stride] = hsum256(acc[j]);
}

void q6_k_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  by_rows(rows, [&](auto r) { gemm_q6_k<decltype(r)::value>(w, x, cols, y, s); });
}

}  // namespace

GemmKernel gemm_avx2(TensorType type) {
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
      return {signed_rows<Q8_0S>, false, 0, false};
    case TensorType::IQ4_NL:
      return {signed_rows<IQ4_NLS>, false, 0, false};
    case TensorType::Q4_K:
      return {q45_k_rows<BlockQ4_K>, false, 0, false};
    case TensorType::Q5_K:
      return {q45_k_rows<BlockQ5_K>, false, 0, false};
    case TensorType::Q6_K:
      return {q6_k_rows, false, 0, false};
    default:
      return {};
  }
}

}  // namespace tern::cpu::detail

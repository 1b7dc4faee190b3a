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
// d_w x the lane's activation scale (Acts::lane_d); affine types add m x Acts::lane_dsum. Q8_0's
// and IQ4_NL's codes (up to 255) would saturate vpmaddubsw: they keep the dot kernels.
//
// Reads: one weight row (GGUF blocks) and the prepared activations of the rows (from L1/L2:
// matmul.cpp keeps a group of rows hot while it walks a tile of weight rows). Writes: one float
// per activation row. Measured: bench/results/2026-12-05-cpu-avx2-attention.md (prefill).
#include <immintrin.h>

#include <cstring>

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

template <typename C>
void gemm32_rows(const void* w, const Acts* x, int rows, int64_t cols, float* y, int64_t s) {
  switch (rows) {
    case 4:
      return gemm32<C, 4>(w, x, cols, y, s);
    case 3:
      return gemm32<C, 3>(w, x, cols, y, s);
    case 2:
      return gemm32<C, 2>(w, x, cols, y, s);
    default:
      return gemm32<C, 1>(w, x, cols, y, s);
  }
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
    default:
      return {};
  }
}

}  // namespace tern::cpu::detail

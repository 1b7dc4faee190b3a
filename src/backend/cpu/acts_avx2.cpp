// AVX2 activation quantizers: fp32 row -> int8 blocks (kernels.h formats Q8x32 and Q8x256).
// Bandwidth not measured on its own: its time is inside the dot kernels' single-thread figures
// (bench/results/cpu-kernels.md: one row of 4096 activations per 512-row matvec).
// Reads cols floats, writes cols int8 + one fp32 scale per block + block / 16-element sums.
// Bit-identical to the scalar quantize_acts_* in quantize.cpp: the same amax, the same fp32
// x * (127 / amax) product (no FMA involved) and vcvtps2dq's round-to-nearest-even, which is what
// nearbyint does under the default rounding mode (tests/backend/acts_test.cpp checks it).
// Built with -mavx2 -mfma -mf16c: only intrinsics and this file's internal functions are used.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Quantizes 32 * groups floats with one scale; writes int8 and, per 16 values, the int32 sums.
template <int kGroups>
float quantize_block(const float* x, int8_t* qs, int* sums16) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 32 * kGroups; k += 8)
    amax = _mm256_max_ps(amax, _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask));
  const float a = hmax(amax);
  const __m256 id = _mm256_set1_ps(a == 0.0f ? 0.0f : 127.0f / a);
  // vpackssdw / vpacksswb work within 128-bit lanes: this permutation restores element order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int g = 0; g < kGroups; ++g) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k)
      q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), id));
    sums16[2 * g] = hsum_i32(_mm256_add_epi32(q[0], q[1]));
    sums16[2 * g + 1] = hsum_i32(_mm256_add_epi32(q[2], q[3]));
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * g),
                        _mm256_permutevar8x32_epi32(p, order));
  }
  return a / 127.0f;
}

}  // namespace

void quantize_acts_q8x32_avx2(const float* x, int64_t cols, int8_t* qs, float* d, int32_t* isum) {
  for (int64_t b = 0; b < cols / quant::kQK; ++b) {
    int sums[2];
    d[b] = quantize_block<1>(x + b * quant::kQK, qs + b * quant::kQK, sums);
    isum[b] = sums[0] + sums[1];
  }
}

void quantize_acts_q8x256_avx2(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  for (int64_t b = 0; b < cols / quant::kQKK; ++b) {
    int sums[16];
    d[b] = quantize_block<8>(x + b * quant::kQKK, qs + b * quant::kQKK, sums);
    for (int g = 0; g < 16; ++g) bsums[b * 16 + g] = static_cast<int16_t>(sums[g]);
  }
}

}  // namespace tern::cpu::detail

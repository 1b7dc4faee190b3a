// AVX-512 activation quantizers: fp32 row -> int8 blocks (kernels.h formats Q8x32 and Q8x256).
// Bandwidth not measured on its own: its time is inside the dot kernels' single-thread figures
// (bench/results/cpu-kernels.md: one row of 4096 activations per 512-row matvec).
// Reads cols floats, writes cols int8 + one fp32 scale per block + block / 16-element sums.
// Bit-identical to the scalar quantize_acts_* in quantize.cpp (same amax, same fp32 product,
// vcvtps2dq rounds to nearest even like nearbyint; tests/backend/acts_test.cpp checks it).
// Built with -mavx512*: only intrinsics and this file's internal functions are used here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

// Quantizes 16 * kGroups floats with one scale; writes int8 and the int32 sum of each 16.
template <int kGroups>
float quantize_block(const float* x, int8_t* qs, int* sums16) {
  __m512 amax = _mm512_setzero_ps();
  for (int g = 0; g < kGroups; ++g)
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * g)));
  const float a = _mm512_reduce_max_ps(amax);
  const __m512 id = _mm512_set1_ps(a == 0.0f ? 0.0f : 127.0f / a);
  for (int g = 0; g < kGroups; ++g) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * g), _mm512_cvtsepi32_epi8(q));
    sums16[g] = _mm512_reduce_add_epi32(q);
  }
  return a / 127.0f;
}

}  // namespace

void quantize_acts_q8x32_avx512(const float* x, int64_t cols, int8_t* qs, float* d, int32_t* isum) {
  for (int64_t b = 0; b < cols / quant::kQK; ++b) {
    int sums[2];
    d[b] = quantize_block<2>(x + b * quant::kQK, qs + b * quant::kQK, sums);
    isum[b] = sums[0] + sums[1];
  }
}

void quantize_acts_q8x256_avx512(const float* x, int64_t cols, int8_t* qs, float* d,
                                 int16_t* bsums) {
  for (int64_t b = 0; b < cols / quant::kQKK; ++b) {
    int sums[16];
    d[b] = quantize_block<16>(x + b * quant::kQKK, qs + b * quant::kQKK, sums);
    for (int g = 0; g < 16; ++g) bsums[b * 16 + g] = static_cast<int16_t>(sums[g]);
  }
}

}  // namespace tern::cpu::detail

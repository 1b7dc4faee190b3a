// AVX2 gated activations (activations.h): the AVX-512 forms' arithmetic (x * sigmoid(k(x)), one
// exp and one division per element) 8 lanes at a time, for CPUs without AVX-512. Reads gate[n],
// up[n]; writes out[n]. Before these, AVX2 machines ran the scalar loops (libm's expf / tanhf
// per element).
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/simd_exp.h"

namespace tern::cpu::detail {
namespace {

// Lanes [0, count) set: the tail of a row that is not a multiple of 8.
inline __m256i tail_mask(int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lanes);
}

// out = x / (1 + e^(-k)) * up, where `scale_arg` maps x to k.
template <typename ScaleArg>
inline void sigmoid_gate(const float* gate, const float* up, float* out, int64_t n,
                         ScaleArg scale_arg) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const auto value = [&](__m256 x, __m256 u) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), scale_arg(x)));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), u);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, value(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    const __m256 y = value(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask));
    _mm256_maskstore_ps(out + i, mask, y);
  }
}

}  // namespace

void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  sigmoid_gate(gate, up, out, n, [](__m256 x) { return x; });
}

void gelu_tanh_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  // 2 sqrt(2/pi) (x + 0.044715 x^3) = x (a + b x^2)
  const __m256 a = _mm256_set1_ps(2.0f * 0.7978845608028654f);
  const __m256 b = _mm256_set1_ps(2.0f * 0.7978845608028654f * 0.044715f);
  sigmoid_gate(gate, up, out, n, [&](__m256 x) {
    return _mm256_mul_ps(x, _mm256_fmadd_ps(b, _mm256_mul_ps(x, x), a));
  });
}

}  // namespace tern::cpu::detail

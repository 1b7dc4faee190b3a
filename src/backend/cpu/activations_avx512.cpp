// AVX-512 gated activations (activations.h). Both are x * sigmoid(k(x)):
//   SiLU:      x * sigmoid(x)
//   GELU-tanh: 0.5 x (1 + tanh(z)) = x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3)
// so one exp and one division per element, 16 lanes at a time. Reads gate[n], up[n]; writes
// out[n]. Compute-bound in L2 (a Gemma-3-270M prefill of 512 tokens spent 11% of its time in
// libm's scalar tanhf before this).
// GCC 12 flags its own intrinsics (_mm512_undefined_*) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/simd_exp.h"

namespace tern::cpu::detail {
namespace {

// out = x / (1 + e^(-k)) * up, where `scale_arg` maps x to k.
template <typename ScaleArg>
inline void sigmoid_gate(const float* gate, const float* up, float* out, int64_t n,
                         ScaleArg scale_arg) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const auto mask = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(mask, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(mask, up + i);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), scale_arg(x)));
    const __m512 y = _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), u);
    _mm512_mask_storeu_ps(out + i, mask, y);
  }
}

}  // namespace

void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n) {
  sigmoid_gate(gate, up, out, n, [](__m512 x) { return x; });
}

void gelu_tanh_mul_avx512(const float* gate, const float* up, float* out, int64_t n) {
  // 2 sqrt(2/pi) (x + 0.044715 x^3) = x (a + b x^2)
  const __m512 a = _mm512_set1_ps(2.0f * 0.7978845608028654f);
  const __m512 b = _mm512_set1_ps(2.0f * 0.7978845608028654f * 0.044715f);
  sigmoid_gate(gate, up, out, n, [&](__m512 x) {
    return _mm512_mul_ps(x, _mm512_fmadd_ps(b, _mm512_mul_ps(x, x), a));
  });
}

}  // namespace tern::cpu::detail

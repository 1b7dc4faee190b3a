// Scalar gated activations (activations.h) and the choice of kernel per CPU path.
#include "backend/cpu/activations.h"

#include <cmath>

namespace tern::cpu {

namespace detail {
void silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n);
void gelu_tanh_mul_avx512(const float* gate, const float* up, float* out, int64_t n);
void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n);
void gelu_tanh_mul_avx2(const float* gate, const float* up, float* out, int64_t n);
}  // namespace detail

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * up[i];
  }
}

GatedActivationFn silu_mul_fn(CpuPath path) {
  return path == CpuPath::Avx512 ? detail::silu_mul_avx512
         : path == CpuPath::Avx2 ? detail::silu_mul_avx2
                                 : silu_mul_scalar;
}

GatedActivationFn gelu_tanh_mul_fn(CpuPath path) {
  return path == CpuPath::Avx512 ? detail::gelu_tanh_mul_avx512
         : path == CpuPath::Avx2 ? detail::gelu_tanh_mul_avx2
                                 : gelu_tanh_mul_scalar;
}

}  // namespace tern::cpu

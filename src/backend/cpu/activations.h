// Gated activations of the feed-forward block, out[i] = act(gate[i]) * up[i], over n floats:
// SiLU (Llama, Qwen) and the tanh-approximated GELU (Gemma). The scalar forms are the reference;
// the AVX-512 and AVX2 forms use a polynomial exp (relative error ~2e-7) and are what CpuDevice
// runs on CPUs with those instructions. All write out[0..n) only.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_features.h"

namespace tern::cpu {

using GatedActivationFn = void (*)(const float* gate, const float* up, float* out, int64_t n);

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n);
void gelu_tanh_mul_scalar(const float* gate, const float* up, float* out, int64_t n);

// The kernels for `path` (AVX-512, AVX2, or the scalar ones).
GatedActivationFn silu_mul_fn(CpuPath path);
GatedActivationFn gelu_tanh_mul_fn(CpuPath path);

}  // namespace tern::cpu

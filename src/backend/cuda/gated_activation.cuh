// The gated activations of a gated MLP, act(gate) * up, as every CUDA kernel that applies them
// computes them (the fused gate/up products and the element-wise op), so that fused and unfused
// paths give the same floats: SiLU(g) = g / (1 + e^-g), and GELU with the tanh approximation.
#pragma once

namespace tern::cuda {

__device__ __forceinline__ float silu_times(float g, float u) {
  return g / (1.0f + expf(-g)) * u;
}

__device__ __forceinline__ float gelu_times(float g, float u) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
}

__device__ __forceinline__ float gated(float g, float u, bool gelu) {
  return gelu ? gelu_times(g, u) : silu_times(g, u);
}

}  // namespace tern::cuda

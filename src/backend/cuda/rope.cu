// rope: rotary position embedding of the first rotary_dim values of each head, in place on
// x [n, heads, head_dim]; pairs (i, i + rotary_dim/2) (neox) or (2i, 2i + 1). The per-pair
// inverse frequencies (theta and the optional factors folded in) come from the host, computed
// exactly as the CPU backend does. One thread per (token, head, pair); reads and writes the
// rotated values once.
// Measured (H200, 2026-12-04, Nsight Compute cold profile of a Qwen3-8B decode step,
// bench/results/2026-12-04-cuda-decode-pairs-norms.md): in the decode step RoPE runs fused into
// the q/k norm (norm.cu); the two launches a layer took 295 us a pass, ~4.1 us each for ~40 KB:
// launch- and latency-bound (~0.2% of the 4.2 TB/s copy roofline). This unfused kernel serves
// prefill and graphs-off runs. Measured apart (H200, 2026-12-05, `tern-cuda-bench --elementwise`,
// 32 heads of 128): one token 1.5 us (launch-bound), 512 tokens 7.0 us = 57% of the copy
// bandwidth, 2,048 tokens 24 us = 67%. With fusion on (CUDA graphs), RoPE runs in norm.cu's
// rms_norm_rope launch even without a q/k norm (norm off), q and k and the cache store together;
// this kernel serves the unfused paths.
#include "backend/cuda/kernels.h"

namespace tern::cuda {
namespace {

__global__ void rope_kernel(float* x, int64_t head_dim, int64_t heads, int64_t n,
                            const int32_t* positions, const float* inv_freq, int64_t half,
                            bool neox, float position_scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * heads * half) return;
  const int64_t pair = i % half, th = i / half;  // th = token * heads + head
  const int64_t t = th / heads;
  const float pos = static_cast<float>(positions[t]) * position_scale;
  float s, c;
  sincosf(pos * inv_freq[pair], &s, &c);
  float* v = x + th * head_dim;
  const int64_t a = neox ? pair : 2 * pair;
  const int64_t b = neox ? pair + half : 2 * pair + 1;
  const float x0 = v[a], x1 = v[b];
  // The rotation's roundings pinned (norm.cu's fused q/k norm + RoPE must equal this bit for
  // bit, and ptxas contracts after the code around it): x1's product first, then the FMA with
  // x0's, as both kernels compiled to before they were pinned (2026-12-06).
  v[a] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
  v[b] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
}

}  // namespace

cudaError_t rope(float* x, int64_t head_dim, int64_t heads, int64_t n, const int32_t* positions,
                 const float* inv_freq, int64_t rotary_dim, bool neox, float position_scale,
                 cudaStream_t stream) {
  const int64_t half = rotary_dim / 2;
  const int64_t total = n * heads * half;
  if (total == 0) return cudaSuccess;
  rope_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      x, head_dim, heads, n, positions, inv_freq, half, neox, position_scale);
  return cudaGetLastError();
}

}  // namespace tern::cuda

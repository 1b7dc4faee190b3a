// rope: rotary position embedding of the first rotary_dim values of each head, in place on
// x [n, heads, head_dim]; pairs (i, i + rotary_dim/2) (neox) or (2i, 2i + 1). The per-pair
// inverse frequencies (theta and the optional factors folded in) come from the host, computed
// exactly as the CPU backend does. One thread per (token, head, pair); reads and writes the
// rotated values once.
// Measured: 67% of the copy bandwidth at 2,048 tokens of 32 heads of 128, one token launch-bound
// (H200, tern-cuda-bench --elementwise). With fusion on (CUDA graphs) RoPE runs in norm.cu's
// rms_norm_rope launch (even without a q/k norm), q and k and the cache store together; this
// kernel serves prefill, the unfused paths and graphs-off runs.
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
  // x0's, as both kernels compiled to before they were pinned.
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

// rms_norm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight (weight optional).
// One block per row, the row held in registers (float4s, up to 16384 columns; longer rows or
// columns not a multiple of 4 take the looping v1 kernels): reads the row (and weight) once,
// writes it once.
// Fused forms (the device queues them in place of the op sequences, with the same arithmetic in
// the same order, so their results equal the unfused ones bit for bit):
//  - add_rms_norm_q8: the residual add (reads a and b, writes sum), the norm of the sum, and the
//    8-bit quantization of the output for the next GEMV (writes 1.25 bytes per element more);
//  - rms_norm_rope: the per-head q/k norm of Qwen3-style models followed by RoPE, one warp per
//    (token, head), q's and k's heads in one launch, and with an F16 cache the step's keys and
//    values written into it as store_kv does: reads and writes each head once instead of twice,
//    one launch a layer instead of three.
// These are one-row kernels of a decode step: launch latency, not bandwidth, bounds them
// (a 4096-float row is 16 KB: ~0% of the copy bandwidth by bytes, 3.7-4.2 us a launch cold, H200).
// Measured with many rows (x 4096, 2,048 rows, H200, tern-cuda-bench --elementwise): rms_norm 64%
// of the copy bandwidth, add + rms_norm + quantize_q8 88%, the q/k rms_norm + rope (a warp a
// row) 43%. In the decode step the q/k launch also stores the keys and values (store_kv).
#include <cuda_fp16.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/norm_rope.cuh"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;

// Row kernels (rms_norm and its fused forms) keep the row in registers: each thread loads its
// float4s of the row at once (all loads in flight), the sum of squares is reduced over the block
// in a fixed order, and the outputs are written from the registers. v1 looped over the row with a
// store between loads (a, b and sum_out may alias, so the loads could not be hoisted): 16
// dependent memory round trips per 4096-float row, 19.5 us a launch under Nsight Compute (cold),
// 23% of the decode step's kernel time.
constexpr int kRowThreads = 1024;
constexpr int kMaxRowSteps = 4;  // float4s per thread: cols <= 4 * 1024 * 4

__device__ __forceinline__ float block_sum(float v, float* partial) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  const int warps = static_cast<int>((blockDim.x + 31) / 32);
  for (int w = 0; w < warps; ++w) total += partial[w];
  return total;
}

// The largest |value| of the 32-element block that 8 consecutive lanes hold (a float4 each).
__device__ __forceinline__ float block_amax8(const float4& y) {
  float amax = fmaxf(fmaxf(fabsf(y.x), fabsf(y.y)), fmaxf(fabsf(y.z), fabsf(y.w)));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax;
}

// The 8-bit block of 32 elements held by 8 consecutive lanes, quantized with the scale of `amax`
// (its own or its group's) as quantize_q8 does (integer sums do not depend on the order).
__device__ __forceinline__ void quantize_float4(const float4& y, float amax, int64_t first,
                                                bool valid, int8_t* qs, float* d_out,
                                                float* s_out) {
  const float d = amax / 127.0f;
  const float id = amax == 0.0f ? 0.0f : 127.0f / amax;  // the CPU's arithmetic (quantize_q8.cu)
  const int q0 = __float2int_rn(y.x * id), q1 = __float2int_rn(y.y * id);
  const int q2 = __float2int_rn(y.z * id), q3 = __float2int_rn(y.w * id);
  if (valid) {
    *reinterpret_cast<uint32_t*>(qs + first) =
        (static_cast<uint32_t>(q0) & 0xFFu) | ((static_cast<uint32_t>(q1) & 0xFFu) << 8) |
        ((static_cast<uint32_t>(q2) & 0xFFu) << 16) | (static_cast<uint32_t>(q3) << 24);
  }
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (valid && (threadIdx.x & 7) == 0) {
    d_out[first / 32] = d;
    s_out[first / 32] = d * static_cast<float>(sum);
  }
}

// out[r] = rms_norm(a[r] (+ b[r], written to sum_out)) * weight, and its 8-bit copy when kQuant.
// cols % 4 == 0, cols <= 4 * blockDim.x * STEPS; blockDim.x a multiple of 32 (kQuant: cols % 32
// == 0, so the 8 lanes of a quantization block are in one warp and all active; group 256: cols
// % 256 == 0, the 8 blocks' maxima meet in shared memory, since a group spans two warps or two
// steps).
template <bool kAdd, bool kQuant, int STEPS>
__global__ void __launch_bounds__(kRowThreads)
    row_norm_kernel(const float* a, const float* b, float* sum_out, const float* weight, float eps,
                    int64_t cols, float* out, int8_t* qs, float* qd, float* qsum, int group) {
  const int64_t r = blockIdx.x;
  const int64_t quads = cols / 4;
  // The weights are no launch's output: read before the wait for the launch before, so that the
  // scaling after the row's sum waits on no memory (a decode step's norm is one block of 1,024
  // threads: its time is its round trips; ~2% of a decode step).
  float4 wv[STEPS];
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(s) * blockDim.x;
    wv[s] = weight != nullptr && i < quads ? reinterpret_cast<const float4*>(weight)[i]
                                           : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
  }
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float partial[kRowThreads / 32];
  __shared__ float row_block_amax[kQuant ? kRowThreads * kMaxRowSteps / 8 : 1];
  float4 v[STEPS];
  float sum = 0.0f;
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(s) * blockDim.x;
    v[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < quads) {
      v[s] = reinterpret_cast<const float4*>(a + r * cols)[i];
      if constexpr (kAdd) {
        const float4 w = reinterpret_cast<const float4*>(b + r * cols)[i];
        v[s].x += w.x, v[s].y += w.y, v[s].z += w.z, v[s].w += w.w;
      }
    }
  }
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(s) * blockDim.x;
    if (i < quads) {
      if constexpr (kAdd) reinterpret_cast<float4*>(sum_out + r * cols)[i] = v[s];
      sum += sum_of_squares(v[s]);
    }
  }
  const float total = block_sum(sum, partial);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  float amax[STEPS];
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(s) * blockDim.x;
    const bool valid = i < quads;  // all 8 lanes of a quantization block agree (cols % 32 == 0)
    float4 y = make_float4(v[s].x * inv, v[s].y * inv, v[s].z * inv, v[s].w * inv);
    if (weight != nullptr && valid) {
      const float4 w = wv[s];
      y.x *= w.x, y.y *= w.y, y.z *= w.z, y.w *= w.w;
    }
    if (valid) reinterpret_cast<float4*>(out + r * cols)[i] = y;
    v[s] = y;
    // Every lane of the warp takes part in the shuffles; only valid blocks store.
    if constexpr (kQuant) {
      amax[s] = block_amax8(y);
      if (group == 256 && valid && (threadIdx.x & 7) == 0) row_block_amax[i / 8] = amax[s];
    }
  }
  if constexpr (kQuant) {
    if (group == 256) __syncthreads();  // uniform over the block
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(s) * blockDim.x;
      const bool valid = i < quads;
      float scale_amax = amax[s];
      if (group == 256 && valid) {
        const int64_t first_block = (i / 8) & ~int64_t{7};
#pragma unroll
        for (int j = 0; j < 8; ++j) scale_amax = fmaxf(scale_amax, row_block_amax[first_block + j]);
      }
      quantize_float4(v[s], scale_amax, r * cols + i * 4, valid, qs, qd, qsum);
    }
  }
}

// Threads and float4 steps per thread for a row of `cols`; false when the row kernels do not
// (Fewer threads a row, 2 or 4 float4s a thread at 4,096 columns, measured slower in the decode
// step.)
bool row_shape(int64_t cols, bool quant, int& threads, int& steps) {
  if (cols % 4 != 0 || (quant && cols % 32 != 0)) return false;
  const int64_t quads = cols / 4;
  for (int s : {1, 2, 4}) {
    if (quads <= static_cast<int64_t>(kRowThreads) * s) {
      steps = s;
      threads = static_cast<int>(((quads + s - 1) / s + 31) / 32 * 32);
      return true;
    }
  }
  return false;
}

template <bool kAdd, bool kQuant>
void launch_row_norm(int threads, int steps, unsigned grid, cudaStream_t stream, const float* a,
                     const float* b, float* sum, const float* weight, float eps, int64_t cols,
                     float* out, int8_t* qs, float* qd, float* qsum, int group = 32) {
  if (steps == 1) {
    (void)launch_pdl(row_norm_kernel<kAdd, kQuant, 1>, grid, threads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum, group);
  } else if (steps == 2) {
    (void)launch_pdl(row_norm_kernel<kAdd, kQuant, 2>, grid, threads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum, group);
  } else {
    (void)launch_pdl(row_norm_kernel<kAdd, kQuant, kMaxRowSteps>, grid, threads, stream, a, b, sum,
                     weight, eps, cols, out, qs, qd, qsum, group);
  }
}

__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* weight, float eps, int64_t cols, float* out) {
  const float* in = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* o = out + static_cast<int64_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) sum += in[i] * in[i];
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float v = in[i] * inv;
    o[i] = weight != nullptr ? v * weight[i] : v;
  }
}

// One 32-element block of `v` (a value per lane) quantized as quantize_q8 does.
__device__ __forceinline__ void quantize_lane(float v, int64_t block, int lane, int8_t* qs,
                                              float* d_out, float* s_out) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = amax == 0.0f ? 0.0f : 127.0f / amax;  // the CPU's arithmetic (quantize_q8.cu)
  const int q = __float2int_rn(v * id);
  qs[block * 32 + lane] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    d_out[block] = d;
    s_out[block] = d * static_cast<float>(sum);
  }
}

template <bool kAdd, bool kQuant>
__global__ void __launch_bounds__(kThreads)
    add_rms_norm_kernel(const float* a, const float* b, float* sum_out, const float* weight,
                        float eps, int64_t cols, float* out, int8_t* qs, float* qd, float* qsum) {
  pdl_launch_dependents();
  pdl_wait();

  const int64_t r = blockIdx.x;
  const float* in = (kAdd ? sum_out : a) + r * cols;
  float* o = out + r * cols;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    float v;
    if constexpr (kAdd) {
      v = a[r * cols + i] + b[r * cols + i];
      sum_out[r * cols + i] = v;
    } else {
      v = in[i];
    }
    sum += v * v;
  }
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + eps);
  // kQuant: cols % 32 == 0, so each warp's 32 consecutive elements are one 8-bit block.
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float v = in[i] * inv;
    const float y = weight != nullptr ? v * weight[i] : v;
    o[i] = y;
    if constexpr (kQuant) {
      quantize_lane(y, (r * cols + i) / 32, static_cast<int>(threadIdx.x % 32), qs, qd, qsum);
    }
  }
}

constexpr int kMaxRopeHead = 512;
constexpr int kRopeWarps = 8;  // head rows a block of rms_norm_rope: a warp each

// One warp a head row (v1 ran a block of 256 threads a row, half of them idle at 128 values,
// with two block barriers: 14% of the copy bandwidth at 512-2,048 tokens). Each lane holds
// QUADS float4s of the row; the arithmetic is norm_rope_row's (norm_rope.cuh, shared with the
// decode attention that can take this launch's work over), equal to rms_norm followed by rope bit
// for bit. Each lane rotates its own elements (a sincos each: the pair's two lanes differ under
// neox, and recomputing is cheaper than a second exchange).
// The rows of l.parts[0] (n tokens x its heads) come first, then those of l.parts[1], then (with
// the cache stores) the values' rows.
template <int QUADS>
__global__ void __launch_bounds__(kRopeWarps * 32) rms_norm_rope_kernel(NormRopeLaunch l) {
  pdl_launch_dependents();
  __shared__ float4 normed_rows[kRopeWarps][kMaxRopeHead / 4];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t first_rows = l.n * l.parts[0].heads;
  const int64_t rows = first_rows + (l.count > 1 ? l.n * l.parts[1].heads : 0);
  int64_t row = static_cast<int64_t>(blockIdx.x) * kRopeWarps + warp;
  const int quads = static_cast<int>(l.head_dim / 4);
  if (row >= rows) {  // the whole warp: no block barrier follows
    pdl_wait();
    // The values' rows (when the launch stores the cache): converted to F16 into the V cache.
    row -= rows;
    if (l.v_cache == nullptr || row >= l.n * l.parts[1].heads) return;
    const int64_t kv_heads = l.parts[1].heads;
    const int64_t cache_row =
        static_cast<int64_t>(l.slots[row / kv_heads]) * kv_heads + row % kv_heads;
    const float4* src = reinterpret_cast<const float4*>(l.v + row * l.head_dim);
    uint2* dst = reinterpret_cast<uint2*>(l.v_cache + cache_row * l.head_dim);
#pragma unroll
    for (int s = 0; s < QUADS; ++s) {
      const int i = lane + 32 * s;
      if (i < quads) dst[i] = f16x4(src[i]);
    }
    return;
  }
  const bool second = row >= first_rows;
  // (Selects, not l.parts[second]: a dynamic index would copy the parameters to local memory.)
  float* x = second ? l.parts[1].x : l.parts[0].x;
  const float* weight = second ? l.parts[1].weight : l.parts[0].weight;
  const float eps = second ? l.parts[1].eps : l.parts[0].eps;
  const int64_t heads = second ? l.parts[1].heads : l.parts[0].heads;
  const bool norm = second ? l.parts[1].norm : l.parts[0].norm;
  if (second) row -= first_rows;  // token * heads + head
  const int64_t token = row / heads;
  // Before the wait for the launch before (the q/k/v product): what no launch of the step
  // writes - the norm's weights, the token's position (staged before the step began) and each
  // element's rotation (sincos: the longest arithmetic here) - as the row norm reads its weights
  // early (row_norm_kernel): -1.5% a decode step.
  RopeLane<QUADS> lane_setup;
  rope_lane_setup(l, weight, norm, token, lane, lane_setup);
  pdl_wait();
  float4 out[QUADS];
  norm_rope_row(l, x + row * l.head_dim, norm, eps, lane_setup, normed_rows[warp], lane, out);
#pragma unroll
  for (int s = 0; s < QUADS; ++s) {
    const int i = lane + 32 * s;
    if (i >= quads) continue;
    reinterpret_cast<float4*>(x + row * l.head_dim)[i] = out[s];
    if (second && l.k_cache != nullptr) {  // the keys' F16 cache row, as store_kv writes it
      const int64_t cache_row = static_cast<int64_t>(l.slots[token]) * heads + row % heads;
      reinterpret_cast<uint2*>(l.k_cache + cache_row * l.head_dim)[i] = f16x4(out[s]);
    }
  }
}

}  // namespace

bool norm_q8_supported(int64_t cols, int group) {
  int threads = 0, steps = 0;
  if (group == 32) return cols % 32 == 0;
  // Group 256 only in the row kernels (the looping kernel quantizes a warp's 32 at a time).
  return group == 256 && cols % 256 == 0 && row_shape(cols, true, threads, steps);
}

cudaError_t add_rms_norm_q8(const float* a, const float* b, float* sum, const float* weight,
                            float eps, int64_t rows, int64_t cols, float* out, void* xq, int group,
                            cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  int8_t* qs = static_cast<int8_t*>(xq);
  float* qd = nullptr;
  float* qsum = nullptr;
  if (xq != nullptr) {
    if (!norm_q8_supported(cols, group)) return cudaErrorInvalidValue;
    const Q8Activations view = q8_activations(xq, rows, cols);
    qd = const_cast<float*>(view.d);
    qsum = const_cast<float*>(view.s);
  }
  const unsigned grid = static_cast<unsigned>(rows);
  int threads = 0, steps = 0;
  if (row_shape(cols, xq != nullptr, threads, steps)) {
    if (b != nullptr && xq != nullptr) {
      launch_row_norm<true, true>(threads, steps, grid, stream, a, b, sum, weight, eps, cols, out,
                                  qs, qd, qsum, group);
    } else if (b != nullptr) {
      launch_row_norm<true, false>(threads, steps, grid, stream, a, b, sum, weight, eps, cols, out,
                                   qs, qd, qsum);
    } else if (xq != nullptr) {
      launch_row_norm<false, true>(threads, steps, grid, stream, a, b, sum, weight, eps, cols, out,
                                   qs, qd, qsum, group);
    } else {
      launch_row_norm<false, false>(threads, steps, grid, stream, a, b, sum, weight, eps, cols, out,
                                    qs, qd, qsum);
    }
  } else if (b != nullptr && xq != nullptr) {
    (void)launch_pdl(add_rms_norm_kernel<true, true>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  } else if (b != nullptr) {
    (void)launch_pdl(add_rms_norm_kernel<true, false>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  } else if (xq != nullptr) {
    (void)launch_pdl(add_rms_norm_kernel<false, true>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  } else {
    (void)launch_pdl(add_rms_norm_kernel<false, false>, grid, kThreads, stream, a, b, sum, weight,
                     eps, cols, out, qs, qd, qsum);
  }
  return cudaGetLastError();
}

cudaError_t rms_norm_rope(const NormRopeLaunch& l, cudaStream_t stream) {
  if (l.count < 1 || l.count > 2) return cudaErrorInvalidValue;
  int64_t rows = 0;
  for (int i = 0; i < l.count; ++i) rows += l.n * l.parts[i].heads;
  if (rows == 0) return cudaSuccess;
  if (!rms_norm_rope_supported(l.head_dim) || l.rotary_dim > l.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (l.k_cache != nullptr) {
    if (l.count != 2 || l.v_cache == nullptr || l.v == nullptr || l.slots == nullptr) {
      return cudaErrorInvalidValue;
    }
    rows += l.n * l.parts[1].heads;  // the values' rows
  }
  const auto grid = static_cast<unsigned>((rows + kRopeWarps - 1) / kRopeWarps);
  const int64_t quads = l.head_dim / 4;
  auto* kernel = quads <= 32   ? rms_norm_rope_kernel<1>
                 : quads <= 64 ? rms_norm_rope_kernel<2>
                               : rms_norm_rope_kernel<4>;
  (void)launch_pdl(kernel, grid, kRopeWarps * 32, stream, l);
  return cudaGetLastError();
}

bool rms_norm_rope_supported(int64_t head_dim) {
  return head_dim % 4 == 0 && head_dim > 0 && head_dim <= kMaxRopeHead;
}

cudaError_t rms_norm(const float* x, const float* weight, float eps, int64_t rows, int64_t cols,
                     float* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  int threads = 0, steps = 0;
  if (row_shape(cols, false, threads, steps)) {
    launch_row_norm<false, false>(threads, steps, static_cast<unsigned>(rows), stream, x, nullptr,
                                  nullptr, weight, eps, cols, out, nullptr, nullptr, nullptr);
    return cudaGetLastError();
  }
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, eps, cols, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda

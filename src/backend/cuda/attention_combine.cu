// attention_combine: the context splits of a decode attention merged. Each split left its
// (output, max, sum) triple per query head in a.partial (attention_decode_*.cu); a block merges
// one head's (or a 256-value group's heads') splits and writes out, and with out_q8 its 8-bit
// copy for the o projection (so no quantize launch follows).
// Reads: tokens x heads x splits x (head_dim + 2) floats. Writes: out [tokens, heads, head_dim]
// (and out_q8). No roofline fraction: latency-bound, well under 1 MB a launch (H100: ~2.4 us
// inside the decode step at 512 keys, ~5.1 us after 16K).
#include <cmath>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quantize_q8.cuh"

namespace tern::cuda {
namespace {

constexpr int kCombineThreads = 128;
constexpr int kCombineChunk = 256;   // splits whose weights are in shared memory at once
constexpr int kCombineDims = 2;      // head dims a thread (head_dim <= 256)
constexpr int kCombineMaxHeads = 4;  // heads a block (256 / head_dim, head_dim >= 64)

// What merge_splits keeps in shared memory for H heads (row y of the block a head).
template <int H>
struct MergeShared {
  float warp_max[H][kCombineThreads / 32];
  float weight[H][kCombineChunk], split_sum[H][kCombineChunk];
};

// Head qh's (token * heads + head) split partials merged by the kCombineThreads threads of block
// row y: writes out (its 8-bit copy for groups of 32) and, when `values` is set, the head's
// values there (values[d]). Every thread of the block calls it (block barriers).
template <int H>
__device__ __forceinline__ void merge_splits(const AttentionLaunch& a, int64_t qh, int y,
                                             MergeShared<H>& sh, float* values) {
  const int64_t hd = a.head_dim, stride = hd + 2;
  const int splits = a.splits;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const float* part = a.partial + qh * splits * stride;
  float mx = -INFINITY;
  for (int s = tid; s < splits; s += kCombineThreads) {
    mx = fmaxf(mx, part[s * stride + hd]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) sh.warp_max[y][warp] = mx;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kCombineThreads / 32; ++w) mx = fmaxf(mx, sh.warp_max[y][w]);

  // (Every head of the block takes the same chunks: the barriers are the whole block's. A head
  // no split saw, mx = -inf, weighs every split 0 and writes 0.)
  float o[kCombineDims] = {}, total[kCombineDims] = {};
  for (int s0 = 0; s0 < splits; s0 += kCombineChunk) {
    const int n = splits - s0 < kCombineChunk ? splits - s0 : kCombineChunk;
    __syncthreads();  // the chunk before is read
    for (int i = tid; i < n; i += kCombineThreads) {
      const float* p = part + (s0 + i) * stride;
      sh.weight[y][i] = mx == -INFINITY ? 0.0f : expf(p[hd] - mx);
      sh.split_sum[y][i] = p[hd + 1];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kCombineDims; ++j) {
      const int64_t d = tid + j * kCombineThreads;
      if (d >= hd) break;
      const float* p = part + s0 * stride + d;
      float acc = o[j], t = total[j];
#pragma unroll 8
      for (int i = 0; i < n; ++i) {
        t += sh.split_sum[y][i] * sh.weight[y][i];
        acc += p[i * stride] * sh.weight[y][i];
      }
      o[j] = acc, total[j] = t;
    }
  }
#pragma unroll
  for (int j = 0; j < kCombineDims; ++j) {
    const int64_t d = tid + j * kCombineThreads;
    if (d >= hd) break;
    const float value = total[j] > 0.0f ? o[j] / total[j] : 0.0f;
    a.out[qh * hd + d] = value;
    if (values != nullptr) values[d] = value;
    if (a.out_q8.qs != nullptr && a.out_q8.group == 32) {
      // Groups of 32: this warp's values are one (head_dim a multiple of 32).
      const int64_t first = qh * hd + d - lane;
      quantize_group32_warp(value, lane, a.out_q8.qs + first, a.out_q8.d + first / 32,
                            a.out_q8.s + first / 32);
    }
  }
}

// Group `group` of 256 output values quantized by warp 0 from values (shared memory), as
// quantize_q8's group-256 kernel would.
__device__ __forceinline__ void quantize_merged_group(const AttentionLaunch& a, const float* values,
                                                      int64_t group) {
  if (threadIdx.x >= 32) return;
  const int lane = static_cast<int>(threadIdx.x);
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = values[lane * 8 + i];
  quantize_group256_warp(v, lane, a.out_q8.qs + group * 256, a.out_q8.d + group * 8,
                         a.out_q8.s + group * 8);
}

// The splits' (output, max, sum) triples of one token's query heads merged: a block of
// kCombineThreads x H threads takes H heads (threadIdx.y a head). Reads the partials once; writes
// out (and its 8-bit copy with out_q8).
// The splits' maxima are read a thread a split and their weights exp(m_s - m) put in shared
// memory a chunk at a time; each output dim then sums over the splits with 8 loads in flight
// (reading each split's max, sum and value in turn was one L2 round trip after another). The
// same products are summed in the same order (split 0 first): the same results.
// With out_q8 of groups of 256 a block takes the 256 / head_dim heads of a group (H) and
// quantizes it from shared memory with quantize_q8's warp function: no other block is waited
// for.
template <int H>
__global__ void __launch_bounds__(kCombineThreads* H) combine_kernel(AttentionLaunch a) {
  pdl_launch_dependents();
  pdl_wait();

  __shared__ MergeShared<H> sh;
  __shared__ float group_values[256];
  const int y = static_cast<int>(threadIdx.y);
  const int64_t qh = static_cast<int64_t>(blockIdx.x) * H + y;  // token * heads + head
  const bool group256 = a.out_q8.qs != nullptr && a.out_q8.group == 256;
  merge_splits<H>(a, qh, y, sh, group256 ? group_values + y * a.head_dim : nullptr);
  if (!group256) return;
  __syncthreads();
  if (y != 0) return;
  quantize_merged_group(a, group_values, static_cast<int64_t>(blockIdx.x) * H * a.head_dim / 256);
}

}  // namespace

bool attention_output_quantizes(const AttentionLaunch& a, int group) {
  const int64_t k = a.heads * a.head_dim;
  if (a.tokens != 1 || a.splits <= 1 || a.head_dim <= 0) return false;
  if (group == 32) return a.head_dim % 32 == 0;
  return group == 256 && 256 % a.head_dim == 0 && 256 / a.head_dim <= kCombineMaxHeads &&
         k % 256 == 0;
}

cudaError_t attention_combine(const AttentionLaunch& a, cudaStream_t stream) {
  static_assert(kCombineThreads * kCombineDims >= 256, "head_dim <= 256 (attention_supported)");
  // A group of 256 quantized in one block: its 256 / head_dim heads (attention_output_quantizes).
  const int64_t heads = a.out_q8.qs != nullptr && a.out_q8.group == 256 ? 256 / a.head_dim : 1;
  const auto blocks = static_cast<unsigned>(a.tokens * a.heads / heads);
  if (heads == 4) {
    (void)launch_pdl(combine_kernel<4>, blocks, dim3(kCombineThreads, 4), stream, a);
  } else if (heads == 2) {
    (void)launch_pdl(combine_kernel<2>, blocks, dim3(kCombineThreads, 2), stream, a);
  } else {
    (void)launch_pdl(combine_kernel<1>, blocks, dim3(kCombineThreads, 1), stream, a);
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda

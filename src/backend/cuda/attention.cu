// attention: causal attention of new tokens over the paged KV cache (F32, F16, BF16 or Q8_0),
// with grouped-query heads, a sliding window and score soft-capping; flash-decoding style.
// Grid: (token, KV head, query-head chunk) x context splits. Each block holds up to 8 query
// heads of one KV head in shared memory; each of its 4 warps walks tiles of 32 keys (one key
// per lane for the scores, one tile of values per lane's dims for the output) with an online
// softmax, the warps are merged in shared memory, and with several splits a second kernel
// merges the splits' (max, sum, output) triples.
// Reads: q once, every attended key and value row once per block (GQA heads share them).
// Writes: out [tokens, heads, head_dim] (and the split partials).
// Measured on the H200 (2026-12-03, tern-cuda-bench, inside a CUDA graph; copy roofline 4229 GB/s;
// one decode token, 32 query / 8 KV heads of 128, F16): 16K context 679 GB/s of K+V (16%), 1K
// context 221 GB/s (5%, 19 us: launch-size bound). Prefill is the same kernel per token (keys
// re-read from L2 by every query token): a tiled tensor-core kernel is still to come.
// 2026-12-04: v2 (below: a lane a key, 32 keys a warp pass) measured ~22 us a layer at ~600
// tokens in the decode step (Nsight Compute, cold), ~0.8 ms of a 3.6 ms step, latency-bound (4
// warps an SM, no eligible warp 92% of the time). v4 (8 lanes a key, more splits) replaces it for
// F16/BF16 caches with heads of 64, 128 or 256; v2 stays for F32 and Q8_0 caches and other head
// sizes. v4 measured (2026-12-04, tern-cuda-bench, in a graph, one decode token, 32/8 heads of
// 128, F16): ctx 512 10.4 us (v2 18.3), 1K 13.1 us (20.5), 16K 53.4 us = 1256 GB/s of K+V (30%
// of the 4229 GB/s copy roofline; v2 19%); in the Qwen3-8B Q4_K_M decode step 3452 -> 2988 us.
// 2026-12-05: on the H100 decode after 16K tokens was 0.97x llama.cpp (186.9 vs 192 tok/s): v4
// at 2 blocks an SM (~200 registers a lane) leaves its loads exposed while it computes. Two
// remedies measured (H100, 16K keys): the next pass's K/V rows loaded before this pass's
// products 56.7 -> 54.9 us, no gain in the decode step (removed 2026-12-07); two query heads a
// block and 4 blocks an SM (v4_head_cap, now the default) 48.7 us, decode after 16K tokens
// 1.03x llama.cpp. Both together: 72.8 us (the pipelined rows' registers undo the occupancy).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quantize_q8.cuh"

namespace tern::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxGroup = 8;
constexpr int kVBatch = 16;  // value rows loaded before the first is used

// Elements [d0, d0 + N) of cache row `row` (rows of head_dim elements of type `type`).
template <int N>
__device__ __forceinline__ void load_row(TensorType type, const void* cache, int64_t row,
                                         int64_t head_dim, int64_t d0, float (&v)[N]) {
  if (type == TensorType::F16 || type == TensorType::BF16) {
    const uint16_t* p = static_cast<const uint16_t*>(cache) + row * head_dim + d0;
    const bool f16 = type == TensorType::F16;
    if constexpr (N % 8 == 0) {
#pragma unroll
      for (int c = 0; c < N / 8; ++c) {
        const uint4 q = *reinterpret_cast<const uint4*>(p + 8 * c);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          v[8 * c + 2 * i] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] & 0xFFFF))
                                 : __uint_as_float(w[i] << 16);
          v[8 * c + 2 * i + 1] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] >> 16))
                                     : __uint_as_float(w[i] & 0xFFFF0000u);
        }
      }
    } else if constexpr (N % 4 == 0) {  // a lane's dims of a value row: 8-byte loads
#pragma unroll
      for (int c = 0; c < N / 4; ++c) {
        const uint2 q = *reinterpret_cast<const uint2*>(p + 4 * c);
        const uint32_t w[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          v[4 * c + 2 * i] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] & 0xFFFF))
                                 : __uint_as_float(w[i] << 16);
          v[4 * c + 2 * i + 1] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] >> 16))
                                     : __uint_as_float(w[i] & 0xFFFF0000u);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = f16 ? half_bits_to_float(p[i]) : bf16_bits_to_float(p[i]);
    }
  } else if (type == TensorType::F32) {
    const float* p = static_cast<const float*>(cache) + row * head_dim + d0;
    if constexpr (N % 4 == 0) {
#pragma unroll
      for (int c = 0; c < N / 4; ++c) {
        const float4 q = *reinterpret_cast<const float4*>(p + 4 * c);
        v[4 * c] = q.x, v[4 * c + 1] = q.y, v[4 * c + 2] = q.z, v[4 * c + 3] = q.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = p[i];
    }
  } else {  // Q8_0: N <= 32 consecutive elements never straddle a block when d0 % N == 0
    const uint8_t* r = static_cast<const uint8_t*>(cache) + row * (head_dim / 32) * 34;
    const uint8_t* b = r + (d0 / 32) * 34;
    const float d = half_bits_to_float(load_u16(b));
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2) + d0 % 32;
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = static_cast<float>(qs[i]) * d;
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// s[g] += q[g] . K row `row` for the block's query heads (sq: [G][32 * HDL] in shared memory).
// F16/BF16 rows of exactly 32 * HDL elements take every 16-byte load of the row before the first
// product: with the type and size unknown at compile time the loop below waits for each load in
// turn (16 memory round trips per key for head size 128: ~20 us per 32-key tile, measured).
template <int HDL, int G>
__device__ __forceinline__ void key_scores(const AttentionLaunch& a, int64_t row,
                                           const float (*sq)[32 * HDL], float (&s)[G]) {
  constexpr int kHd = 32 * HDL;
  const int64_t hd = a.head_dim;
  if ((a.kv_type == TensorType::F16 || a.kv_type == TensorType::BF16) && hd == kHd) {
    const bool f16 = a.kv_type == TensorType::F16;
    const uint4* kp =
        reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.k_cache) + row * kHd);
    uint4 raw[kHd / 8];
#pragma unroll
    for (int c = 0; c < kHd / 8; ++c) raw[c] = kp[c];
#pragma unroll
    for (int c = 0; c < kHd / 8; ++c) {
      const uint32_t w[4] = {raw[c].x, raw[c].y, raw[c].z, raw[c].w};
      float kv[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        kv[2 * i] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] & 0xFFFF))
                        : __uint_as_float(w[i] << 16);
        kv[2 * i + 1] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] >> 16))
                            : __uint_as_float(w[i] & 0xFFFF0000u);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float4 q0 = *reinterpret_cast<const float4*>(&sq[g][8 * c]);
        const float4 q1 = *reinterpret_cast<const float4*>(&sq[g][8 * c + 4]);
        s[g] += q0.x * kv[0] + q0.y * kv[1] + q0.z * kv[2] + q0.w * kv[3] + q1.x * kv[4] +
                q1.y * kv[5] + q1.z * kv[6] + q1.w * kv[7];
      }
    }
    return;
  }
#pragma unroll
  for (int c = 0; c < kHd / 8; ++c) {
    const int d = 8 * c;
    if (d < hd) {
      float kv[8];
      load_row<8>(a.kv_type, a.k_cache, row, hd, d, kv);
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int i = 0; i < 8; ++i) s[g] += sq[g][d + i] * kv[i];
      }
    }
  }
}

// HDL: head dims per lane (head_dim <= 32 * HDL); G: query heads per block.
template <int HDL, int G>
__global__ void __launch_bounds__(32 * kWarps)
    attention_kernel(AttentionLaunch a, int group, int head_chunks) {
  pdl_launch_dependents();
  pdl_wait();

  constexpr int kHd = 32 * HDL;
  __shared__ __align__(16) float sq[G][kHd];
  __shared__ float sacc[kWarps][G][kHd];
  __shared__ float sm[kWarps][G], sl[kWarps][G];

  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hd = a.head_dim;
  const BlockHeads bh = block_heads<G>(a, group, head_chunks);
  const int64_t kvh = bh.kv_head, token = bh.token, h0 = bh.first_head;
  const int gcount = bh.count;
  const int split = static_cast<int>(blockIdx.y);

  const TokenKeys keys = token_keys(a, token, split);
  const int32_t* table = keys.table;
  const int64_t kbeg = keys.begin, kend = keys.end;

  for (int i = static_cast<int>(threadIdx.x); i < G * kHd; i += 32 * kWarps) {
    const int g = i / kHd, d = i % kHd;
    sq[g][d] = (g < gcount && d < hd) ? a.q[(token * a.heads + h0 + g) * hd + d] : 0.0f;
  }
  __syncthreads();

  float m[G], l[G], acc[G][HDL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < HDL; ++i) acc[g][i] = 0.0f;
  }
  const bool lane_dims = lane * HDL < hd;
  const int64_t v_row_bytes = a.kv_type == TensorType::F32    ? hd * 4
                              : a.kv_type == TensorType::Q8_0 ? hd / 32 * 34
                                                              : hd * 2;
  for (int64_t tile = kbeg + warp * 32; tile < kend; tile += 32 * kWarps) {
    const int64_t j = tile + lane;
    const bool valid = j < kend && keys.sees(j);
    int64_t row = 0;
    float s[G];
#pragma unroll
    for (int g = 0; g < G; ++g) s[g] = 0.0f;
    if (valid) {
      const int64_t slot = key_slot(table, j, a.block_size);
      row = slot * a.kv_heads + kvh;
      // The key's value row is read after the softmax step: start fetching it into L2 now.
      const char* vr = static_cast<const char*>(a.v_cache) + row * v_row_bytes;
      for (int64_t off = 0; off < v_row_bytes; off += 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vr + off));
      key_scores<HDL, G>(a, row, sq, s);
    }
    float p[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float v = s[g] * a.scale;
      if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
      v = valid ? v : -INFINITY;
      const float m_new = fmaxf(m[g], warp_max(v));
      const float corr = m_new == -INFINITY ? 1.0f : expf(m[g] - m_new);
      p[g] = valid ? expf(v - m_new) : 0.0f;
      l[g] = l[g] * corr + warp_sum(p[g]);
#pragma unroll
      for (int i = 0; i < HDL; ++i) acc[g][i] *= corr;
      m[g] = m_new;
    }
    // Values of the tile's keys, kVBatch rows in flight at a time (a row per key: each lane
    // reads its HDL dims of it). Lanes past the context hold row 0, read but never used.
    const int count = static_cast<int>(kend - tile < 32 ? kend - tile : 32);
    for (int j0 = 0; j0 < count; j0 += kVBatch) {
      float vv[kVBatch][HDL];
#pragma unroll
      for (int u = 0; u < kVBatch; ++u) {
        const int64_t r = __shfl_sync(0xffffffffu, row, j0 + u);
        if (lane_dims) load_row<HDL>(a.kv_type, a.v_cache, r, hd, lane * HDL, vv[u]);
      }
#pragma unroll
      for (int u = 0; u < kVBatch; ++u) {
        float pj[G];
#pragma unroll
        for (int g = 0; g < G; ++g) pj[g] = __shfl_sync(0xffffffffu, p[g], j0 + u);
        if (lane_dims && j0 + u < count) {
#pragma unroll
          for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int i = 0; i < HDL; ++i) acc[g][i] += pj[g] * vv[u][i];
          }
        }
      }
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      sm[warp][g] = m[g];
      sl[warp][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < HDL; ++i) sacc[warp][g][lane * HDL + i] = acc[g][i];
  }
  __syncthreads();
  store_block_output<G, kHd, kWarps>(a, sm, sl, sacc, gcount, token, h0, split);
}

// Eight F16 or BF16 values from one 16-byte load.
__device__ __forceinline__ void unpack8(const uint4& q, bool f16, float (&v)[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] & 0xFFFF))
                   : __uint_as_float(w[i] << 16);
    v[2 * i + 1] = f16 ? half_bits_to_float(static_cast<uint16_t>(w[i] >> 16))
                       : __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

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
// memory a chunk at a time; each output dim then sums over the splits with 8 loads in flight.
// Why: the loop before read each split's max, then each split's sum and value, one L2 round trip
// after another (16 splits at 512 keys): Nsight Compute (2026-12-06, H100, Qwen3-8B Q4_K_M decode
// after 512 tokens, cold L2) put it at 7.3 us a launch, 263 us of a 3,877 us step (6.8%).
// The same products summed in the same order (split 0 first): the same results. Measured
// (2026-12-06, H100, Qwen3-8B Q4_K_M, `tern bench -p 512 -n 128 -r 3` with TERN_CUDA_TIMING=1,
// this build against the one before, A B A B): GPU time a decode step 3,041 / 3,036 -> 3,005 /
// 3,008 us (-1.1%).
// With out_q8 of groups of 256 a block takes the 256 / head_dim heads of a group (H) and
// quantizes it from shared memory with quantize_q8's warp function: no other block is waited
// for. (The version before counted finished heads with a fence and an atomic a block and let
// the last one quantize: neutral in the decode step, 2026-12-06; the quantize launch it saves
// costs ~1.9 us of a step's GPU time inside the graph, TERN_CUDA_SKIP_KERNELS.)
// (Tried and removed: the attention kernel's last block of each head group merging the splits
// itself after a fence and an atomic count, no combine launch: GPU time a step 2,797 -> 2,858 us;
// 2026-12-06, H100, Qwen3-8B Q4_K_M decode after 512 tokens, A B A B.)
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

// v4 (2026-12-04): 8 lanes a key. v2 is latency-bound (Nsight Compute: 4 warps an SM, no eligible
// warp 92% of the time): one lane walks a whole key, ~3,400 dependent instructions a tile. Here
// a key is split over 8 lanes (lane i holds dims [64c + 8i, 64c + 8i + 8) of every 64-dim chunk
// c: one 16-byte load a chunk, the 8 lanes' loads one 128-byte line), the partial dot products
// meet in 3 shuffles, and each 8-lane group keeps its own online softmax over the keys it takes
// (key kbeg + 16t + group). A group loads the K and V rows of kU keys before the first product,
// so a block has 16 x kU keys in flight; the groups merge through shuffles, the warps through
// shared memory. F16 and BF16 caches, head_dim 64, 128 or 256 (C = head_dim / 64 chunks), G
// query heads a block with G x C <= 8 (q and the output in registers).
// With a.early_keys the first pass's rows of keys stored by earlier steps are loaded before the
// PDL wait, so their DRAM round trip overlaps the q/k norm + RoPE launch before; q and the new
// keys come after it. Inside the decode step a launch of this kernel costs ~7.4 us of GPU time
// at 512 keys (2026-12-06, H100, Qwen3-8B Q4_K_M, TERN_CUDA_SKIP_KERNELS: the step without it),
// for ~2 MB of K+V a layer: latency (dependent round trips), not bandwidth. The early loads
// took 24 us off a 2,926 us step, and one pass a split (the host's rounded-up split count) 67.
// With a.fold_rope the kernel also does the q/k norm + RoPE launch's work (rope_row): 35 us off a
// 2,815 us step (2026-12-06, H100; cuda_device_attention.cpp, fold_rope_into_attention).
constexpr int kGroupLanes = 8;
constexpr int kKeysInFlight = 2;  // kU: keys a group loads before using the first
constexpr int kV4KeysPerPass = kWarps * (32 / kGroupLanes) * kKeysInFlight;

// The blocks an SM the host counts on (attention_blocks_per_sm: 4) for the shapes that fit them
// at 128 registers: heads of 128 with up to 2 query heads a block (the default), heads of 64 with
// up to 4. (Without the bound ptxas gave the default shape 134 registers once the folded RoPE's
// setup lived across the PDL wait: 3 blocks an SM.)
template <int C, int G>
constexpr int v4_min_blocks() {
  return (C == 2 && G <= 2) || (C == 1 && G <= 4) ? 4 : 0;
}

template <int C, int G>
__global__ void __launch_bounds__(32 * kWarps, (v4_min_blocks<C, G>()))
    attention_v4_kernel(AttentionLaunch a, int group, int head_chunks) {
  pdl_launch_dependents();

  constexpr int kHd = 64 * C;
  constexpr int kU = kKeysInFlight;
  __shared__ __align__(16) float sacc[kWarps][G][kHd];
  __shared__ float sm[kWarps][G], sl[kWarps][G];

  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int sub = lane % kGroupLanes, key_group = lane / kGroupLanes;
  const BlockHeads bh = block_heads<G>(a, group, head_chunks);
  const int64_t kvh = bh.kv_head, token = bh.token, h0 = bh.first_head;
  const int gcount = bh.count;
  const int split = static_cast<int>(blockIdx.y);
  const TokenKeys keys = token_keys(a, token, split);
  const bool f16 = a.kv_type == TensorType::F16;
  // a.fold_rope (one token, G < kWarps): warp g < G norms and rotates query head h0 + g, warp G
  // the new key when this split holds it (the rows, rotated, in shared memory).
  const bool fold = a.fold_rope;
  const bool holds_new_key = fold && keys.first_new >= keys.begin && keys.first_new < keys.end;
  constexpr int kRopeQuads = kHd / 128 > 0 ? kHd / 128 : 1;  // float4s a lane of a head row
  __shared__ __align__(16) float rotated_q[G][kHd];
  __shared__ uint4 new_key[kHd / 8], new_value[kHd / 8];  // F16

  const uint4* kc = static_cast<const uint4*>(a.k_cache);
  const uint4* vc = static_cast<const uint4*>(a.v_cache);
  // The K and V rows of a group's kU keys of the pass starting at `base` (zeros and ok = false
  // past the split's end or outside the token's tree). Keys in [skip_from, skip_to) are left as
  // they are (the early load's two halves).
  auto load_pass = [&](int64_t base, uint4(&kr)[kU][C], uint4(&vr)[kU][C], bool(&ok)[kU],
                       int64_t skip_from = 0, int64_t skip_to = 0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t j = base + key_group + u * (kWarps * 32 / kGroupLanes);
      if (j >= skip_from && j < skip_to) continue;
      ok[u] = j < keys.end && keys.sees(j);
      if (ok[u] && fold && j == keys.first_new) {  // the step's key: not in the cache yet
#pragma unroll
        for (int c = 0; c < C; ++c) {
          kr[u][c] = new_key[8 * c + sub];
          vr[u][c] = new_value[8 * c + sub];
        }
      } else if (ok[u]) {
        const int64_t slot = key_slot(keys.table, j, a.block_size);
        const int64_t row = (slot * a.kv_heads + kvh) * (kHd / 8) + sub;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          kr[u][c] = kc[row + 8 * c];
          vr[u][c] = vc[row + 8 * c];
        }
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) kr[u][c] = vr[u][c] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  // Warp-uniform trip count (the shuffles below need the whole warp); lanes past the split's end
  // load nothing and give probability 0.
  uint4 kr[kU][C], vr[kU][C];
  bool ok[kU];
  int64_t base = keys.begin + warp * (32 / kGroupLanes);
  // The first pass's keys stored by earlier steps before the wait (the metadata came up before
  // the step too: staging), the new ones after it.
  if (a.early_keys) load_pass(base, kr, vr, ok, keys.first_new, INT64_MAX);
  const bool rope_key = warp == G && holds_new_key;  // warp-uniform, as is warp < G
  const bool rope_warp = fold && ((warp < G && warp < gcount) || rope_key);
  RopeLane<kRopeQuads> rope_lane;
  if (rope_warp) {
    // (Selects, not a reference to one of the parts: that copies the parameters to the stack.)
    const float* weight = rope_key ? a.rope.parts[1].weight : a.rope.parts[0].weight;
    const bool norm = rope_key ? a.rope.parts[1].norm : a.rope.parts[0].norm;
    rope_lane_setup(a.rope, weight, norm, token, lane, rope_lane);
  }
  pdl_wait();
  if (fold) {
    if (rope_warp) {
      rope_row(a, bh, split, rope_key ? -1 : warp, rope_lane, sacc[warp][0],
               rotated_q[warp < G ? warp : 0], new_key, new_value);
    }
    __syncthreads();
  }
  if (a.early_keys) {
    load_pass(base, kr, vr, ok, 0, keys.first_new);
  } else {
    load_pass(base, kr, vr, ok);
  }
  float q[G][C][8], acc[G][C][8], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float* q_row = fold ? rotated_q[g < gcount ? g : 0]
                                : a.q + (token * a.heads + h0 + (g < gcount ? g : 0)) * kHd;
      const float4* qp = reinterpret_cast<const float4*>(q_row + 64 * c + 8 * sub);
      const float4 x0 = qp[0], x1 = qp[1];
      const float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        q[g][c][i] = g < gcount ? v[i] : 0.0f;
        acc[g][c][i] = 0.0f;
      }
    }
  }
  for (; base < keys.end; base += kV4KeysPerPass) {
    float s[kU][G];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int g = 0; g < G; ++g) s[u][g] = 0.0f;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        float kv[8];
        unpack8(kr[u][c], f16, kv);
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
          for (int i = 0; i < 8; ++i) s[u][g] += q[g][c][i] * kv[i];
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int o = kGroupLanes / 2; o > 0; o >>= 1)
          s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], o);
        float v = s[u][g] * a.scale;
        if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
        s[u][g] = ok[u] ? v : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kU; ++u) m_new = fmaxf(m_new, s[u][g]);
      if (m_new == -INFINITY) continue;  // none of this group's keys yet (uniform in the group)
      const float corr = expf(m[g] - m_new);  // 0 when m[g] is still -inf
      float p[kU];
      l[g] *= corr;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        p[u] = expf(s[u][g] - m_new);
        l[g] += p[u];
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][c][i] *= corr;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          float vv[8];
          unpack8(vr[u][c], f16, vv);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][c][i] += p[u] * vv[i];
        }
      }
      m[g] = m_new;
    }
    load_pass(base + kV4KeysPerPass, kr, vr, ok);
  }
  // The warp's four groups into one state (lanes 0-7 end up with it), then into shared memory.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float mx = m[g];
#pragma unroll
    for (int o = 16; o >= kGroupLanes; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float f = m[g] == -INFINITY ? 0.0f : expf(m[g] - mx);
    float lsum = l[g] * f;
#pragma unroll
    for (int o = 16; o >= kGroupLanes; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float v = acc[g][c][i] * f;
#pragma unroll
        for (int o = 16; o >= kGroupLanes; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane < kGroupLanes) sacc[warp][g][64 * c + 8 * sub + i] = v;
      }
    }
    if (lane == 0) {
      sm[warp][g] = mx;
      sl[warp][g] = lsum;
    }
  }
  __syncthreads();
  store_block_output<G, kHd, kWarps>(a, sm, sl, sacc, gcount, token, h0, split);
}

// Query heads a v4 block holds: at most 2 (TERN_CUDA_ATTN_HEADS=1|2|4|8 for A/B runs). Fewer
// heads, fewer registers (q and the output live in them), more blocks an SM; a group's K/V rows
// are then read once per block of heads, the second time from L2. Measured 2026-12-05 (H100,
// tern-cuda-bench --attention, 32/8 heads of 128, F16, with 4 blocks an SM, see
// cuda_device_attention.cpp): 16K keys 56.7 -> 48.7 us (39% -> 46% of the copy roofline), 512
// keys 10.8 -> 8.2 us; Qwen3-8B Q4_K_M decode after 16K tokens 190.7 -> 200.9 tok/s (llama.cpp
// 195.4 in the same call), after 512 tokens 274-282 -> 285-290 (llama.cpp 247-248).
int v4_head_cap() {
  static const int cap = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_HEADS");
    const int c = v == nullptr ? 2 : std::atoi(v);
    return c == 1 || c == 2 || c == 4 || c == 8 ? c : 2;
  }();
  return cap;
}

int v4_heads_per_block(int group, int c) {
  const int max_g = std::min(8 / c, v4_head_cap());
  return group >= max_g ? max_g : group > 2 ? 4 : group;
}

template <int C>
bool launch_v4(const AttentionLaunch& a, int group, cudaStream_t stream) {
  constexpr int kMaxG = 8 / C;
  const int g = v4_heads_per_block(group, C);
  const int chunks = (group + g - 1) / g;
  const dim3 grid(static_cast<unsigned>(a.tokens * a.kv_heads * chunks),
                  static_cast<unsigned>(a.splits));
  const int t = 32 * kWarps;
  switch (g) {
    case 1:
      (void)launch_pdl(attention_v4_kernel<C, 1>, grid, t, stream, a, group, chunks);
      break;
    case 2:
      (void)launch_pdl(attention_v4_kernel<C, 2>, grid, t, stream, a, group, chunks);
      break;
    case 4:
      if constexpr (kMaxG >= 4) {
        (void)launch_pdl(attention_v4_kernel<C, 4>, grid, t, stream, a, group, chunks);
        break;
      }
      return false;
    default:
      if constexpr (kMaxG >= 8) {
        (void)launch_pdl(attention_v4_kernel<C, 8>, grid, t, stream, a, group, chunks);
        break;
      }
      return false;
  }
  return true;
}

// The splits' (output, max, sum) triples of one token's query heads merged: a block of
// kCombineThreads x H threads takes H heads (threadIdx.y a head). Reads the partials once; writes
// out (and its 8-bit copy with out_q8).
// The splits' maxima are read a thread a split and their weights exp(m_s - m) put in shared
// memory a chunk at a time; each output dim then sums over the splits with 8 loads in flight.
// Why: the loop before read each split's max, then each split's sum and value, one L2 round trip
// after another (16 splits at 512 keys): Nsight Compute (2026-12-06, H100, Qwen3-8B Q4_K_M decode
// after 512 tokens, cold L2) put it at 7.3 us a launch, 263 us of a 3,877 us step (6.8%).
// The same products summed in the same order (split 0 first): the same results. Measured
// (2026-12-06, H100, Qwen3-8B Q4_K_M, `tern bench -p 512 -n 128 -r 3` with TERN_CUDA_TIMING=1,
// this build against the one before, A B A B): GPU time a decode step 3,041 / 3,036 -> 3,005 /
// 3,008 us (-1.1%).
// With out_q8 of groups of 256 a block takes the 256 / head_dim heads of a group (H) and
// quantizes it from shared memory with quantize_q8's warp function: no other block is waited
// for. (The version before counted finished heads with a fence and an atomic a block and let
// the last one quantize: neutral in the decode step, 2026-12-06; the quantize launch it saves
// costs ~1.9 us of a step's GPU time inside the graph, TERN_CUDA_SKIP_KERNELS.)
// Query heads a v2 block holds (up to kMaxGroup; the rest of a group: more blocks).
int v2_heads_per_block(int group) {
  return group >= kMaxGroup ? kMaxGroup : group > 2 ? 4 : group;
}

template <int HDL>
void launch_v2(const AttentionLaunch& a, int group, cudaStream_t stream) {
  const int g = v2_heads_per_block(group);
  const int chunks = (group + g - 1) / g;
  const dim3 grid(static_cast<unsigned>(a.tokens * a.kv_heads * chunks),
                  static_cast<unsigned>(a.splits));
  switch (g) {
    case 1:
      (void)launch_pdl(attention_kernel<HDL, 1>, grid, 32 * kWarps, stream, a, group, chunks);
      break;
    case 2:
      (void)launch_pdl(attention_kernel<HDL, 2>, grid, 32 * kWarps, stream, a, group, chunks);
      break;
    case 4:
      (void)launch_pdl(attention_kernel<HDL, 4>, grid, 32 * kWarps, stream, a, group, chunks);
      break;
    default:
      (void)launch_pdl(attention_kernel<HDL, 8>, grid, 32 * kWarps, stream, a, group, chunks);
      break;
  }
}

}  // namespace

// The tensor-core kernel from this many keys on (the most a token of the batch sees). Measured
// 2026-12-05 (H100, Qwen3-8B-shaped files, decode steps, `tern bench -p N -n 64`): after 16K
// tokens it gains 7% on Q4_K_M, 2% on Q8_0 and 3.5% on BF16 (decode attention 48 -> 37 us a
// layer); after 8K 5.5%, -1.3%, +0.7%; after 1-4K it loses 3-7% on Q8_0 and 1-3% on BF16 (the
// products around it run slower; not explained) and gains 0-4% on Q4_K_M.
constexpr int64_t kMmaFromKeys = 8192;

DecodeAttentionKernel decode_attention_kernel(TensorType kv_type, int64_t head_dim, int64_t group,
                                              int64_t max_keys) {
  static const int forced = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN");
    if (v == nullptr) return 0;
    return std::strcmp(v, "mma") == 0 ? 5 : std::atoi(v);
  }();
  const bool v4 = (kv_type == TensorType::F16 || kv_type == TensorType::BF16) &&
                  (head_dim == 64 || head_dim == 128 || head_dim == 256);
  // Groups that v4 cuts into uneven blocks (3 query heads a KV head: blocks of 2 and 1) read the
  // keys twice with idle lanes; the tensor-core kernel takes up to 8 heads in one block.
  // Measured 2026-12-05 (H100, SmolLM2-135M Q4_1, group 3, heads of 64): decode after 1K tokens
  // 967 -> 1,050 tok/s, after 7K 807 -> 836.
  const bool uneven =
      v4 &&
      group % v4_heads_per_block(static_cast<int>(group), static_cast<int>(head_dim / 64)) != 0;
  const bool mma = decode_attention_mma_supported(kv_type, head_dim);
  if (mma && (forced == 5 || (forced == 0 && (max_keys >= kMmaFromKeys || uneven))))
    return DecodeAttentionKernel::kMma;
  return v4 && forced != 2 ? DecodeAttentionKernel::kV4 : DecodeAttentionKernel::kV2;
}

int64_t attention_split_keys(DecodeAttentionKernel kernel) {
  switch (kernel) {
    case DecodeAttentionKernel::kMma:
      return decode_attention_mma_split_keys();
    case DecodeAttentionKernel::kV4:
      return kV4KeysPerPass;
    default:
      return 64;
  }
}

int64_t attention_heads_per_block(DecodeAttentionKernel kernel, int64_t head_dim, int64_t group) {
  switch (kernel) {
    case DecodeAttentionKernel::kMma:
      return decode_attention_mma_heads_per_block(group);
    case DecodeAttentionKernel::kV4:
      return v4_heads_per_block(static_cast<int>(group), static_cast<int>(head_dim / 64));
    default:
      return v2_heads_per_block(static_cast<int>(group));
  }
}

int64_t attention_blocks_per_sm(DecodeAttentionKernel kernel, int64_t head_dim) {
  return kernel == DecodeAttentionKernel::kMma ? decode_attention_mma_blocks_per_sm(head_dim) : 4;
}

bool attention_supported(TensorType kv_type, int64_t head_dim, int64_t group) {
  const bool type_ok = kv_type == TensorType::F32 || kv_type == TensorType::F16 ||
                       kv_type == TensorType::BF16 || kv_type == TensorType::Q8_0;
  return type_ok && head_dim % 8 == 0 && head_dim <= 256 && head_dim >= 8 && group >= 1;
}

bool attention_output_quantizes(const AttentionLaunch& a, int group) {
  const int64_t k = a.heads * a.head_dim;
  if (a.tokens != 1 || a.splits <= 1 || a.head_dim <= 0) return false;
  if (group == 32) return a.head_dim % 32 == 0;
  return group == 256 && 256 % a.head_dim == 0 && 256 / a.head_dim <= kCombineMaxHeads &&
         k % 256 == 0;
}

bool attention_folds_rope(const AttentionLaunch& a) {
  const NormRopeLaunch& l = a.rope;
  // v4 only. The same fold in the tensor-core kernel (8K keys on) passed its tests but measured
  // no gain (2026-12-06, H100, Q4_K_M decode after 16K, one machine: 241.4 -> 240.2 tok/s alone,
  // 253.1 -> 252.9 with the early tiles): the rows' norm and rotation sat in front of every
  // block's first tile, where the launch it saved had overlapped through PDL. Removed.
  if (a.decode_kernel != DecodeAttentionKernel::kV4 || a.kv_type != TensorType::F16 ||
      a.tokens != 1 || a.ancestors != nullptr || a.kv_heads <= 0 ||
      (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256)) {
    return false;
  }
  const int group = static_cast<int>(a.heads / a.kv_heads);
  // A warp a query head of the block and one more for the key.
  if (v4_heads_per_block(group, static_cast<int>(a.head_dim / 64)) >= kWarps) return false;
  return l.count == 2 && l.n == 1 && l.head_dim == a.head_dim && l.rotary_dim <= a.head_dim &&
         l.parts[0].heads == a.heads && l.parts[1].heads == a.kv_heads && l.k_cache == a.k_cache &&
         l.v_cache == a.v_cache && l.v != nullptr && l.slots != nullptr && a.q_out != nullptr &&
         a.k_out != nullptr;
}

cudaError_t attention(const AttentionLaunch& a, cudaStream_t stream) {
  if (a.tokens == 0) return cudaSuccess;
  if ((a.out_q8.qs != nullptr && !attention_output_quantizes(a, a.out_q8.group)) ||
      (a.fold_rope && !attention_folds_rope(a))) {
    return cudaErrorInvalidValue;
  }
  const int group = static_cast<int>(a.heads / a.kv_heads);
  bool launched = false;
  if (a.decode_kernel == DecodeAttentionKernel::kMma) {
    const cudaError_t status = decode_attention_mma(a, stream);
    if (status != cudaSuccess) return status;
    launched = true;
  } else if (a.decode_kernel == DecodeAttentionKernel::kV4) {
    launched = a.head_dim == 64    ? launch_v4<1>(a, group, stream)
               : a.head_dim == 128 ? launch_v4<2>(a, group, stream)
                                   : launch_v4<4>(a, group, stream);
  }
  if (launched) {
  } else if (a.head_dim <= 32) {
    launch_v2<1>(a, group, stream);
  } else if (a.head_dim <= 64) {
    launch_v2<2>(a, group, stream);
  } else if (a.head_dim <= 128) {
    launch_v2<4>(a, group, stream);
  } else {
    launch_v2<8>(a, group, stream);
  }
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess || a.splits == 1) return status;
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

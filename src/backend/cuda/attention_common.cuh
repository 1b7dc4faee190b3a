// attention_common: what the decode attention kernels (attention_decode_any_cache.cu,
// attention_decode_f16_bf16.cu, attention_decode_mma.cu)
// share: the keys a block attends to (its sequence, causal limit, sliding window, context split
// and token-tree mask), and the last step that merges the warps' softmax states into the output or
// the split's partial for the combine kernel.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/norm_rope.cuh"
#include "backend/cuda/quant_device.cuh"

namespace tern::cuda {

// What a decode-attention block takes (grid x: token x KV head x chunk of its query heads, y: the
// context split): its token, KV head, first query head and how many of its G heads are real.
// The two F16 or BF16 values of a little-endian 32-bit word (the lower-addressed first).
__device__ __forceinline__ void unpack_pair(uint32_t w, bool f16, float& first, float& second) {
  first = f16 ? half_bits_to_float(static_cast<uint16_t>(w & 0xFFFF)) : __uint_as_float(w << 16);
  second =
      f16 ? half_bits_to_float(static_cast<uint16_t>(w >> 16)) : __uint_as_float(w & 0xFFFF0000u);
}

struct BlockHeads {
  int64_t token, kv_head, first_head;
  int count;
};
template <int G>
__device__ __forceinline__ BlockHeads block_heads(const AttentionLaunch& a, int group,
                                                  int head_chunks) {
  const int chunk = static_cast<int>(blockIdx.x % head_chunks);
  const int64_t tk = blockIdx.x / head_chunks;  // token * kv_heads + kv head
  const int64_t kv_head = tk % a.kv_heads;
  return {tk / a.kv_heads, kv_head, kv_head * group + chunk * G, min(G, group - chunk * G)};
}

// The cache slot of key position j: its block's entry in the sequence's table, then the offset in
// the block. 32-bit division (positions stay far below 2^31): a 64-bit division by a runtime
// divisor is a subroutine of ~70 instructions, and the decode kernels take one per key per lane.
__device__ __forceinline__ int64_t key_slot(const int32_t* table, int64_t j, int64_t block_size) {
  const auto position = static_cast<uint32_t>(j), size = static_cast<uint32_t>(block_size);
  const uint32_t block = position / size;
  return static_cast<int64_t>(table[block]) * block_size + (position - block * size);
}

// The keys one block attends to: its token's sequence (sequences sorted by first token), the
// token's position, and the part [begin, end) of [first, pos] that split `split` takes (splits of
// a multiple of 32 keys).
struct TokenKeys {
  const int32_t* table;  // the sequence's block table
  int64_t begin, end;
  // Token trees: key j >= tree_first (the sequence's first new slot) is seen when bit
  // j - tree_first of tree_mask is set; tree_first is past every key for causal tokens.
  int64_t tree_first;
  uint64_t tree_mask;
  // The sequence's first new position (keys before it were stored by earlier steps).
  int64_t first_new;

  __device__ __forceinline__ bool sees(int64_t j) const {
    return j < tree_first || ((tree_mask >> (j - tree_first)) & 1u) != 0;
  }
};
__device__ __forceinline__ TokenKeys token_keys(const AttentionLaunch& a, int64_t token,
                                                int split) {
  int lo_s = 0, hi_s = a.sequence_count - 1;
  while (lo_s < hi_s) {
    const int mid = (lo_s + hi_s + 1) / 2;
    if (a.sequences[4 * mid] <= token) {
      lo_s = mid;
    } else {
      hi_s = mid - 1;
    }
  }
  const int32_t* seq = a.sequences + 4 * lo_s;
  const int64_t pos = seq[2] + (token - seq[0]);
  const int64_t first =
      a.window > 0 ? (pos - a.window + 1 > 0 ? pos - a.window + 1 : int64_t{0}) : 0;
  const int64_t per = ((pos + 1 - first + a.splits - 1) / a.splits + 31) / 32 * 32;
  const int64_t begin = first + static_cast<int64_t>(split) * per;
  int64_t tree_first = INT64_MAX;
  uint64_t tree_mask = ~uint64_t{0};
  if (a.ancestors != nullptr) {
    tree_first = seq[2];
    tree_mask = static_cast<uint64_t>(a.ancestors[2 * token]) |
                (static_cast<uint64_t>(a.ancestors[2 * token + 1]) << 32);
  }
  return {a.tables + seq[3], begin,     pos + 1 < begin + per ? pos + 1 : begin + per,
          tree_first,        tree_mask, seq[2]};
}

// The block's last step: the warps' (max, sum, output) states in shared memory merged per query
// head, written as the output (one split) or as the split's partial for combine_kernel.
template <int G, int kHd, int kWarps>
__device__ __forceinline__ void store_block_output(const AttentionLaunch& a, const float (*sm)[G],
                                                   const float (*sl)[G],
                                                   const float (*sacc)[G][kHd], int gcount,
                                                   int64_t token, int64_t h0, int split) {
  const int64_t hd = a.head_dim;
  for (int i = static_cast<int>(threadIdx.x); i < gcount * hd; i += 32 * kWarps) {
    const int g = static_cast<int>(i / hd);
    const int64_t d = i % hd;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm[w][g]);
    float total = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = expf(sm[w][g] - mx);
        total += sl[w][g] * f;
        o += sacc[w][g][d] * f;
      }
    }
    const int64_t qh = token * a.heads + h0 + g;
    if (a.splits == 1) {
      a.out[qh * hd + d] = total > 0.0f ? o / total : 0.0f;
    } else {
      float* part = a.partial + (qh * a.splits + split) * (hd + 2);
      part[d] = o;
      if (d == 0) {
        part[hd] = mx;
        part[hd + 1] = total;
      }
    }
  }
}

// a.fold_rope (AttentionLaunch): the calling warp's row of block (bh, split) of a decode
// attention kernel, query head first_head + head (head >= 0) or the step's key of the block's KV
// head (head < 0), normed and rotated as rms_norm_rope_kernel does it (norm_rope_row): into
// shared memory (q_row; the key and the values as the F16 cache
// would hold them, key_row and value_row), and to global memory by the one block that writes
// each (the rotated q: split 0's blocks; the rotated key, its cache row and the values' cache
// row: the KV head's first block of the split holding the key). `normed`: the warp's head_dim
// floats of shared memory (16-byte aligned).
template <int QUADS>
__device__ __forceinline__ void rope_row(const AttentionLaunch& a, const BlockHeads& bh, int split,
                                         int head, const RopeLane<QUADS>& rl, float* normed,
                                         float* q_row, uint4* key_row, uint4* value_row) {
  const NormRopeLaunch& l = a.rope;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hd = a.head_dim;
  const int quads = static_cast<int>(hd / 4);
  float4* normed4 = reinterpret_cast<float4*>(normed);
  float4 out[QUADS];
  if (head >= 0) {
    const int64_t row = bh.token * a.heads + bh.first_head + head;
    norm_rope_row(l, l.parts[0].x + row * hd, l.parts[0].norm, l.parts[0].eps, rl, normed4, lane,
                  out);
#pragma unroll
    for (int s = 0; s < QUADS; ++s) {
      const int i = lane + 32 * s;
      if (i >= quads) continue;
      reinterpret_cast<float4*>(q_row)[i] = out[s];
      if (split == 0) reinterpret_cast<float4*>(a.q_out + row * hd)[i] = out[s];
    }
    return;
  }
  const int64_t row = bh.token * a.kv_heads + bh.kv_head;
  norm_rope_row(l, l.parts[1].x + row * hd, l.parts[1].norm, l.parts[1].eps, rl, normed4, lane,
                out);
  const bool writer = bh.first_head == bh.kv_head * (a.heads / a.kv_heads);
  const int64_t cache_row = static_cast<int64_t>(l.slots[bh.token]) * a.kv_heads + bh.kv_head;
#pragma unroll
  for (int s = 0; s < QUADS; ++s) {
    const int i = lane + 32 * s;
    if (i >= quads) continue;
    const uint2 k16 = f16x4(out[s]);
    const uint2 v16 = f16x4(reinterpret_cast<const float4*>(l.v + row * hd)[i]);
    reinterpret_cast<uint2*>(key_row)[i] = k16;
    reinterpret_cast<uint2*>(value_row)[i] = v16;
    if (writer) {
      reinterpret_cast<float4*>(a.k_out + row * hd)[i] = out[s];
      reinterpret_cast<uint2*>(l.k_cache + cache_row * hd)[i] = k16;
      reinterpret_cast<uint2*>(l.v_cache + cache_row * hd)[i] = v16;
    }
  }
}

}  // namespace tern::cuda

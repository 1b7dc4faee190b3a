// attention_prefill_rows: what the two prefill attention kernels (attention_prefill.cu on
// mma.sync, attention_prefill_ws.cu on wgmma) share: a block's 64 query rows of one sequence
// and one head, each lane's two rows (g and g + 8 of its warp's 16) with their positions and
// windows, the Q fragments (f16, or split into high and low halves), the keys the block reads,
// the online softmax over a tile's scores held in the m16n8 accumulator layout, and the writes.
// (A row past the sequence's end has key_last32 = -1 so that the mask needs no test of its own.)
#pragma once

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/f16_fragments.cuh"
#include "backend/cuda/kernels.h"

namespace tern::cuda {

constexpr int kPrefillQueryTile = 64;  // query tokens a block

struct PrefillRows {
  int64_t head, kvh;
  const int32_t* table;  // the sequence's block table
  // This lane's two query rows (g and g + 8 of its warp's 16).
  int64_t token[2];
  bool row_valid[2];
  // The keys each row sees, [key_first32, key_last32], in 32 bits (a 64-bit compare is two
  // instructions); key_last32 is -1 for a row past the sequence's end (it sees none).
  int32_t key_first32[2], key_last32[2];
  // The block's key range: from the first row's window start to the last valid row's position;
  // key tiles every row sees whole (no causal or window mask): from full_first to qpos_first.
  int64_t keys_begin, keys_end, full_first, qpos_first;
  // Scores come out in log2 units for exp2: the scale and log2 e folded into Q (with
  // soft-capping, only the scale: log2 e is applied after the cap).
  bool capped;
  float q_scale, softcap, inverse_cap;

  __device__ __forceinline__ float logit(float v) const {
    constexpr float kLog2e = 1.4426950408889634f;
    return capped ? softcap * tanhf(v * inverse_cap) * kLog2e : v;
  }
};

// The rows of block blockIdx.x (tiles[2 b]: its sequence, tiles[2 b + 1]: its first token) and
// query head `head`, for lane (g = lane / 4) of warp `warp` (of the rows' warpgroup).
__device__ __forceinline__ PrefillRows prefill_rows(const AttentionLaunch& a, const int32_t* tiles,
                                                    int warp, int g, int64_t head) {
  PrefillRows r;
  const int32_t* seq = a.sequences + 4 * tiles[2 * blockIdx.x];
  const int64_t seq_first = seq[0], seq_end = seq[0] + seq[1], pos0 = seq[2];
  r.table = a.tables + seq[3];
  const int64_t tile_first = tiles[2 * blockIdx.x + 1];
  r.head = head;
  r.kvh = r.head / (a.heads / a.kv_heads);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    r.token[h] = tile_first + warp * 16 + g + 8 * h;
    r.row_valid[h] = r.token[h] < seq_end;
    const int64_t qpos = pos0 + (r.token[h] - seq_first);
    const int64_t key_first =
        a.window > 0 ? (qpos - a.window + 1 > 0 ? qpos - a.window + 1 : 0) : 0;
    r.key_last32[h] = r.row_valid[h] ? static_cast<int32_t>(qpos) : -1;
    r.key_first32[h] = static_cast<int32_t>(key_first);
  }
  const int64_t last_token = tile_first + kPrefillQueryTile - 1 < seq_end - 1
                                 ? tile_first + kPrefillQueryTile - 1
                                 : seq_end - 1;
  r.qpos_first = pos0 + (tile_first - seq_first);
  const int64_t qpos_last = pos0 + (last_token - seq_first);
  r.keys_begin =
      a.window > 0 ? (r.qpos_first - a.window + 1 > 0 ? r.qpos_first - a.window + 1 : 0) : 0;
  r.keys_end = qpos_last + 1;
  r.full_first = a.window > 0 ? (qpos_last - a.window + 1 > 0 ? qpos_last - a.window + 1 : 0) : 0;
  constexpr float kLog2e = 1.4426950408889634f;
  r.capped = a.softcap > 0.0f;
  r.q_scale = r.capped ? a.scale : a.scale * kLog2e;
  r.softcap = a.softcap;
  r.inverse_cap = r.capped ? 1.0f / a.softcap : 0.0f;
  return r;
}
// One query head a block: head blockIdx.y.
__device__ __forceinline__ PrefillRows prefill_rows(const AttentionLaunch& a, const int32_t* tiles,
                                                    int warp, int g) {
  return prefill_rows(a, tiles, warp, g, blockIdx.y);
}

// The lane's Q fragments (mma m16n8k16's A layout, which wgmma's register A shares), scaled:
// [k step][a0..a3], as f16 high and low halves (kSplit) or one f16 each (ql unused).
template <int D, bool kSplit>
__device__ __forceinline__ void load_q_fragments(const AttentionLaunch& a, const PrefillRows& r,
                                                 int t, uint32_t (&qh)[D / 16][4],
                                                 uint32_t (&ql)[kSplit ? D / 16 : 1][4]) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int h = i & 1;  // a0, a2: row g; a1, a3: row g + 8
      const int dim = 16 * kk + 2 * t + (i >= 2 ? 8 : 0);
      float x0 = 0.0f, x1 = 0.0f;
      if (r.row_valid[h]) {
        const float* q = a.q + (r.token[h] * a.heads + r.head) * D + dim;
        x0 = q[0] * r.q_scale;
        x1 = q[1] * r.q_scale;
      }
      if constexpr (kSplit) {
        split2(x0, x1, qh[kk][i], ql[kk][i]);
      } else {
        qh[kk][i] = pack_half2(__float2half_rn(x0), __float2half_rn(x1));
      }
    }
  }
}

// The online softmax of the key tile at k0 (kKeys keys) once its scores are in s, in the m16n8
// accumulator layout: s[4 j + c] is key 8 j + 2 t + (c & 1) of row g + 8 (c >> 1) (a row's scores
// spread over a quad). s becomes the probabilities, m and l move on, corr is what O must be
// scaled by.
template <int kKeys>
__device__ __forceinline__ void online_softmax(const PrefillRows& r, int64_t k0, int t, float* s,
                                               float (&m)[2], float (&l)[2], float (&corr)[2]) {
  constexpr int kScores = kKeys / 2;  // a lane's
  const bool full = k0 >= r.full_first && k0 + kKeys - 1 <= r.qpos_first;
  // The common tile after a long context (every score seen, no soft-capping) leaves the scores as
  // they are: one uniform branch for the tile. (A test per score made the compiler keep the
  // outcomes as bits of a register, ~3 instructions a score on every tile.)
  if (!full || r.capped) {
    const int32_t k32 = static_cast<int32_t>(k0) + 2 * t;
#pragma unroll
    for (int i = 0; i < kScores; ++i) {
      const int h = (i >> 1) & 1;
      const int32_t kpos = k32 + 8 * (i >> 2) + (i & 1);
      const bool valid = full || (kpos <= r.key_last32[h] && kpos >= r.key_first32[h]);
      s[i] = valid ? r.logit(s[i]) : -INFINITY;
    }
  }
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < kScores; ++i) {
    tile_max[(i >> 1) & 1] = fmaxf(tile_max[(i >> 1) & 1], s[i]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
    const float m_new = fmaxf(m[h], tile_max[h]);
    corr[h] = m_new == -INFINITY ? 1.0f : fast_exp2(m[h] - m_new);
    m[h] = m_new;
  }
  // exp2(-inf - m) = 0 for the masked scores; a row with none seen yet subtracts 0 (not -inf).
  const float m_sub[2] = {m[0] == -INFINITY ? 0.0f : m[0], m[1] == -INFINITY ? 0.0f : m[1]};
  float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < kScores; ++i) {
    const int h = (i >> 1) & 1;
    s[i] = fast_exp2(s[i] - m_sub[h]);
    row_sum[h] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    l[h] = l[h] * corr[h] + row_sum[h];
  }
}

// out[token, head, :] = O / l for the lane's valid rows; o in the m16n8 accumulator layout over
// the D dims (o[4 j + c]: dims 8 j + 2 t + (c & 1) of row g + 8 (c >> 1)).
template <int D>
__device__ __forceinline__ void store_prefill_rows(const AttentionLaunch& a, const PrefillRows& r,
                                                   int t, const float* o, const float (&l)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!r.row_valid[h]) continue;
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    float* out = a.out + (r.token[h] * a.heads + r.head) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      out[8 * j + 2 * t] = o[4 * j + 2 * h] * inv;
      out[8 * j + 2 * t + 1] = o[4 * j + 2 * h + 1] * inv;
    }
  }
}

}  // namespace tern::cuda

// attention_decode_any_cache ("v2"): decode attention on the CUDA cores for every cache type (F32,
// F16, BF16, Q8_0) and head size up to 256, with GQA, sliding window, soft-cap and token-tree
// masks, a lane a key; attention() takes it where attention_decode_f16_bf16.cu and
// attention_decode_mma.cu cannot. Grid: (token, KV head, query-head chunk) x context splits; 4
// warps walk tiles of 32 keys with an online softmax, merged in shared memory, the splits by
// attention_combine.cu.
// Reads q once and every attended K/V row once a block; writes out [tokens, heads, head_dim] or
// the split partials. Measured: 16% of the copy bandwidth at 16K keys, F16 (H200; latency-bound:
// one lane walks a whole key), so F16/BF16 caches take v4.
#include <cmath>

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
        for (int i = 0; i < 4; ++i) unpack_pair(w[i], f16, v[8 * c + 2 * i], v[8 * c + 2 * i + 1]);
      }
    } else if constexpr (N % 4 == 0) {  // a lane's dims of a value row: 8-byte loads
#pragma unroll
      for (int c = 0; c < N / 4; ++c) {
        const uint2 q = *reinterpret_cast<const uint2*>(p + 4 * c);
        const uint32_t w[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 2; ++i) unpack_pair(w[i], f16, v[4 * c + 2 * i], v[4 * c + 2 * i + 1]);
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

int64_t decode_attention_v2_heads_per_block(int64_t group) {
  return v2_heads_per_block(static_cast<int>(group));
}

void decode_attention_v2(const AttentionLaunch& a, cudaStream_t stream) {
  const int group = static_cast<int>(a.heads / a.kv_heads);
  if (a.head_dim <= 32) {
    launch_v2<1>(a, group, stream);
  } else if (a.head_dim <= 64) {
    launch_v2<2>(a, group, stream);
  } else if (a.head_dim <= 128) {
    launch_v2<4>(a, group, stream);
  } else {
    launch_v2<8>(a, group, stream);
  }
}

}  // namespace tern::cuda

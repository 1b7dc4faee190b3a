// attention_decode_f16_bf16 ("v4"): decode attention on the CUDA cores for F16 and BF16 caches with
// heads of 64, 128 or 256, 8 lanes a key (the comment above attention_v4_kernel says how);
// attention() takes it below 8K keys.
// Reads q once and every attended K/V row once a block of query heads; writes out [tokens, heads,
// head_dim] or the split partials (attention_combine.cu merges them). Measured: 46% of the copy
// bandwidth at 16K keys, 32/8 heads of 128, F16 (H100, tern-cuda-bench --attention).
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quantize_q8.cuh"

namespace tern::cuda {
namespace {

constexpr int kWarps = 4;

// Eight F16 or BF16 values from one 16-byte load.
__device__ __forceinline__ void unpack8(const uint4& q, bool f16, float (&v)[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) unpack_pair(w[i], f16, v[2 * i], v[2 * i + 1]);
}

// 8 lanes a key: one lane walking a whole key (v2) is latency-bound, ~3,400 dependent
// instructions a tile. Here a key is split over 8 lanes (lane i holds dims [64c + 8i, 64c + 8i + 8)
// of every 64-dim chunk c: one 16-byte load a chunk, the 8 lanes' loads one 128-byte line), the
// partial dot products meet in 3 shuffles, and each 8-lane group keeps its own online softmax over
// the keys it takes (key kbeg + 16t + group). A group loads the K and V rows of kU keys before the
// first product, so a block has 16 x kU keys in flight; the groups merge through shuffles, the
// warps through shared memory. F16 and BF16 caches, head_dim 64, 128 or 256 (C = head_dim / 64
// chunks), G query heads a block with G x C <= 8 (q and the output in registers).
// With a.early_keys the first pass's rows of keys stored by earlier steps are loaded before the
// PDL wait, so their DRAM round trip overlaps the q/k norm + RoPE launch before; q and the new
// keys come after it: at 512 keys a launch is ~2 MB of K+V a layer, bound by dependent round
// trips, not bandwidth. With a.fold_rope the kernel also does the q/k norm + RoPE launch's work
// (rope_row; cuda_device_attention.cpp, fold_rope_into_attention).
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
// are then read once per block of heads, the second time from L2. Measured best (bench/README.md).
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

}  // namespace

int64_t decode_attention_v4_heads_per_block(int64_t group, int64_t head_dim) {
  return v4_heads_per_block(static_cast<int>(group), static_cast<int>(head_dim / 64));
}

int64_t decode_attention_v4_split_keys() {
  return kV4KeysPerPass;
}

bool decode_attention_v4(const AttentionLaunch& a, cudaStream_t stream) {
  const int group = static_cast<int>(a.heads / a.kv_heads);
  return a.head_dim == 64    ? launch_v4<1>(a, group, stream)
         : a.head_dim == 128 ? launch_v4<2>(a, group, stream)
                             : launch_v4<4>(a, group, stream);
}

bool attention_folds_rope(const AttentionLaunch& a) {
  const NormRopeLaunch& l = a.rope;
  // v4 only: the same fold in the tensor-core kernel measured no gain (the rows' norm and rotation
  // sat in front of every block's first tile, where the launch it saved overlapped through PDL).
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

}  // namespace tern::cuda

// attention_decode_mma: attention of each new token (a decode step, or the nodes of a token tree)
// over the paged F16 KV cache on the tensor cores, flash-decoding style, for heads of 64, 128 or
// 256. A block takes one token, one KV head and up to 8 of its query heads, over one context
// split; each of its 4 warps walks tiles of 16 keys (warp w: tiles w, w + 4, ...):
//   - the tiles' K and V rows are gathered through the block table into the warp's ring of
//     shared-memory stages with cp.async, kStages - 1 tiles ahead of the one in use, so the
//     loads stay in flight while the warp computes (the CUDA-core kernels,
//     attention_decode_f16_bf16.cu, hold them in registers and stall on them);
//   - S^T (16 keys x 8 heads) = K Q^T with mma.sync m16n8k16 (K from shared memory through
//     ldmatrix, Q^T the B operand held in registers), so the GQA heads share every key read;
//   - an online softmax per head column (max over the 8 lanes of a column: 3 shuffles);
//   - O^T (head_dim x 8 heads) += V^T P^T: V^T through ldmatrix.trans, P^T from the scores'
//     accumulator by movmatrix.trans (the accumulator of an m16n8 product is the transpose of
//     the B operand that the next product needs).
// Precision: Q (scaled) and P are split into f16 high and low halves (x = hi + lo, ~22
// significant bits) multiplied by the exact f16 keys and values with two mmas each, as in
// attention_prefill.cu: the result keeps float precision (the CUDA-core kernels and the
// CPU compute in float).
// Reads q once and every attended K/V row once a block (once a KV head when the group has at most
// 8 heads); writes out [tokens, heads, head_dim] or the split partials for attention_combine.cu.
// Measured: 67% of the copy bandwidth at 16K keys, 79% at 32K, 32/8 heads of 128, F16 (H100,
// tern-cuda-bench --attention). attention() takes it from 8K keys on (attention.cu's
// kMmaFromKeys); TERN_CUDA_ATTN=mma at every length.
// at every length.
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/f16_fragments.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace tern::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kTileKeys = 16;  // keys a warp takes a step: the M of S^T = K Q^T
constexpr int kHeads = 8;      // query heads a block: the N of the products

// Row stride in the stages: 8 halves of padding put the 8 rows an ldmatrix reads in 8 different
// groups of 4 banks.
template <int D>
constexpr int stage_row_halves() {
  return D + 8;
}
template <int D, int S>
constexpr size_t shared_bytes() {
  const size_t ring = size_t{kWarps} * S * 2 * kTileKeys * stage_row_halves<D>() * sizeof(__half);
  const size_t merge = size_t{kWarps} * kHeads * (D + 2) * sizeof(float);
  return ring > merge ? ring : merge;
}

template <int D, int S>
__global__ void __launch_bounds__(32 * kWarps)
    decode_attention_mma_kernel(AttentionLaunch a, int group, int head_chunks, bool late_dependents,
                                bool early) {
  // The kernels after this one may start (and prefetch their weights into L2) once each block
  // has done its keys (late_dependents, the default), or as soon as every block has started
  // (TERN_CUDA_ATTN_DEPENDENTS=early). This kernel leaves registers free, so early dependents
  // come on while it runs and slow it (late: +3-7% decode after 16K, H100).
  if (!late_dependents) pdl_launch_dependents();

  constexpr int kRow = stage_row_halves<D>();
  constexpr int kStageHalves = 2 * kTileKeys * kRow;  // K rows, then V rows
  extern __shared__ __align__(16) unsigned char shared[];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane >> 2, t = lane & 3;
  __half* ring = reinterpret_cast<__half*>(shared) + warp * S * kStageHalves;

  const BlockHeads bh = block_heads<kHeads>(a, group, head_chunks);
  const int64_t kvh = bh.kv_head, token = bh.token, h0 = bh.first_head;
  const int gcount = bh.count;
  const int split = static_cast<int>(blockIdx.y);
  const TokenKeys keys = token_keys(a, token, split);

  const auto* kc = static_cast<const __half*>(a.k_cache);
  const auto* vc = static_cast<const __half*>(a.v_cache);
  // One tile's 16 K and V rows into stage `stage` (16-byte pieces; lanes take consecutive pieces
  // of a row, so a warp's loads cover whole rows). Rows past the split's end are zeros.
  // The tile's block and offset are found with one division; a row past the block's end (a
  // tile straddling two blocks: a sliding window's start, or blocks of fewer than 16 tokens)
  // divides again.
  // (Fewer instructions a tile, from one-block tiles with a fixed row stride, measured no faster:
  // the kernel is not bound by its instruction count where it runs; bench/README.md.)
  const auto block_size = static_cast<uint32_t>(a.block_size);
  auto issue_tile = [&](int64_t base, int stage) {
    __half* sk = ring + stage * kStageHalves;
    __half* sv = sk + kTileKeys * kRow;
    constexpr int kPieces = D / 8;
    const auto base_position = static_cast<uint32_t>(base);
    const uint32_t base_block = base_position / block_size;
    const uint32_t base_offset = base_position - base_block * block_size;
#pragma unroll
    for (int i = 0; i < kTileKeys * kPieces / 32; ++i) {
      const int p = lane + 32 * i, r = p / kPieces, c = p % kPieces;
      const bool valid = base + r < keys.end;
      int64_t at = 0;
      if (valid) {
        uint32_t block = base_block, offset = base_offset + static_cast<uint32_t>(r);
        if (offset >= block_size) {
          const uint32_t more = offset / block_size;
          block += more;
          offset -= more * block_size;
        }
        const int64_t slot = static_cast<int64_t>(keys.table[block]) * a.block_size + offset;
        at = (slot * a.kv_heads + kvh) * D + 8 * c;
      }
      cp_async16(shared_address(sk + r * kRow + 8 * c), kc + at, valid);
      cp_async16(shared_address(sv + r * kRow + 8 * c), vc + at, valid);
    }
  };
  const int64_t step = int64_t{kTileKeys} * kWarps;
  const int64_t first = keys.begin + int64_t{kTileKeys} * warp;
  const int tiles = first < keys.end ? static_cast<int>((keys.end - first + step - 1) / step) : 0;
  // `early` (AttentionLaunch::early_keys, unless TERN_CUDA_MMA_EARLY=0): the first stages' tiles
  // whose keys earlier steps stored are issued before the PDL wait (as the v4 kernel
  // loads its first pass), the rest of the S - 1 after it, one commit group a stage in order.
  int issued = 0;
  if (early) {
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s >= tiles || first + s * step + kTileKeys > keys.first_new) break;
      issue_tile(first + s * step, s);
      cp_async_commit();
      ++issued;
    }
  }
  pdl_wait();

  // Q^T, the B operand (16 dims x 8 heads) of every k step: b0 = head g's dims 16kk + 2t, +1;
  // b1 = dims 16kk + 2t + 8, +9. Scaled, then split into f16 high and low halves.
  uint32_t qh[D / 16][2], ql[D / 16][2];
  {
    const bool head_ok = g < gcount;
    const float* qrow = a.q + (token * a.heads + h0 + (head_ok ? g : 0)) * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int dim = 16 * kk + 2 * t + 8 * r;
        const float x0 = head_ok ? qrow[dim] * a.scale : 0.0f;
        const float x1 = head_ok ? qrow[dim + 1] * a.scale : 0.0f;
        split2(x0, x1, qh[kk][r], ql[kk][r]);
      }
    }
  }

  // O^T accumulators: o[mt] = dims 16mt + g (d0, d1) and 16mt + g + 8 (d2, d3) of heads 2t and
  // 2t + 1. m, l: the running max and this lane's part of the sum for heads 2t + h.
  float o[D / 16][4];
#pragma unroll
  for (int mt = 0; mt < D / 16; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // ldmatrix row addresses. K (A of S^T, keys x dims): matrix j = rows 8(j % 2).., dims 8(j / 2)..
  // V (A of O^T through .trans, dims x keys): matrix j = keys 8(j / 2).., dims 8(j % 2)..
  const int k_row = (lane & 7) + 8 * ((lane >> 3) & 1), k_col = 8 * (lane >> 4);
  const int v_row = (lane & 7) + 8 * (lane >> 4), v_col = 8 * ((lane >> 3) & 1);

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < issued) continue;
    if (s < tiles) issue_tile(first + s * step, s);
    cp_async_commit();
  }
  for (int i = 0; i < tiles; ++i) {
    if (i + S - 1 < tiles) issue_tile(first + (i + S - 1) * step, (i + S - 1) % S);
    cp_async_commit();
    cp_async_wait<S - 1>();  // tile i's group is complete
    __syncwarp();
    __half* sk = ring + (i % S) * kStageHalves;
    __half* sv = sk + kTileKeys * kRow;
    const int64_t base = first + i * step;

    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // S^T: keys g, g + 8 x heads 2t, 2t + 1
    const uint32_t k_address = shared_address(sk + k_row * kRow + k_col);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      ldmatrix_x4(af, k_address + 32 * kk);
      mma_f16(s, af, qh[kk][0], qh[kk][1]);
      mma_f16(s, af, ql[kk][0], ql[kk][1]);
    }
    bool seen[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t j = base + g + 8 * r;
      seen[r] = j < keys.end && keys.sees(j);
    }
    float p[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float v = s[2 * r + h];
        if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
        s[2 * r + h] = seen[r] ? v : -INFINITY;
      }
      float mx = fmaxf(s[h], s[2 + h]);
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[h], mx);  // the same in the column's 8 lanes
      if (m_new == -INFINITY) {             // no key of this head seen yet
        p[h] = p[2 + h] = 0.0f;
        continue;
      }
      const float corr = expf(m[h] - m_new);  // 0 while m[h] is -inf
      p[h] = expf(s[h] - m_new);
      p[2 + h] = expf(s[2 + h] - m_new);
      l[h] = l[h] * corr + p[h] + p[2 + h];
      m[h] = m_new;
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        o[mt][h] *= corr;
        o[mt][2 + h] *= corr;
      }
    }
    // P^T, the B operand of O^T += V^T P^T: the accumulator's 8x8 halves (keys g / g + 8, heads
    // 2t, 2t + 1) transposed give b0 (keys 2t, 2t + 1 of head g) and b1 (keys 2t + 8, 2t + 9).
    uint32_t ph0, pl0, ph1, pl1;
    split2(p[0], p[1], ph0, pl0);
    split2(p[2], p[3], ph1, pl1);
    const uint32_t bh0 = movmatrix_trans(ph0), bh1 = movmatrix_trans(ph1);
    const uint32_t bl0 = movmatrix_trans(pl0), bl1 = movmatrix_trans(pl1);
    const uint32_t v_address = shared_address(sv + v_row * kRow + v_col);
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      uint32_t af[4];
      ldmatrix_x4_trans(af, v_address + 32 * mt);
      mma_f16(o[mt], af, bh0, bh1);
      mma_f16(o[mt], af, bl0, bl1);
    }
    __syncwarp();  // the stage is refilled by the next iteration
  }
  cp_async_wait<0>();
  if (late_dependents) pdl_launch_dependents();

    // The column's sum over its 8 lanes; then the warps' states through shared memory (over the
    // stages, once every warp is done with them).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) l[h] += __shfl_xor_sync(0xffffffffu, l[h], off);
  }
  __syncthreads();
  auto* sacc = reinterpret_cast<float(*)[kHeads][D]>(shared);
  auto* sm = reinterpret_cast<float(*)[kHeads]>(shared + sizeof(float) * kWarps * kHeads * D);
  auto* sl = sm + kWarps;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = 2 * t + h;
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      sacc[warp][head][16 * mt + g] = o[mt][h];
      sacc[warp][head][16 * mt + g + 8] = o[mt][2 + h];
    }
    if (g == 0) {
      sm[warp][head] = m[h];
      sl[warp][head] = l[h];
    }
  }
  __syncthreads();
  store_block_output<kHeads, D, kWarps>(a, sm, sl, sacc, gcount, token, h0, split);
}

// The stages a warp's ring holds: 3 for heads of 64 and 128 (two stages with a third block a
// multiprocessor measured 39.2 against 37.1 us at 16K keys, H100), 2 for 256 (shared memory).
template <int D>
constexpr int kStages = D >= 256 ? 2 : 3;

template <int D, int S>
cudaError_t launch(const AttentionLaunch& a, int group, cudaStream_t stream) {
  const size_t bytes = shared_bytes<D, S>();
  static const cudaError_t configured =
      cudaFuncSetAttribute(decode_attention_mma_kernel<D, S>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (configured != cudaSuccess) return configured;
  const int chunks = (group + kHeads - 1) / kHeads;
  const dim3 grid(static_cast<unsigned>(a.tokens * a.kv_heads * chunks),
                  static_cast<unsigned>(a.splits));
  static const bool late = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_DEPENDENTS");
    return v == nullptr || std::strcmp(v, "early") != 0;
  }();
  // The first tiles of old keys before the PDL wait: after 16K keys they come from HBM, not L2
  // (+3-5% decode after 16K, H100). TERN_CUDA_MMA_EARLY=0 turns it off.
  static const bool early = [] {
    const char* v = std::getenv("TERN_CUDA_MMA_EARLY");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return launch_pdl_shared(decode_attention_mma_kernel<D, S>, grid, 32 * kWarps, bytes, stream, a,
                           group, chunks, late, early && a.early_keys);
}

}  // namespace

bool decode_attention_mma_supported(TensorType kv_type, int64_t head_dim) {
  return kv_type == TensorType::F16 && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

int64_t decode_attention_mma_heads_per_block(int64_t group) {
  return group < kHeads ? group : kHeads;
}

int64_t decode_attention_mma_split_keys() {
  return int64_t{kTileKeys} * kWarps;
}

// The blocks of the kernel decode_attention_mma launches that fit on a multiprocessor at once
// (shared memory bounds it: heads of 128 with 3 stages take 104 KB, two a multiprocessor).
int64_t decode_attention_mma_blocks_per_sm(int64_t head_dim) {
  auto fit = [](auto kernel, size_t bytes) -> int64_t {
    int blocks = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, 32 * kWarps, bytes) !=
            cudaSuccess) {
      return 1;
    }
    return blocks > 0 ? blocks : 1;
  };
  // Asked once per head size (the host asks before every attention launch).
  switch (head_dim) {
    case 64: {
      static const int64_t b =
          fit(decode_attention_mma_kernel<64, kStages<64>>, shared_bytes<64, kStages<64>>());
      return b;
    }
    case 128: {
      static const int64_t b =
          fit(decode_attention_mma_kernel<128, kStages<128>>, shared_bytes<128, kStages<128>>());
      return b;
    }
    default: {
      static const int64_t b =
          fit(decode_attention_mma_kernel<256, kStages<256>>, shared_bytes<256, kStages<256>>());
      return b;
    }
  }
}

cudaError_t decode_attention_mma(const AttentionLaunch& a, cudaStream_t stream) {
  const int group = static_cast<int>(a.heads / a.kv_heads);
  switch (a.head_dim) {
    case 64:
      return launch<64, kStages<64>>(a, group, stream);
    case 128:
      return launch<128, kStages<128>>(a, group, stream);
    case 256:
      return launch<256, kStages<256>>(a, group, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tern::cuda

// attention_prefill_wgmma: attention_prefill.cu's causal prefill attention over the paged F16 KV
// cache, on Hopper's warpgroup products (wgmma, sm_90a) instead of mma.sync. A block is one
// warpgroup (4 warps) with 64 query tokens of one sequence and one query head, the same tiles as
// attention_prefill.cu; key tiles of 64.
// Why: the mma.sync kernel issues ~500 instructions a 32-key tile of which 128 mmas and 32
// ldmatrix, and waits on them (Nsight Compute, 2026-12-06, H100, a 2,048-token chunk after ~6K
// keys: 2.34 cycles a issued instruction stalled on fixed-latency dependencies, 12% occupancy by
// its 228 registers); after 16K tokens of context it is ~2/3 of the BF16 prefill. A wgmma takes a
// whole 64 x 64 x 16 (scores) or 64 x 128 x 16 (output) product in one instruction, reads B from
// shared memory itself and runs while the warps go on: a tile is 32 products (16 with single f16)
// instead of 256 mma.sync + 64 ldmatrix.
// Precision: as attention_prefill.cu, Q and P split into two f16 halves, each product twice (the
// second into the same accumulator), so the results keep float precision.
// The round of tile j (FlashAttention-3's order within a warpgroup): the scores of tile j + 1
// and P(j) V(j) are issued together; the warps take the softmax of tile j + 1 while P(j) V(j)
// runs, then rescale O. (Two warpgroups a multiprocessor by registers; their rounds interleave.)
// Shared memory (a stage: the K tile, then the V tile; three stages): each tile 64 keys x D f16 as
// wgmma's core matrices, 8 keys x 8 dims in 128 contiguous bytes, key groups fastest:
// byte (piece p = dim / 8, key r) = (p * 8 + r / 8) * 128 + (r % 8) * 16. The scores' B (K^T, K
// = dims) is K-major: core matrices 1,024 bytes apart along the dims, 128 along the keys. The
// output's B (V, K = keys) is MN-major (transposed): 128 bytes apart along the keys, 1,024 along
// the dims.
// Reads: q once; each key and value row once per 64 query tokens of each query head (GQA heads
// read their KV head's rows again, from L2). Writes out [tokens, heads, head_dim].
// Measured (2026-12-06, H100, tern-cuda-bench --attention, 512 tokens after 16K keys, A B A B):
// the first version (products and softmax one after the other) 1.06 ms, this one 1.020 / 1.022
// ms, with single-f16 Q (=10) 0.990 / 1.003, against the mma.sync kernel's 0.832 / 0.829: slower,
// so not the default (TERN_CUDA_ATTN_PREFILL=9 takes it; every attention case passes with it).
// Nsight Compute (a 512-token launch after 1K keys): 251 registers, two warpgroups a
// multiprocessor, 0.24 eligible warps a scheduler, stalls per issued instruction: long scoreboard
// 2.69 (the per-thread copies and waits), wait 2.03, short scoreboard 1.41, barrier 0.50, the
// tensor pipe not the limit. What FlashAttention-3 adds and this lacks: a producer warp feeding
// the tiles by TMA with mbarriers (no block barriers or per-thread copy arithmetic in the math
// warps), two math warpgroups a block (128 query rows a key tile), setmaxnreg.
#include <cuda_fp16.h>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_prefill_rows.cuh"
#include "backend/cuda/f16_fragments.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/wgmma.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 128;  // one warpgroup
constexpr int kKeyTile = 64;
constexpr int kKeyGroups = kKeyTile / 8;
constexpr int kStages = 3;
constexpr uint32_t kCoreBytes = 128;

template <int D>
constexpr uint32_t tile_bytes() {
  return kKeyTile * D * sizeof(__half);
}
template <int D>
constexpr size_t wgmma_shared_bytes() {
  return size_t{2} * kStages * tile_bytes<D>();
}

// kSplitQ: Q as two f16 halves (twice the score products) or one.
template <int D, bool kSplitQ>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_attention_wgmma_kernel(AttentionLaunch a, const int32_t* tiles) {
  extern __shared__ __align__(128) unsigned char wgmma_shared[];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane >> 2, t = lane & 3;
  const PrefillRows r = prefill_rows(a, tiles, warp, g);
  const int64_t kvh = r.kvh, keys_end = r.keys_end;
  const int32_t* table = r.table;
  // Q fragments (wgmma's A from registers; f16 high and low halves with kSplitQ).
  uint32_t qh[D / 16][4], ql[kSplitQ ? D / 16 : 1][4];
  load_q_fragments<D, kSplitQ>(a, r, t, qh, ql);

  // The tile copies: a thread takes 16-byte piece p of key rows r, r + R, ... (R = 128 / pieces a
  // row); eight consecutive threads take one piece of eight consecutive rows, 128 contiguous
  // bytes of shared memory (one core matrix: no bank conflicts). One block-table lookup a lane
  // for each 32 keys of the tile, the rows then taken by shuffle.
  constexpr int kPieces = D / 8;
  constexpr int kRowsAPass = kThreads / kPieces;
  static_assert(kKeyTile % kRowsAPass == 0 && 32 % kRowsAPass == 0, "whole passes");
  const int tid = static_cast<int>(threadIdx.x);
  const int piece = (tid >> 3) % kPieces;
  const int row0 = (tid & 7) + 8 * ((tid >> 3) / kPieces);
  const uint32_t shared_base = shared_address(wgmma_shared);
  const uint32_t piece_offset =
      (static_cast<uint32_t>(piece) * kKeyGroups + (row0 >> 3)) * kCoreBytes + (row0 & 7) * 16;
  const auto* kc = static_cast<const __half*>(a.k_cache);
  const auto* vc = static_cast<const __half*>(a.v_cache);
  auto k_tile = [&](int stage) { return shared_base + stage * 2 * tile_bytes<D>(); };
  auto v_tile = [&](int stage) { return k_tile(stage) + tile_bytes<D>(); };
  auto issue_tile = [&](int64_t k0, int stage) {
    long long lane_row[kKeyTile / 32];
#pragma unroll
    for (int half = 0; half < kKeyTile / 32; ++half) {
      const int64_t key = k0 + 32 * half + lane;
      lane_row[half] =
          key < keys_end ? (key_slot(table, key, a.block_size) * a.kv_heads + kvh) * D : 0;
    }
    const int64_t left = keys_end - k0;
    const int keys_left = left < kKeyTile ? static_cast<int>(left) : kKeyTile;
#pragma unroll
    for (int i = 0; i < kKeyTile / kRowsAPass; ++i) {
      const int r = row0 + i * kRowsAPass;
      constexpr int kPassesAHalf = 32 / kRowsAPass;
      const int64_t at = __shfl_sync(0xffffffffu, lane_row[i / kPassesAHalf], r % 32) + piece * 8;
      // Row r's core matrix: (r / 8) groups on from row0's (row0 % 8 = r % 8).
      const uint32_t offset = piece_offset + (i * kRowsAPass / 8) * kCoreBytes;
      cp_async16(k_tile(stage) + offset, kc + at, r < keys_left);
      cp_async16(v_tile(stage) + offset, vc + at, r < keys_left);
    }
    cp_async_commit();
  };
  // Descriptors' fixed parts: strides between core matrices along K and along M / N.
  constexpr uint32_t kGroupStride = kCoreBytes;               // next 8 keys
  constexpr uint32_t kPieceStride = kKeyGroups * kCoreBytes;  // next 8 dims

  // S = Q K^T of the tile in `stage` into s (64 queries x 64 keys, D / 16 k steps), issued.
  float s[kKeyTile / 2];
  auto issue_scores = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t desc =
          wgmma_descriptor(k_tile(stage) + 2 * kk * kPieceStride, kPieceStride, kGroupStride);
      wgmma_m64n64k16<0>(s, qh[kk], desc, kk > 0);
      if constexpr (kSplitQ) wgmma_m64n64k16<0>(s, ql[kk], desc, true);
    }
  };
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2];
  auto softmax = [&](int64_t k0) { online_softmax<kKeyTile>(r, k0, t, s, m, l, corr); };

  // The pipeline, a tile j a round: P(j) V(j) runs on the tensor cores while the warps take the
  // softmax of tile j + 1 (whose scores were issued just before it); the copies of tile j + 2
  // go out meanwhile. Three stages: tile j's V, tile j + 1's K and tile j + 2 in flight.
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  const int64_t k_first = r.keys_begin / kKeyTile * kKeyTile;
  issue_tile(k_first, 0);
  cp_async_wait<0>();
  fence_proxy_async_shared();
  __syncthreads();
  if (k_first + kKeyTile < keys_end) issue_tile(k_first + kKeyTile, 1);
  wgmma_fence();
  issue_scores(0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_registers(s);
  softmax(k_first);
  int stage = 0;  // tile j's
  for (int64_t k0 = k_first; k0 < keys_end; k0 += kKeyTile) {
    const bool has_next = k0 + kKeyTile < keys_end;
    const int next_stage = stage == kStages - 1 ? 0 : stage + 1;
    // P(j): the probabilities of keys 16ks.. are the A fragment of k step ks (score groups 2ks
    // and 2ks + 1), split into f16 halves.
    uint32_t ph[kKeyTile / 16][4], pl[kKeyTile / 16][4];
#pragma unroll
    for (int ks = 0; ks < kKeyTile / 16; ++ks) {
      const float* s0 = s + 8 * ks;  // group 2ks: s0[0..3]; group 2ks + 1: s0[4..7]
      split2(s0[0], s0[1], ph[ks][0], pl[ks][0]);
      split2(s0[2], s0[3], ph[ks][1], pl[ks][1]);
      split2(s0[4], s0[5], ph[ks][2], pl[ks][2]);
      split2(s0[6], s0[7], ph[ks][3], pl[ks][3]);
    }
    // Tile j + 1 has landed (everyone's copies, visible to the tensor cores); every warp is past
    // round j - 1, so tile j - 1's stage takes tile j + 2.
    cp_async_wait<0>();
    fence_proxy_async_shared();
    __syncthreads();
    if (k0 + 2 * kKeyTile < keys_end) {
      issue_tile(k0 + 2 * kKeyTile, next_stage == kStages - 1 ? 0 : next_stage + 1);
    }
    wgmma_fence_registers(o);
    wgmma_fence();
    // (Issued for the last tile too, its result unused: a product issued on one path only makes
    // ptxas serialize every product of the kernel.)
    issue_scores(next_stage);
    wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < kKeyTile / 16; ++ks) {
      const uint64_t desc =
          wgmma_descriptor(v_tile(stage) + 2 * ks * kGroupStride, kGroupStride, kPieceStride);
      if constexpr (D == 128) {
        wgmma_m64n128k16<1>(o, ph[ks], desc, true);
        wgmma_m64n128k16<1>(o, pl[ks], desc, true);
      } else {
        wgmma_m64n64k16<1>(o, ph[ks], desc, true);
        wgmma_m64n64k16<1>(o, pl[ks], desc, true);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();  // the scores of tile j + 1 (P(j) V(j) may still run)
    wgmma_fence_registers(s);
    if (has_next) softmax(k0 + kKeyTile);
    wgmma_wait<0>();
    wgmma_fence_registers(o);
    wgmma_fence_registers(ph);  // read by the products until the wait: kept alive past it
    wgmma_fence_registers(pl);
    if (has_next && __any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= corr[(i >> 1) & 1];
    }
    stage = next_stage;
  }

  store_prefill_rows<D>(a, r, t, o, l);
}

template <int D, bool kSplitQ>
cudaError_t launch(dim3 grid, cudaStream_t stream, const AttentionLaunch& a, const int32_t* tiles) {
  auto* kernel = prefill_attention_wgmma_kernel<D, kSplitQ>;
  constexpr size_t bytes = wgmma_shared_bytes<D>();
  if constexpr (bytes > 48 * 1024) {
    const cudaError_t raised = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (raised != cudaSuccess) return raised;
  }
  kernel<<<grid, kThreads, bytes, stream>>>(a, tiles);
  return cudaGetLastError();
}

}  // namespace

bool prefill_attention_wgmma_supported(const AttentionLaunch& a) {
  // The sm_90a code runs on compute capability 9.0 only (later GPUs get the compute_90 PTX).
  static const bool hopper = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      return false;
    }
    return major == 9 && minor == 0;
  }();
  return hopper && prefill_attention_supported(a);
}

cudaError_t prefill_attention_wgmma(const AttentionLaunch& a, const int32_t* tiles,
                                    int64_t tile_count, cudaStream_t stream, bool split_q) {
  if (tile_count == 0) return cudaSuccess;
  if (!prefill_attention_wgmma_supported(a) || a.heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tile_count), static_cast<unsigned>(a.heads));
  if (a.head_dim == 64) {
    return split_q ? launch<64, true>(grid, stream, a, tiles)
                   : launch<64, false>(grid, stream, a, tiles);
  }
  return split_q ? launch<128, true>(grid, stream, a, tiles)
                 : launch<128, false>(grid, stream, a, tiles);
}

}  // namespace tern::cuda

// attention_prefill_ws: attention_prefill.cu's causal prefill attention over the paged F16 KV
// cache, warp-specialized on Hopper's warpgroup products (sm_90a), FlashAttention-3's structure:
// two copy warps fill the key and value tiles, two math warpgroups only multiply and take the
// softmax. A block takes 64 query tokens of one sequence and two query heads of one KV head (each
// math warpgroup one head; both read the same key tiles), so GQA groups must be even.
// Why the specialization: a wgmma kernel whose one warpgroup did its own copies, with block
// barriers between tiles, stalled on its copies and barriers, not on the tensor cores.
// Warps: 0-3 the math warpgroup of head 2 blockIdx.y, 4-7 of head 2 blockIdx.y + 1, 8 copies K
// tiles, 9 V tiles (at heads of 128, 10 and 11 complete the copy warpgroup and leave). Each tile
// has a stage of shared memory (two stages) with a "full" mbarrier (the copy warp's 32 lanes
// arrive once their cp.asyncs land) and an "empty" one (each math warp arrives once its products
// reading the stage are done), so copies run a tile ahead and no warp waits for the whole block.
// Shared memory: two K and two V stages of 64 keys (64 KB at heads of 128), and at heads of 64
// each math warpgroup's Q (64 rows split into f16 high and low halves, written once); every tile
// as wgmma's core matrices of 8 rows x 8 dims in 128 contiguous bytes, row groups fastest: byte
// (piece p = dim / 8, key r) = (p * 8 + r / 8) * 128 + (r % 8) * 16 of a 64-key tile. The
// scores' B (K^T, K = dims) is K-major: core matrices 1,024 bytes apart along the dims, 128 along
// the keys; the output's B (V, K = keys) is MN-major (transposed): 128 bytes apart along the
// keys, 1,024 along the dims. At heads of 128 Q's fragments stay in
// registers (kQRegs, below), S = Q K^T reading only K from shared memory; O += P V takes P from
// registers (split like Q) and V transposed.
// Precision: as attention_prefill.cu, Q and P split into two f16 halves, each product twice, so
// the results keep float precision.
// The round of tile j in a math warpgroup: wait for K(j + 1), issue its scores; wait for V(j),
// issue P(j) V(j); take the softmax of tile j + 1 while P(j) V(j) runs; free both stages.
// The two math warpgroups do not take turns (FlashAttention-3's pingpong): with one block a
// multiprocessor and the products split in f16 halves, turns only made each wait for the other.
// Reads: q once; each key and value row once per 64 query tokens of each pair of query heads
// (the KV head's other pairs read it again, from L2). Writes out [tokens, heads, head_dim].
// Measured: ~53% of the dense f16 peak in issued products (~26% counting each product once), 512
// tokens after 16K keys (H100, tern-cuda-bench --attention). The default where it runs (Hopper,
// even GQA groups); TERN_CUDA_ATTN_PREFILL=2 takes the mma.sync kernel.
#include <cuda_fp16.h>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_prefill_rows.cuh"
#include "backend/cuda/f16_fragments.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mbarrier.cuh"
#include "backend/cuda/wgmma.cuh"

namespace tern::cuda {
namespace {

constexpr int kMathGroups = 2;  // warpgroups of math, one query head each
constexpr int kMathWarps = 4 * kMathGroups;
// And a K-copy warp and a V-copy warp; with Q in registers (kQRegs) a whole copy warpgroup, two
// of its warps idle, so that setmaxnreg can move its registers to the math warpgroups.
template <bool kQRegs>
constexpr int threads_for() {
  return 32 * kMathWarps + (kQRegs ? 128 : 64);
}
constexpr int kKeyTile = 64;
// Two stages: three measured slower.
constexpr int kStages = 2;
constexpr uint32_t kCoreBytes = 128;
// Core-matrix strides in a 64-row tile: the next 8 rows (keys, or query rows), the next 8 dims.
constexpr uint32_t kGroupStride = kCoreBytes;
constexpr uint32_t kPieceStride = (kKeyTile / 8) * kCoreBytes;

// Where things are in the dynamic shared memory: each math group's Q (high, then low; none with
// kQRegs), the K stages, the V stages, then the mbarriers (full K, full V, empty K, empty V; a
// stage each).
template <int D, bool kQRegs>
struct SharedLayout {
  static constexpr uint32_t kTile = kKeyTile * D * sizeof(__half);  // also a 64-row Q half
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + (kQRegs ? 0 : 2 * kMathGroups * kTile);
  static constexpr uint32_t kV = kK + kStages * kTile;
  static constexpr uint32_t kBarriers = kV + kStages * kTile;
  static constexpr uint32_t kBytes = kBarriers + 4 * kStages * 8;
};
enum Barrier { kFullK = 0, kFullV = 1, kEmptyK = 2, kEmptyV = 3 };

// The registers a lane of this warpgroup may hold from here on (every warp of the group runs it).
template <int kRegisters, bool kRaise>
__device__ __forceinline__ void set_max_registers() {
#if TERN_HAS_WGMMA
  if constexpr (kRaise) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters) : "memory");
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters) : "memory");
  }
#endif
}

// 168 registers a thread (8 bytes spilled at heads of 128): ten warps put three on two of the
// multiprocessor's four quarters, 16K registers each (200 registers measured "too many
// resources requested for launch" on an H100).
// kSplitP: P as two f16 halves (float precision); without it one f16, as llama.cpp's flash
// attention takes it (TERN_CUDA_ATTN_PREFILL=13, for measuring what the split costs only: its
// output is ~2e-4 rel rms from float, the attention cases ask 1e-4 of the CPU).
// kQRegs (the default at heads of 128; =12 without): Q's fragments in registers, S = Q K^T reading
// only K from shared memory (with Q there too, each 64 x 64 x 16 product reads 4 KB in its 32
// tensor cycles: all of shared memory's 128 bytes a cycle). Registers for it come from setmaxnreg:
// the copy warpgroup drops to 40, the math warpgroups rise to 232 (a quarter of the SM then holds
// 232 + 232 + 40 registers a lane: 16,128 of 16,384).
template <int D, bool kSplitP, bool kQRegs>
__global__ void __launch_bounds__(threads_for<kQRegs>(), 1)
    prefill_attention_ws_kernel(AttentionLaunch a, const int32_t* tiles) {
  using L = SharedLayout<D, kQRegs>;
  extern __shared__ __align__(128) unsigned char ws_shared[];
  const uint32_t base = shared_address(ws_shared);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  auto barrier = [&](Barrier kind, int stage) {
    return base + L::kBarriers + (static_cast<uint32_t>(kind) * kStages + stage) * 8;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(barrier(kFullK, s), 32);
      mbarrier_init(barrier(kFullV, s), 32);
      mbarrier_init(barrier(kEmptyK, s), kMathWarps);
      mbarrier_init(barrier(kEmptyV, s), kMathWarps);
    }
  }
  __syncthreads();

  const int64_t head_pair = 2 * static_cast<int64_t>(blockIdx.y);
  if (warp >= kMathWarps) {
    // (kQRegs: the whole copy warpgroup gives registers up, then its idle warps leave. Each
    // setmaxnreg sits where only its own warpgroups pass, so that ptxas allocates the code
    // after it to the new count.)
    if constexpr (kQRegs) {
      set_max_registers<40, false>();
      if (warp >= kMathWarps + 2) return;
    }
    // A copy warp: the key (warp 8) or value (warp 9) tiles of the block's key range, a stage
    // ahead of the math. Eight consecutive lanes take one 16-byte piece of eight consecutive keys
    // (one core matrix: 128 contiguous bytes of shared memory); the warp's four groups of lanes
    // four consecutive pieces, so each key's 64 bytes come whole. One block-table lookup a lane
    // for each 32 keys, the rows then taken by shuffle.
    const PrefillRows r = prefill_rows(a, tiles, 0, 0, head_pair);
    const bool keys = warp == kMathWarps;
    const auto* cache = static_cast<const __half*>(keys ? a.k_cache : a.v_cache);
    const uint32_t stage0 = base + (keys ? L::kK : L::kV);
    const Barrier full = keys ? kFullK : kFullV, empty = keys ? kEmptyK : kEmptyV;
    const int64_t k_first = r.keys_begin / kKeyTile * kKeyTile;
    const int row_in_group = lane & 7, piece_in_four = lane >> 3;
    int j = 0;
    for (int64_t k0 = k_first; k0 < r.keys_end; k0 += kKeyTile, ++j) {
      const int stage = j % kStages;
      mbarrier_wait(barrier(empty, stage), ((j / kStages) & 1) ^ 1);
      int64_t lane_row[kKeyTile / 32];
#pragma unroll
      for (int half = 0; half < kKeyTile / 32; ++half) {
        const int64_t key = k0 + 32 * half + lane;
        lane_row[half] =
            key < r.keys_end ? (key_slot(r.table, key, a.block_size) * a.kv_heads + r.kvh) * D : 0;
      }
      const int64_t left = r.keys_end - k0;
      const int keys_left = left < kKeyTile ? static_cast<int>(left) : kKeyTile;
      const uint32_t tile = stage0 + stage * L::kTile;
#pragma unroll
      for (int group = 0; group < kKeyTile / 8; ++group) {
        const int row = 8 * group + row_in_group;
        const int64_t at = __shfl_sync(0xffffffffu, lane_row[group / 4], row % 32);
#pragma unroll
        for (int four = 0; four < D / 32; ++four) {
          const int piece = 4 * four + piece_in_four;
          cp_async16(tile + (piece * (kKeyTile / 8) + group) * kCoreBytes + row_in_group * 16,
                     cache + at + piece * 8, row < keys_left);
        }
      }
      cp_async_mbarrier_arrive(barrier(full, stage));
    }
    cp_async_wait_all();
    return;
  }

  // A math warpgroup: query head head_pair + math_group, its warp w rows 16 w .. 16 w + 15.
  if constexpr (kQRegs) set_max_registers<232, true>();
  const int math_group = warp / 4, group_warp = warp % 4;
  const int g = lane >> 2, t = lane & 3;
  const PrefillRows r = prefill_rows(a, tiles, group_warp, g, head_pair + math_group);
  const uint32_t q_high = base + L::kQ + math_group * 2 * L::kTile, q_low = q_high + L::kTile;
  uint32_t qh[kQRegs ? D / 16 : 1][4], ql[kQRegs ? D / 16 : 1][4];
  if constexpr (kQRegs) {
    load_q_fragments<D, true>(a, r, t, qh, ql);
  } else {
    // Q, scaled, split and stored once as core matrices: thread i of the group takes row i % 8
    // of core matrix i / 8 (dims 8p.. of rows 8c.., p = core / 8, c = core % 8), so consecutive
    // threads write consecutive 16 bytes and read a row's 32 bytes each.
    const int32_t* seq = a.sequences + 4 * tiles[2 * blockIdx.x];
    const int64_t seq_end = seq[0] + seq[1], tile_first = tiles[2 * blockIdx.x + 1];
    const int thread = static_cast<int>(threadIdx.x % 128);
    for (int i = thread; i < kKeyTile * D / 8; i += 128) {
      const int core = i / 8, piece = core / (kKeyTile / 8);
      const int row = (core % (kKeyTile / 8)) * 8 + i % 8;
      const int64_t token = tile_first + row;
      float x[8] = {};
      if (token < seq_end) {
        const float4* q =
            reinterpret_cast<const float4*>(a.q + (token * a.heads + r.head) * D + piece * 8);
        const float4 x0 = q[0], x1 = q[1];
        const float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = v[e] * r.q_scale;
      }
      uint4 high, low;
      split2(x[0], x[1], high.x, low.x);
      split2(x[2], x[3], high.y, low.y);
      split2(x[4], x[5], high.z, low.z);
      split2(x[6], x[7], high.w, low.w);
      const uint32_t at = static_cast<uint32_t>(core) * kCoreBytes + (i % 8) * 16;
      *reinterpret_cast<uint4*>(ws_shared + (q_high - base) + at) = high;
      *reinterpret_cast<uint4*>(ws_shared + (q_low - base) + at) = low;
    }
    fence_proxy_async_shared();  // the stores, for the tensor cores' reads
    named_barrier_sync(1 + math_group, 128);
  }

  auto k_tile = [&](int stage) { return base + L::kK + stage * L::kTile; };
  auto v_tile = [&](int stage) { return base + L::kV + stage * L::kTile; };
  // Stage `stage`'s key tile has landed (its copy warp's arrivals), and this thread's view of
  // it is the tensor cores' (the copies went through the generic proxy).
  auto wait_full = [&](Barrier kind, int j) {
    mbarrier_wait(barrier(kind, j % kStages), (j / kStages) & 1);
    fence_proxy_async_shared();
  };
  auto free_stage = [&](Barrier kind, int j) {
    if (lane == 0) mbarrier_arrive(barrier(kind, j % kStages));
  };

  // S = Q K^T of the tile in `stage` into s (64 queries x 64 keys, D / 16 k steps), issued.
  float s[kKeyTile / 2];
  auto issue_scores = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t k_step = 2 * kk * kPieceStride;
      const uint64_t b = wgmma_descriptor(k_tile(stage) + k_step, kPieceStride, kGroupStride);
      if constexpr (kQRegs) {
        wgmma_m64n64k16<0>(s, qh[kk], b, kk > 0);
        wgmma_m64n64k16<0>(s, ql[kk], b, true);
      } else {
        wgmma_m64n64k16_ss<0>(s, wgmma_descriptor(q_high + k_step, kPieceStride, kGroupStride), b,
                              kk > 0);
        wgmma_m64n64k16_ss<0>(s, wgmma_descriptor(q_low + k_step, kPieceStride, kGroupStride), b,
                              true);
      }
    }
  };
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2];
  auto softmax = [&](int64_t k0) { online_softmax<kKeyTile>(r, k0, t, s, m, l, corr); };

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  const int64_t k_first = r.keys_begin / kKeyTile * kKeyTile;
  const int tile_count = static_cast<int>((r.keys_end - k_first + kKeyTile - 1) / kKeyTile);
  wait_full(kFullK, 0);
  wgmma_fence();
  issue_scores(0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_registers(s);
  free_stage(kEmptyK, 0);
  softmax(k_first);
  for (int j = 0; j < tile_count; ++j) {
    const int64_t k0 = k_first + static_cast<int64_t>(j) * kKeyTile;
    const bool has_next = j + 1 < tile_count;
    // P(j): the probabilities of keys 16ks.. are the A fragment of k step ks (score groups 2ks
    // and 2ks + 1), split into f16 halves.
    uint32_t ph[kKeyTile / 16][4], pl[kSplitP ? kKeyTile / 16 : 1][4];
#pragma unroll
    for (int ks = 0; ks < kKeyTile / 16; ++ks) {
      const float* s0 = s + 8 * ks;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (kSplitP) {
          split2(s0[2 * i], s0[2 * i + 1], ph[ks][i], pl[ks][i]);
        } else {
          ph[ks][i] = pack_half2(__float2half_rn(s0[2 * i]), __float2half_rn(s0[2 * i + 1]));
        }
      }
    }
    if (has_next) wait_full(kFullK, j + 1);
    wgmma_fence_registers(o);
    wgmma_fence();
    // (Issued after the last tile too, on the stage the copies no longer touch, its result
    // unused: a product issued on one path only makes ptxas serialize every product.)
    issue_scores((j + 1) % kStages);
    wgmma_commit();
    wait_full(kFullV, j);
    wgmma_fence();  // (P's fragments may be computed past the first fence)
#pragma unroll
    for (int ks = 0; ks < kKeyTile / 16; ++ks) {
      const uint64_t desc =
          wgmma_descriptor(v_tile(j % kStages) + 2 * ks * kGroupStride, kGroupStride, kPieceStride);
      if constexpr (D == 128) {
        wgmma_m64n128k16<1>(o, ph[ks], desc, true);
        if constexpr (kSplitP) wgmma_m64n128k16<1>(o, pl[ks], desc, true);
      } else {
        wgmma_m64n64k16<1>(o, ph[ks], desc, true);
        if constexpr (kSplitP) wgmma_m64n64k16<1>(o, pl[ks], desc, true);
      }
    }
    wgmma_commit();
    wgmma_wait<1>();  // the scores of tile j + 1 (P(j) V(j) may still run)
    wgmma_fence_registers(s);
    if (has_next) {
      free_stage(kEmptyK, j + 1);
      softmax(k0 + kKeyTile);
    }
    wgmma_wait<0>();
    wgmma_fence_registers(o);
    wgmma_fence_registers(ph);  // read by the products until the wait: kept alive past it
    wgmma_fence_registers(pl);
    free_stage(kEmptyV, j);
    if (has_next && __any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= corr[(i >> 1) & 1];
    }
  }

  store_prefill_rows<D>(a, r, t, o, l);
}

template <int D, bool kSplitP, bool kQRegs = false>
cudaError_t launch(dim3 grid, cudaStream_t stream, const AttentionLaunch& a, const int32_t* tiles) {
  auto* kernel = prefill_attention_ws_kernel<D, kSplitP, kQRegs>;
  constexpr size_t bytes = SharedLayout<D, kQRegs>::kBytes;
  const cudaError_t raised = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (raised != cudaSuccess) return raised;
  kernel<<<grid, threads_for<kQRegs>(), bytes, stream>>>(a, tiles);
  return cudaGetLastError();
}

}  // namespace

bool prefill_attention_ws_supported(const AttentionLaunch& a) {
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
  return hopper && prefill_attention_supported(a) && (a.heads / a.kv_heads) % 2 == 0;
}

cudaError_t prefill_attention_ws(const AttentionLaunch& a, const int32_t* tiles, int64_t tile_count,
                                 cudaStream_t stream, bool split_p, bool q_in_registers) {
  if (tile_count == 0) return cudaSuccess;
  if (!prefill_attention_ws_supported(a) || a.heads / 2 > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tile_count), static_cast<unsigned>(a.heads / 2));
  if (a.head_dim == 64) {
    return split_p ? launch<64, true>(grid, stream, a, tiles)
                   : launch<64, false>(grid, stream, a, tiles);
  }
  if (q_in_registers && split_p) {
    return launch<128, true, true>(grid, stream, a, tiles);
  }
  return split_p ? launch<128, true>(grid, stream, a, tiles)
                 : launch<128, false>(grid, stream, a, tiles);
}

}  // namespace tern::cuda

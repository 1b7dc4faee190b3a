// attention_prefill: causal attention of many new tokens (prefill) over the paged F16 KV cache on
// the tensor cores, flash-attention style: a block of 4 warps takes 64 query tokens of one
// sequence and one query head; each warp 16 of them. Key tiles of 32 (K and V rows gathered
// through the block table into shared memory) give S = Q K^T with mma.sync m16n8k16 (f16 in,
// f32 accumulate), an online softmax in registers (the scale, soft-capping, the causal limit and
// the sliding window as the CUDA-core kernels apply them), then O += P V the same way.
// Precision: the F32 query and probabilities are split into two f16 halves (x = hi + lo, ~22
// significant bits) and multiplied by the exact f16 keys and values with two mmas each, so the
// result keeps float precision (the CPU and the CUDA-core decode kernels compute in float); f16
// alone would round the scores by ~1e-3.
// Why: the CUDA-core decode kernels take prefill a query token at a time, every key read again for
// each of them (from L2): prefill of 4,096 tokens ran at 0.49x llama.cpp (2026-12-04), the
// attention being most of the gap.
// Reads: q once; each key and value row once per 64 query tokens of each query head (GQA heads
// read their KV head's rows again, from L2). Writes out [tokens, heads, head_dim].
// Measured (2026-12-05, H100, Qwen3-8B Q4_K_M, `tern bench -p 512 -p 4096`, A B A B): prefill of
// 4,096 tokens 4,636 / 4,595 -> 12,189 / 12,627 tok/s with it (llama.cpp 9,877: 1.28x), 512
// tokens 10,234 / 10,515 -> 11,573 / 13,603. Its roofline fraction is not measured apart (the
// split-f16 products double the mma work: ~10 TFLOP for the 36 layers of a 4,096 prefill).
// After 16K tokens of context it is the bottleneck of prefill (2026-12-05, H100, Qwen3-8B, `tern
// bench -d 16384`: 0.35-0.63x llama.cpp; ~80 of the ~120 ms of a 512-token prefill, judged from
// the prefill rate without context, i.e. ~2.3 ms a layer for 512 x 16,896 scores of 32 heads:
// ~124 TFLOP/s of f16 products counting the split's doubling, ~13% of the H100's dense f16
// peak): a block loads each key tile, waits, then computes.
// The cp.async tiles below (double buffering, ldmatrix fragments) are the kernel since
// it was measured (2026-12-05, H100, tern-cuda-bench --attention, 512 tokens of 32/8 heads of 128
// after 16K keys: 2.39 -> 1.53 ms, 58 -> 91 TFLOP/s counting each product once (the split
// doubles the mma work: ~182 TFLOP/s issued, ~18% of the dense f16 peak); `tern bench -d 1024
// -d 16384 -p 512 -p 4096 -n 1`, Q4_K_M:
// prefill after 16K tokens 4,439 / 4,208 -> 6,170 / 5,991 tok/s, after 1K 14,172 / 12,277 ->
// 14,875 / 14,326).
// Since then: scores in log2 units (scale and log2 e folded into Q), no mask arithmetic on key
// tiles every row of the block sees whole, no rescale of O when a tile moves no row's maximum
// (predicted 1.53 -> ~1.3 ms; measured 2026-12-05 on an H200: 1.93 ms, the plain tiles slower by
// the same factor, so no gain seen). Nsight Compute on that build (H200, a 2,048-token chunk):
// issue slots 25% busy, tensor pipe 21%, two warps a scheduler, no eligible warp 71% of cycles,
// ~930 instructions a warp a key tile of which 128 mmas: latency- and instruction-bound, not
// mma-bound (single-f16 products gained only 1.12x). The SASS
// (cuobjdump from PyPI's nvidia-cuda-cuobjdump) showed where the rest went: per-score tests of
// "whole tile" and soft-capping kept as 16 predicate bits in a register, and a tile copy loop with
// a division and 64-bit products per 16-byte piece (~330 instructions). Now: one uniform branch
// skips the per-score mask and cap code on whole uncapped tiles, the mask compares in 32 bits,
// exp2 by ex2.approx.ftz, and the copies as shuffles of one lookup a lane with fixed shared
// offsets: ~500 instructions a whole tile (128 mmas), the main loop 2,485 -> 1,124 static
// instructions. Measured (2026-12-06, H200, `gpu_run.sh attnab`: this build against the one
// before, A B A B): 512 tokens after 16K keys 1.937 / 1.930 -> 0.882 / 0.886 ms (2.19x; predicted
// ~1.4 ms), after 1K keys 0.184 -> 0.091 ms; 158 TFLOP/s counting each product once, ~316 issued
// (~32% of the dense f16 peak). With the low products' own chains (kLowChain): 0.844 ms.
// Taken for F16 caches with heads of 64 or 128 and no token trees (TERN_CUDA_ATTN_PREFILL=0: the
// CUDA-core kernels) where attention_prefill_ws.cu cannot run (odd GQA groups, GPUs past Hopper;
// that kernel is 1.42x faster after 16K keys on an H100); cuda_device_test's attention cases and
// cuda_forward_test run through it with TERN_CUDA_ATTN_PREFILL=2.
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_prefill_rows.cuh"
#include "backend/cuda/f16_fragments.cuh"
#include "backend/cuda/kernels.h"

namespace tern::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kQueryTile = 16 * kWarps;  // query tokens a block
static_assert(kQueryTile == kPrefillQueryTile, "the rows prefill_rows gives a block");
constexpr int kKeyTile = 32;

// The key tiles are copied with cp.async into two buffers, the next tile's copies in flight
// while the block multiplies the current one, and the K and V fragments come from shared memory
// through ldmatrix / ldmatrix.trans (one instruction for four 8x8 pieces instead of 16 two-byte
// loads). (The plain tiles before it, loads then a wait then the products, measured slower as
// above.)
// Q and P are two f16 halves each (float precision, twice the mma work). With one f16 each, as
// llama.cpp's flash attention does, the numpy mirror put the output 2.1-2.5e-4 rel rms from
// float64 (the split one 1-2e-7; the attention cases ask 1e-4 of the CPU) for 1.12x the speed
// (2026-12-05, H200, 512 tokens after 16K keys; predicted ~1.6x: the kernel is not bound by its
// mma work); splitting Q alone gave 1.08x. Neither was worth its precision.
// The split's low-half products of the scores accumulate apart from the high ones (8 independent
// mma chains of 8 a tile instead of 4 of 16; Nsight Compute put a third of the stalls on such
// fixed-latency dependencies), added once at the end: the same products, the sum in another
// order. Measured (2026-12-06, H200, tern-cuda-bench --attention, 512 tokens after 16K keys, A B
// A B): 0.881 / 0.882 -> 0.844 / 0.844 ms (1.04x).
// (The three variants, plain tiles, single f16, one chain, were TERN_CUDA_ATTN_PREFILL=1, 3 and 7
// until 2026-12-07; in git history.)
// kStages: key tiles in flight, the one in use included. Two: four measured slower (same call:
// 0.942 / 0.942 ms), so the warps do not wait on the tile copies.
// Tried and removed (2026-12-06, H100, tern-cuda-bench --attention, A B A B): the Q fragments in
// shared memory (16-byte loads a k step, k steps outer) for 166 registers and three blocks a
// multiprocessor instead of two: 512 tokens after 16K keys 0.869 / 0.871 -> 0.978 / 0.979 ms,
// after 1K 0.090 -> 0.099 ms. More warps did not pay for the 16 extra shared loads a tile.
// Shared memory (dynamic, prefill_shared_bytes): kStages K tiles, then kStages V tiles.
constexpr int kStages = 2;
static_assert(kStages >= 2, "a tile in flight while one is used");
template <int D>
constexpr size_t prefill_shared_bytes() {
  return size_t{2} * kStages * kKeyTile * (D + 8) * sizeof(__half);
}
template <int D>
__global__ void __launch_bounds__(32 * kWarps)
    prefill_attention_kernel(AttentionLaunch a, const int32_t* tiles) {
  // Rows padded by 8 halves: a B fragment's 8 rows x 4 words fall in 32 different banks, and
  // the 8 rows an ldmatrix reads in 8 different groups of 4.
  constexpr int kStride = D + 8;
  constexpr int kBuffers = kStages;
  extern __shared__ __align__(16) unsigned char prefill_shared[];
  __half* const sk_base = reinterpret_cast<__half*>(prefill_shared);
  __half* const sv_base = sk_base + kBuffers * kKeyTile * kStride;
  auto sk_all = [&](int b) { return sk_base + b * kKeyTile * kStride; };
  auto sv_all = [&](int b) { return sv_base + b * kKeyTile * kStride; };
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane >> 2, t = lane & 3;
  const PrefillRows r = prefill_rows(a, tiles, warp, g);
  const int64_t kvh = r.kvh, keys_end = r.keys_end;
  const int32_t* table = r.table;
  // Q fragments (f16 high and low halves): [k step][a0..a3].
  uint32_t qh[D / 16][4], ql[D / 16][4];
  load_q_fragments<D, true>(a, r, t, qh, ql);

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const auto* kc = static_cast<const __half*>(a.k_cache);
  const auto* vc = static_cast<const __half*>(a.v_cache);
  constexpr int kPieces = D / 8;  // 16-byte pieces a row
  // The copies of the tile at k0 into buffer `buffer` (zeros past the end), one group.
  // One block-table lookup a lane (lane l finds key k0 + l's row; a tile is 32 keys), the rows
  // then taken by shuffle. A thread copies the same 16-byte piece of kKeyTile / kRowsAPass rows
  // kRowsAPass apart, so its shared-memory addresses are fixed offsets from one base: the loop
  // is shuffles and copies (it was ~330 instructions a tile with a division and 64-bit products
  // per piece; lookups and address arithmetic cost more issue slots than the copies).
  static_assert(kKeyTile == 32, "one key a lane");
  constexpr int kRowsAPass = 32 * kWarps / kPieces;
  static_assert(kKeyTile % kRowsAPass == 0, "whole passes");
  const int piece = static_cast<int>(threadIdx.x) % kPieces;
  const int row0 = static_cast<int>(threadIdx.x) / kPieces;
  const uint32_t k_piece = shared_address(sk_all(0) + row0 * kStride + piece * 8);
  const uint32_t v_piece = shared_address(sv_all(0) + row0 * kStride + piece * 8);
  constexpr uint32_t kBufferBytes = kKeyTile * kStride * sizeof(__half);
  constexpr uint32_t kPassBytes = kRowsAPass * kStride * sizeof(__half);
  auto issue_tile = [&](int64_t k0, int buffer) {
    const int64_t lane_key = k0 + lane;
    const long long lane_row =
        lane_key < keys_end ? (key_slot(table, lane_key, a.block_size) * a.kv_heads + kvh) * D : 0;
    const int64_t left = keys_end - k0;
    const int keys_left = left < kKeyTile ? static_cast<int>(left) : kKeyTile;
#pragma unroll
    for (int i = 0; i < kKeyTile / kRowsAPass; ++i) {
      const int r = row0 + i * kRowsAPass;
      const int64_t at = __shfl_sync(0xffffffffu, lane_row, r) + piece * 8;  // 0 + piece outside
      const uint32_t offset = buffer * kBufferBytes + i * kPassBytes;
      cp_async16(k_piece + offset, kc + at, r < keys_left);
      cp_async16(v_piece + offset, vc + at, r < keys_left);
    }
    cp_async_commit();
  };
  const int64_t k_first = r.keys_begin / kKeyTile * kKeyTile;
#pragma unroll
  for (int b = 0; b < kBuffers - 1; ++b) {
    if (k_first + b * kKeyTile < keys_end) {
      issue_tile(k_first + b * kKeyTile, b);
    } else {
      cp_async_commit();  // an empty group: the waits below count the same
    }
  }
  int tile = 0;
  for (int64_t k0 = k_first; k0 < keys_end; k0 += kKeyTile, ++tile) {
    const int buffer = tile % kBuffers;
    const __half* sk = sk_all(buffer);
    const __half* sv = sv_all(buffer);
    // The tile kBuffers - 1 ahead goes into the buffer the previous iteration used (every
    // thread is past it: the barrier at the loop's end).
    const int64_t ahead = k0 + (kBuffers - 1) * kKeyTile;
    if (ahead < keys_end) {
      issue_tile(ahead, (tile + kBuffers - 1) % kBuffers);
    } else {
      cp_async_commit();  // an empty group: the wait below counts the same
    }
    cp_async_wait<kBuffers - 1>();  // this tile's group is complete
    __syncthreads();

    // S = Q K^T for the tile's 4 fragments of 8 keys.
    float s[kKeyTile / 8][4];
#pragma unroll
    for (int j = 0; j < kKeyTile / 8; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) s[j][c] = 0.0f;
      // Keys 8j.. (rows), dims 16kk.. and 16kk + 8.. for two k steps: b0, b1 of kk, kk + 1.
      const uint32_t k_address =
          shared_address(sk + (8 * j + (lane & 7)) * kStride + 8 * (lane >> 3));
      float s_low[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, k_address + 32 * kk);
        mma_f16(s[j], qh[kk], b[0], b[1]);
        mma_f16(s_low, ql[kk], b[0], b[1]);
        mma_f16(s[j], qh[kk + 1], b[2], b[3]);
        mma_f16(s_low, ql[kk + 1], b[2], b[3]);
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) s[j][c] += s_low[c];
    }
    float corr[2];
    online_softmax<kKeyTile>(r, k0, t, &s[0][0], m, l, corr);
    // (Once the maxima settle, most tiles change no row's maximum: the warp skips the rescale.)
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        o[d][0] *= corr[0], o[d][1] *= corr[0], o[d][2] *= corr[1], o[d][3] *= corr[1];
      }
    }
    // O += P V: the score fragments of keys 16 ks.. and 16 ks + 8.. are the A fragment of k step
    // ks (split into f16 halves); V's B fragments gathered from two rows each.
#pragma unroll
    for (int ks = 0; ks < kKeyTile / 16; ++ks) {
      uint32_t ph[4], pl[4];
      split2(s[2 * ks][0], s[2 * ks][1], ph[0], pl[0]);
      split2(s[2 * ks][2], s[2 * ks][3], ph[1], pl[1]);
      split2(s[2 * ks + 1][0], s[2 * ks + 1][1], ph[2], pl[2]);
      split2(s[2 * ks + 1][2], s[2 * ks + 1][3], ph[3], pl[3]);
      // Transposed pieces: keys 16ks.. and 16ks + 8.. (rows) of dims 8d.. and 8(d + 1)..:
      // b0, b1 of d, then of d + 1.
      const uint32_t v_address = shared_address(
          sv + (16 * ks + (lane & 7) + 8 * ((lane >> 3) & 1)) * kStride + 8 * (lane >> 4));
#pragma unroll
      for (int d = 0; d < D / 8; d += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_address + 16 * d);
        mma_f16(o[d], ph, b[0], b[1]);
        mma_f16(o[d], pl, b[0], b[1]);
        mma_f16(o[d + 1], ph, b[2], b[3]);
        mma_f16(o[d + 1], pl, b[2], b[3]);
      }
    }
    __syncthreads();
  }

  store_prefill_rows<D>(a, r, t, &o[0][0], l);
}

// Launches the kernel with its dynamic shared memory (raising the kernel's limit past the
// default 48 KB where it needs it: on every launch, since the limit belongs to the current
// device's context and a host call costs nothing next to the kernel).
template <int D>
cudaError_t launch_prefill(dim3 grid, unsigned threads, cudaStream_t stream,
                           const AttentionLaunch& a, const int32_t* tiles) {
  auto* kernel = prefill_attention_kernel<D>;
  constexpr size_t bytes = prefill_shared_bytes<D>();
  if constexpr (bytes > 48 * 1024) {
    const cudaError_t raised = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (raised != cudaSuccess) return raised;
  }
  kernel<<<grid, threads, bytes, stream>>>(a, tiles);
  return cudaGetLastError();
}

}  // namespace

bool prefill_attention_supported(const AttentionLaunch& a) {
  return a.kv_type == TensorType::F16 && (a.head_dim == 64 || a.head_dim == 128) &&
         a.ancestors == nullptr && a.kv_heads > 0 && a.heads % a.kv_heads == 0;
}

cudaError_t prefill_attention(const AttentionLaunch& a, const int32_t* tiles, int64_t tile_count,
                              cudaStream_t stream) {
  if (tile_count == 0) return cudaSuccess;
  if (!prefill_attention_supported(a) || a.heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tile_count), static_cast<unsigned>(a.heads));
  // TERN_CUDA_ATTN_PREFILL: unset the warp-specialized wgmma kernel with Q in registers
  // (attention_prefill_ws.cu, where it runs: Hopper, even GQA groups; else this file's), 12 that
  // with Q in shared memory, 13 that with single-f16 P, 2 this file's kernel (A/B runs; 0 is the
  // CUDA-core kernels, cuda_device_attention.cpp).
  static const int variant = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_PREFILL");
    if (v == nullptr) return 15;
    for (int known : {2, 12, 13}) {
      if (std::strcmp(v, std::to_string(known).c_str()) == 0) return known;
    }
    return 15;
  }();
  if (variant >= 12 && prefill_attention_ws_supported(a)) {
    return prefill_attention_ws(a, tiles, tile_count, stream, variant != 13, variant == 15);
  }
  const unsigned threads = 32 * kWarps;
  if (a.head_dim == 64) return launch_prefill<64>(grid, threads, stream, a, tiles);
  return launch_prefill<128>(grid, threads, stream, a, tiles);
}

}  // namespace tern::cuda

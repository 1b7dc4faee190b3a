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
// Why a prefill kernel: the CUDA-core decode kernels take prefill a query token at a time, every
// key read again for each of them (from L2).
// The inner loop is kept short on purpose: one uniform branch skips the per-score mask and cap
// code on whole uncapped tiles, the mask compares in 32 bits, exp2 by ex2.approx.ftz, scores in
// log2 units (scale and log2 e folded into Q), no rescale of O when a tile moves no row's maximum,
// and the tile copies as shuffles of one lookup a lane with fixed shared offsets (the loop was
// latency- and instruction-bound, not mma-bound).
// Reads: q once; each key and value row once per 64 query tokens of each query head (GQA heads
// read their KV head's rows again, from L2). Writes out [tokens, heads, head_dim]. Measured:
// ~32% of the dense f16 peak in issued products (~16% counting each product once), 512 tokens
// after 16K keys (H200, tern-cuda-bench --attention).
// Taken for F16 caches with heads of 64 or 128 and no token trees (TERN_CUDA_ATTN_PREFILL=0: the
// CUDA-core kernels) where attention_prefill_ws.cu cannot run (odd GQA groups, GPUs past Hopper;
// that kernel is faster on an H100); cuda_device_test's attention cases and cuda_forward_test run
// through it with TERN_CUDA_ATTN_PREFILL=2.
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
// loads).
// Q and P are two f16 halves each (float precision, twice the mma work). One f16 each, as
// llama.cpp's flash attention does, puts the output ~2e-4 rel rms from float64 (the attention
// cases ask 1e-4 of the CPU) and measured only 1.12x faster: not worth its precision.
// The split's low-half products of the scores accumulate apart from the high ones (8 independent
// mma chains of 8 a tile instead of 4 of 16: a third of the stalls were such fixed-latency
// dependencies), added once at the end: the same products, the sum in another order.
// kStages: key tiles in flight, the one in use included. Two: four measured slower, so the warps
// do not wait on the tile copies. (Q fragments in shared memory for three blocks an SM measured
// slower too: more warps did not pay for the 16 extra shared loads a tile.)
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

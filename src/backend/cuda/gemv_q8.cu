// gemv_q8: decode matrix-vector products y[j, :] = W . x[j, :] (j < n <= 8) for Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights against activations quantized to 8-bit blocks of 32
// (quantize_q8.cu): the weight quants are unpacked into bytes and multiplied with __dp4a, four
// products per instruction, then scaled once per 32 (or 16) elements.
// One warp per weight row, four rows per block; each lane takes "tasks" of 32 or 64 elements.
// This file holds the kernels and their launch rules; the per-type decoders are apart:
// gemv_q8_tasks.cuh (v2, a warp a row), gemv_q8_pairs.cuh (v3 row pairs, one x or several), and
// the loads and dots both use, gemv_q8_words.cuh.
// Reads: the weight matrix once (m * row_bytes) plus n * (k + k/8) activation bytes per row (from
// L1/L2). Writes: n * m floats. Measured (n = 1, 12288x4096, alone, tern-cuda-bench): Q8_0 97%,
// Q4_K 64%, Q6_K 61% of the copy bandwidth (H100); inside the Qwen3-8B Q4_K_M decode graph
// gate/up 76%, q/k/v 71%, o + down 67% (H100).
// The row pairs (two weight rows share each activation load; the default for n = 1 Q4_K/Q6_K/
// Q8_0, TERN_CUDA_GEMV_PAIR=0 keeps v2) are bound by the bytes they keep in flight; the warps a
// pair gets follow the shape (pair_warps). The residual add + norm after the o projection and
// down stay a launch of their own (norm.cu): done by the product's last block they put ~10 us on
// its critical path (bench/README.md).
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/cuda/gated_activation.cuh"
#include "backend/cuda/gemv_q8_pairs.cuh"
#include "backend/cuda/gemv_q8_tasks.cuh"
#include "backend/cuda/gemv_q8_words.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quantize_q8.cuh"

namespace tern::cuda {
namespace {

using namespace q8dot;  // NOLINT(google-build-using-namespace): this file's own parts

constexpr int kRowsPerBlock = 4;

// acc[j] += the lane's share of row `wr` . x[j] for j < n.
template <TensorType T, int N>
__device__ __forceinline__ void row_dot(const uint8_t* wr, const Acts& a, int n, int lane,
                                        float (&acc)[N]) {
  const int64_t tasks = a.k / Task<T>::kElems;
#pragma unroll 2
  for (int64_t t = lane; t < tasks; t += 32) Task<T>::template dot<N>(wr, t, a, n, acc);
}

__device__ __forceinline__ float warp_total(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <TensorType T, int N>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    gemv_q8_kernel(const uint8_t* w, int64_t m, size_t row_bytes, Acts a, int n, float* y) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= m) return;
  const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
  prefetch_l2(wr, row_bytes, lane);  // weights: no kernel writes them, so before the wait
  pdl_launch_dependents();
  pdl_wait();
  float acc[N];
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = 0.0f;
  row_dot<T, N>(wr, a, n, lane, acc);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float v = warp_total(acc[j]);
    if (lane == 0 && j < n) y[j * m + row] = v;
  }
}

// One row of a matrix of any supported type (the type is uniform over a block), one x (n = 1).
__device__ __forceinline__ float row_dot_any(TensorType type, const uint8_t* wr, const Acts& a,
                                             int lane) {
  float acc[1] = {0.0f};
  switch (type) {
    case TensorType::Q4_0:
      row_dot<TensorType::Q4_0, 1>(wr, a, 1, lane, acc);
      break;
    case TensorType::Q4_1:
      row_dot<TensorType::Q4_1, 1>(wr, a, 1, lane, acc);
      break;
    case TensorType::Q5_0:
      row_dot<TensorType::Q5_0, 1>(wr, a, 1, lane, acc);
      break;
    case TensorType::Q5_1:
      row_dot<TensorType::Q5_1, 1>(wr, a, 1, lane, acc);
      break;
    case TensorType::Q8_0:
      row_dot<TensorType::Q8_0, 1>(wr, a, 1, lane, acc);
      break;
    case TensorType::Q4_K:
      row_dot<TensorType::Q4_K, 1>(wr, a, 1, lane, acc);
      break;
    case TensorType::Q5_K:
      row_dot<TensorType::Q5_K, 1>(wr, a, 1, lane, acc);
      break;
    case TensorType::Q6_K:
      row_dot<TensorType::Q6_K, 1>(wr, a, 1, lane, acc);
      break;
    default:
      break;
  }
  return warp_total(acc[0]);
}

// Several matrices against the same x (n = 1) in one launch: blocks [ends[i-1], ends[i]) take
// matrix i's rows.
__global__ void __launch_bounds__(32 * kRowsPerBlock) gemv_q8_multi_kernel(GemvQ8Multi g, Acts a) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t b = blockIdx.x;
  int i = 0;
  while (i + 1 < g.count && b >= g.block_ends[i]) ++i;
  const GemvQ8Matrix& mat = g.mats[i];
  const int64_t row = (b - (i == 0 ? 0 : g.block_ends[i - 1])) * kRowsPerBlock + warp;
  if (row >= mat.m) return;
  prefetch_l2(static_cast<const uint8_t*>(mat.w) + static_cast<size_t>(row) * mat.row_bytes,
              mat.row_bytes, lane);
  pdl_launch_dependents();
  pdl_wait();
  const float v = row_dot_any(
      mat.type, static_cast<const uint8_t*>(mat.w) + static_cast<size_t>(row) * mat.row_bytes, a,
      lane);
  if (lane == 0) mat.y[row] = v;
}

// Gate and up rows r of one x (n = 1): writes gate[r], up[r] and out[r] = act(gate[r]) * up[r]
// (SiLU, or GELU with the tanh approximation), as the separate ops would.
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    gemv_q8_glu_kernel(GemvQ8Matrix gate, GemvQ8Matrix up, Acts a, bool gelu, float* out) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= gate.m) return;
  prefetch_l2(static_cast<const uint8_t*>(gate.w) + static_cast<size_t>(row) * gate.row_bytes,
              gate.row_bytes, lane);
  prefetch_l2(static_cast<const uint8_t*>(up.w) + static_cast<size_t>(row) * up.row_bytes,
              up.row_bytes, lane);
  pdl_launch_dependents();
  pdl_wait();
  const float g = row_dot_any(
      gate.type, static_cast<const uint8_t*>(gate.w) + static_cast<size_t>(row) * gate.row_bytes, a,
      lane);
  const float u = row_dot_any(
      up.type, static_cast<const uint8_t*>(up.w) + static_cast<size_t>(row) * up.row_bytes, a,
      lane);
  if (lane == 0) {
    gate.y[row] = g;
    up.y[row] = u;
    out[row] = gated(g, u, gelu);
  }
}

// ---- v3: row pairs (n = 1, Q4_K, Q6_K and Q8_0 with k % 256 == 0). Two weight rows share every
// activation load and the four warps of a block split the row's superblocks between them (reduced
// through shared memory), so a block covers two rows and small matrices still give m / 2 blocks. A
// lane takes 32 weights of a superblock per row (8 lanes a superblock, 1024 weights a warp per
// step) with 16-byte loads where the layout allows (Q4_K: the superblock's 16-byte header and 16
// quant bytes; Q6_K: 2-byte aligned blocks, aligned 32-bit loads funnel-shifted).

constexpr int kPairWarps = 4;

bool pair_type(TensorType t, int64_t k) {
  return t == TensorType::Q4_K || t == TensorType::Q6_K || (t == TensorType::Q8_0 && k % 256 == 0);
}
// TERN_CUDA_GEMV_PAIR: 0 = v2 (a warp a row); unset or 1 = row pairs with the warps a pair gets
// chosen from the shape (pair_warps); w1, w2, w4 = that many warps a pair always.
int pair_mode() {
  static const int mode = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_PAIR");
    if (v == nullptr) return 1;
    if (std::strcmp(v, "0") == 0) return 0;
    if (std::strcmp(v, "w1") == 0) return 11;
    if (std::strcmp(v, "w2") == 0) return 12;
    if (std::strcmp(v, "w4") == 0) return 14;
    return 1;
  }();
  return mode;
}
// The single-matrix and q/k/v pairs with one warp a pair compile at 128 registers (4 blocks a
// multiprocessor), as the gate/up pair does (gemv_pair_glu_kernel's comment: ptxas then issues
// the unrolled loop's loads first); with them one warp a pair is the default wherever pair_warps
// gives it (o projection and down, the q/k/v launch): -1.6% a decode step. Each kernel alone
// reads differently (cold L2, no PDL), so the step time is the judge.
// TERN_CUDA_GEMV_PAIR_REGS=0 keeps ptxas's choice (and the warps pair_warps gave before).
bool pair_wide_registers() {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_PAIR_REGS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Warps a row pair gets: all four of a block when the pairs are few (the warps split k), one
// when there are enough pairs to give every multiprocessor 32 warps (then each warp streams its
// two rows alone, 4 steps of 1024 weights in flight). Q8_0 keeps four warps a pair: its
// funnel-shifted 34-byte blocks need twice the registers, and one warp a pair measured slower.
// Row pairs that give every multiprocessor 32 warps at one warp a pair.
int64_t pairs_for_32_warps() {
  static const int64_t pairs = [] {
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      sms = 132;
    }
    return static_cast<int64_t>(sms) * 32;
  }();
  return pairs;
}
// The 128-register one-warp kernels for a launch of `pairs` (n = 1, not the gate/up pair): from
// a quarter of pairs_for_32_warps (half a wave at 4 blocks a multiprocessor) up to it; more
// (the output head's 75,968 pairs, ~18 waves) keep ptxas's registers (Nsight Compute: Q6_K
// output head 176.4 us at 72 registers, 188.8 at 128).
bool pair_wide(int64_t pairs) {
  return pair_wide_registers() && pairs >= pairs_for_32_warps() / 4 && pairs < pairs_for_32_warps();
}
// Whether a one-warp launch of `pairs` takes the 128-register kernels: pair_wide's shapes, or
// every shape when TERN_CUDA_GEMV_PAIR=w1 forces one warp a pair (the tests' small shapes).
bool pair_wide_kernel(int64_t pairs) {
  return pair_wide(pairs) || (pair_mode() == 11 && pair_wide_registers());
}
// wide: a launch that may take pair_wide's kernels.
int pair_warps(int64_t pairs, TensorType type, bool wide = false) {
  const int mode = pair_mode();
  if (mode > 10) return mode - 10;
  if (type == TensorType::Q8_0) return kPairWarps;
  const int64_t target = pairs_for_32_warps();
  if (wide && pair_wide(pairs)) return 1;
  return pairs >= target ? 1 : 2 * pairs >= target ? 2 : kPairWarps;
}

// t0, t1 = rows r0 and r1 . x, summed by the W warps of the pair (W = 1: the calling warp alone;
// else through shared memory, so every thread of the block must call it).
template <TensorType T, int W, class Dot = Pair<T>>
__device__ __forceinline__ void pair_rows(const uint8_t* r0, const uint8_t* r1, const Acts& a,
                                          float& t0, float& t1) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int sw = warp % W;
  const int64_t sbs = a.k / 256;
  float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll(W == 1 ? 4 : 2)
  for (int64_t sb = (sw * 32 + lane) / 8; sb < sbs; sb += W * 4)
    Dot::dot(r0, r1, sb, a, lane, acc0, acc1);
  acc0 = warp_total(acc0);
  acc1 = warp_total(acc1);
  if constexpr (W > 1) {
    __shared__ float part[2][kPairWarps];
    if (lane == 0) {
      part[0][warp] = acc0;
      part[1][warp] = acc1;
    }
    __syncthreads();
    t0 = 0.0f, t1 = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) t0 += part[0][warp - sw + w], t1 += part[1][warp - sw + w];
  } else {
    t0 = acc0, t1 = acc1;
  }
}

// The pair a thread works on (kPairWarps / W pairs a block), and whether it writes the results.
template <int W>
__device__ __forceinline__ int64_t pair_index() {
  return static_cast<int64_t>(blockIdx.x) * (kPairWarps / W) + threadIdx.x / (32 * W);
}
template <int W>
__device__ __forceinline__ bool pair_writer() {
  return threadIdx.x % (32 * W) == 0;
}
// Starts fetching the pair's rows into L2 (the pair's first warp r0, its second (or only) r1).
template <int W>
__device__ __forceinline__ void pair_prefetch(const uint8_t* r0, const uint8_t* r1, size_t bytes) {
  const int sw = static_cast<int>(threadIdx.x / 32) % W, lane = static_cast<int>(threadIdx.x % 32);
  if (sw == 0) prefetch_l2(r0, bytes, lane);
  if (sw == (W > 1 ? 1 : 0) && r1 != r0) prefetch_l2(r1, bytes, lane);
}

// Pairs past the end (the last block of W < 4) read row 0 and write nothing: every thread
// reaches the shared-memory reduction.
template <TensorType T, int W, int kMinBlocks = 0, bool kWide = false>
__global__ void __launch_bounds__(32 * kPairWarps, kMinBlocks)
    gemv_pair_kernel(const uint8_t* w, int64_t m, size_t row_bytes, Acts a, float* y) {
  const int64_t want = pair_index<W>() * 2;
  const bool valid = want < m;
  const int64_t row0 = valid ? want : 0;
  const int64_t row1 = row0 + 1 < m ? row0 + 1 : row0;
  const uint8_t* r0 = w + static_cast<size_t>(row0) * row_bytes;
  const uint8_t* r1 = w + static_cast<size_t>(row1) * row_bytes;
  if (valid && a.prefetch) pair_prefetch<W>(r0, r1, row_bytes);
  pdl_launch_dependents();
  pdl_wait();
  float t0, t1;
  pair_rows<T, W, PairDot<T, kWide>>(r0, r1, a, t0, t1);
  if (valid && pair_writer<W>()) {
    y[row0] = t0;
    if (row1 != row0) y[row1] = t1;
  }
}

// The gate/up pair kernel's output quantization (Q8Output, when quant.qs is set): each row's
// writer counts its group of 256 rows done; the warp that counts the 256th reads the group back
// from L2 and quantizes it as quantize_q8 would, then zeroes the count for the next launch.
// Why: a quantize launch of its own a layer costs ~2.4 us of a graph's time. Off by default
// (TERN_CUDA_Q8_OUTPUT=1): it measured slower in the decode step (H100; bench/README.md).
__device__ __forceinline__ void quantize_finished_group(const Q8Output& quant, const float* out,
                                                        int64_t row) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t group = row / quant.group;
  uint32_t arrived = 0;
  if (lane == 0) {
    __threadfence();  // this lane wrote out[row]: visible before it is counted
    arrived = atomicAdd(quant.counters + group, 1u);
  }
  arrived = __shfl_sync(0xffffffffu, arrived, 0);
  if (arrived != static_cast<uint32_t>(quant.group - 1)) return;
  __threadfence();  // all the group's rows counted, so written
  if (quant.group == 32) {
    const float v = __ldcg(out + group * 32 + lane);  // from L2: other SMs wrote them
    quantize_group32_warp(v, lane, quant.qs + group * 32, quant.d + group, quant.s + group);
  } else {
    const float* src = out + group * 256 + lane * 8;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __ldcg(src + i);
    quantize_group256_warp(v, lane, quant.qs + group * 256, quant.d + group * 8,
                           quant.s + group * 8);
  }
  if (lane == 0) quant.counters[group] = 0;
}

// Gate and up row r of one x: a pair. kMinBlocks (0: ptxas's choice) bounds the registers: Q4_K
// with one warp a pair compiles to 72 registers and ptxas spreads the 4x-unrolled loop's loads
// between its products; at 4 blocks a multiprocessor (128 registers) it issues most of them
// first (sass_report.py --dump LDG): fewer warps, more bytes in flight each (the default for
// Q4_K: +1.3% decode step). TERN_CUDA_GEMV_GLU_REGS=0 takes ptxas's choice.
template <TensorType T, int W, int kMinBlocks = 0, bool kWide = false>
__global__ void __launch_bounds__(32 * kPairWarps, kMinBlocks)
    gemv_pair_glu_kernel(GemvQ8Matrix gate, GemvQ8Matrix up, Acts a, bool gelu, float* out,
                         Q8Output quant) {
  const int64_t want = pair_index<W>();
  const bool valid = want < gate.m;
  const int64_t row = valid ? want : 0;
  const uint8_t* r0 =
      static_cast<const uint8_t*>(gate.w) + static_cast<size_t>(row) * gate.row_bytes;
  const uint8_t* r1 = static_cast<const uint8_t*>(up.w) + static_cast<size_t>(row) * up.row_bytes;
  if (valid && a.prefetch) pair_prefetch<W>(r0, r1, gate.row_bytes);
  pdl_launch_dependents();
  pdl_wait();
  float g, u;
  pair_rows<T, W, PairDot<T, kWide>>(r0, r1, a, g, u);
  if (valid && pair_writer<W>()) {
    gate.y[row] = g;
    up.y[row] = u;
    out[row] = gated(g, u, gelu);
  }
  // (The writer's warp: the first of the pair's W.)
  if (quant.qs != nullptr && valid && (threadIdx.x / 32) % W == 0) {
    quantize_finished_group(quant, out, row);
  }
}

// Several matrices (each Q4_K, Q6_K or Q8_0) against one x: blocks [ends[i-1], ends[i]) take
// matrix i's row pairs (a block's pairs belong to one matrix; its type is uniform over it).
template <int W, int kMinBlocks = 0, bool kWide = false>
__global__ void __launch_bounds__(32 * kPairWarps, kMinBlocks)
    gemv_pair_multi_kernel(GemvQ8Multi g, Acts a) {
  const int64_t b = blockIdx.x;
  int i = 0;
  while (i + 1 < g.count && b >= g.block_ends[i]) ++i;
  const GemvQ8Matrix& mat = g.mats[i];
  const int64_t local =
      (b - (i == 0 ? 0 : g.block_ends[i - 1])) * (kPairWarps / W) + threadIdx.x / (32 * W);
  const bool valid = local * 2 < mat.m;
  const int64_t row0 = valid ? local * 2 : 0;
  const int64_t row1 = row0 + 1 < mat.m ? row0 + 1 : row0;
  const uint8_t* r0 =
      static_cast<const uint8_t*>(mat.w) + static_cast<size_t>(row0) * mat.row_bytes;
  const uint8_t* r1 =
      static_cast<const uint8_t*>(mat.w) + static_cast<size_t>(row1) * mat.row_bytes;
  if (valid && a.prefetch) pair_prefetch<W>(r0, r1, mat.row_bytes);
  pdl_launch_dependents();
  pdl_wait();
  float t0, t1;
  if (mat.type == TensorType::Q4_K) {
    pair_rows<TensorType::Q4_K, W>(r0, r1, a, t0, t1);
  } else if (mat.type == TensorType::Q6_K) {
    pair_rows<TensorType::Q6_K, W>(r0, r1, a, t0, t1);
  } else {
    pair_rows<TensorType::Q8_0, W, PairDot<TensorType::Q8_0, kWide>>(r0, r1, a, t0, t1);
  }
  if (valid && pair_writer<W>()) {
    mat.y[row0] = t0;
    if (row1 != row0) mat.y[row1] = t1;
  }
}

// y[x, row] for the pair's two rows and every x row (x < n <= N); W warps a pair as above.
template <TensorType T, int W, int N>
__global__ void __launch_bounds__(32 * kPairWarps)
    gemv_pair_n_kernel(const uint8_t* w, int64_t m, size_t row_bytes, Acts a, int n, float* y) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int sw = warp % W;
  const int64_t want = pair_index<W>() * 2;
  const bool valid = want < m;
  const int64_t row0 = valid ? want : 0;
  const int64_t row1 = row0 + 1 < m ? row0 + 1 : row0;
  const uint8_t* r0 = w + static_cast<size_t>(row0) * row_bytes;
  const uint8_t* r1 = w + static_cast<size_t>(row1) * row_bytes;
  if (valid && a.prefetch) pair_prefetch<W>(r0, r1, row_bytes);
  pdl_launch_dependents();
  pdl_wait();
  float acc0[N], acc1[N];
#pragma unroll
  for (int x = 0; x < N; ++x) acc0[x] = acc1[x] = 0.0f;
  const int64_t sbs = a.k / 256;
  constexpr int64_t kStep = W * 4;
  for (int64_t sb = (sw * 32 + lane) / 8; sb < sbs; sb += kStep) {
    typename PairN<T>::Raw cur;
    PairN<T>::load(r0, r1, sb, lane, cur);
    PairN<T>::template dot<N>(cur, sb, a, lane, n, acc0, acc1);
  }
#pragma unroll
  for (int x = 0; x < N; ++x) {
    acc0[x] = warp_total(acc0[x]);
    acc1[x] = warp_total(acc1[x]);
  }
  if constexpr (W > 1) {
    __shared__ float part[2 * N][kPairWarps];
    if (lane == 0) {
#pragma unroll
      for (int x = 0; x < N; ++x) part[2 * x][warp] = acc0[x], part[2 * x + 1][warp] = acc1[x];
    }
    __syncthreads();
#pragma unroll
    for (int x = 0; x < N; ++x) {
      acc0[x] = acc1[x] = 0.0f;
#pragma unroll
      for (int i = 0; i < W; ++i)
        acc0[x] += part[2 * x][warp - sw + i], acc1[x] += part[2 * x + 1][warp - sw + i];
    }
  }
  if (valid && pair_writer<W>()) {
#pragma unroll
    for (int x = 0; x < N; ++x) {
      if (x < n) {
        y[x * m + row0] = acc0[x];
        if (row1 != row0) y[x * m + row1] = acc1[x];
      }
    }
  }
}

// 2 <= n <= 8 takes gemv_pair_n_kernel (weights decoded once for all x rows: 8 sequences 1.7x
// the aggregate tok/s of the v2 kernel's); TERN_CUDA_GEMV_BATCH=0 keeps the v2 kernel.
bool batch_pairs_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_BATCH");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

template <TensorType T, int N>
void launch_pair_n(int warps, int64_t pairs, cudaStream_t stream, const uint8_t* w, int64_t m,
                   size_t row_bytes, const Acts& a, int n, float* y) {
  const int64_t per = kPairWarps / warps;
  const dim3 blocks(static_cast<unsigned>((pairs + per - 1) / per));
  if (warps == 1) {
    (void)launch_pdl(gemv_pair_n_kernel<T, 1, N>, blocks, 32 * kPairWarps, stream, w, m, row_bytes,
                     a, n, y);
  } else if (warps == 2) {
    (void)launch_pdl(gemv_pair_n_kernel<T, 2, N>, blocks, 32 * kPairWarps, stream, w, m, row_bytes,
                     a, n, y);
  } else {
    (void)launch_pdl(gemv_pair_n_kernel<T, 4, N>, blocks, 32 * kPairWarps, stream, w, m, row_bytes,
                     a, n, y);
  }
}

// The Q8_0 pairs of four warps read their blocks with PairQ8_0<true> (three aligned 16-byte
// loads a block: 93% -> 97% of the copy bandwidth alone; not yet timed in the decode step).
// TERN_CUDA_GEMV_Q8_WIDE=0 keeps words8's 4-byte loads (A/B runs).
// TERN_CUDA_GEMV_Q8_WIDE=0 keeps words8's 4-byte loads (A/B runs).
bool q8_wide() {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_Q8_WIDE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

template <TensorType T, typename... Args>
void launch_pair(int warps, int64_t pairs, cudaStream_t stream, Args... args) {
  const auto blocks = [&](int w) {
    const int64_t per = kPairWarps / w;
    return dim3(static_cast<unsigned>((pairs + per - 1) / per));
  };
  if (T == TensorType::Q8_0 && warps == 4 && q8_wide()) {
    (void)launch_pdl(gemv_pair_kernel<TensorType::Q8_0, 4, 0, true>, blocks(4), 32 * kPairWarps,
                     stream, args...);
  } else if (warps == 1 && pair_wide_kernel(pairs)) {
    (void)launch_pdl(gemv_pair_kernel<T, 1, 4>, blocks(1), 32 * kPairWarps, stream, args...);
  } else if (warps == 1) {
    (void)launch_pdl(gemv_pair_kernel<T, 1>, blocks(1), 32 * kPairWarps, stream, args...);
  } else if (warps == 2) {
    (void)launch_pdl(gemv_pair_kernel<T, 2>, blocks(2), 32 * kPairWarps, stream, args...);
  } else {
    (void)launch_pdl(gemv_pair_kernel<T, 4>, blocks(4), 32 * kPairWarps, stream, args...);
  }
}

template <TensorType T>
void launch(const void* w, int64_t m, int64_t k, const Acts& a, int64_t n, float* y,
            cudaStream_t stream) {
  const auto& info = tensor_type_info(T);
  const size_t row_bytes = static_cast<size_t>(k / info.block_elements) * info.block_bytes;
  const dim3 grid(static_cast<unsigned>((m + kRowsPerBlock - 1) / kRowsPerBlock));
  const auto* p = static_cast<const uint8_t*>(w);
  const int ni = static_cast<int>(n);
  if (n > 1 && gemv_mma_enabled(T, k)) {
    (void)gemv_mma(T, p, m, k, a.qs, a.d, a.s, n, y, stream);
    return;
  }
  if constexpr (T == TensorType::Q4_K || T == TensorType::Q6_K || T == TensorType::Q8_0) {
    if (n == 1 && pair_mode() != 0 && pair_type(T, k)) {
      const int64_t pairs = (m + 1) / 2;
      launch_pair<T>(pair_warps(pairs, T, true), pairs, stream, p, m, row_bytes, a, y);
      return;
    }
    if (n > 1 && batch_pairs_enabled() && pair_type(T, k)) {
      const int64_t pairs = (m + 1) / 2;
      const int warps = pair_warps(pairs, T);
      if (n <= 4) {
        launch_pair_n<T, 4>(warps, pairs, stream, p, m, row_bytes, a, ni, y);
      } else {
        launch_pair_n<T, 8>(warps, pairs, stream, p, m, row_bytes, a, ni, y);
      }
      return;
    }
  }
  if (n == 1) {
    (void)launch_pdl(gemv_q8_kernel<T, 1>, grid, 32 * kRowsPerBlock, stream, p, m, row_bytes, a, ni,
                     y);
  } else if (n == 2) {
    (void)launch_pdl(gemv_q8_kernel<T, 2>, grid, 32 * kRowsPerBlock, stream, p, m, row_bytes, a, ni,
                     y);
  } else if (n <= 4) {
    (void)launch_pdl(gemv_q8_kernel<T, 4>, grid, 32 * kRowsPerBlock, stream, p, m, row_bytes, a, ni,
                     y);
  } else {
    (void)launch_pdl(gemv_q8_kernel<T, 8>, grid, 32 * kRowsPerBlock, stream, p, m, row_bytes, a, ni,
                     y);
  }
}

}  // namespace

bool gemv_q8_supported(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
      return true;
    default:
      return false;
  }
}

namespace {
Acts acts(const void* xq, int64_t n, int64_t k) {
  Acts a;
  a.qs = static_cast<const int8_t*>(xq);
  a.d = reinterpret_cast<const float*>(a.qs + (static_cast<size_t>(n * k) + 15) / 16 * 16);
  a.s = a.d + n * (k / 32);
  a.k = k;
  static const int prefetch = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_PREFETCH");
    return v == nullptr || std::strcmp(v, "0") != 0 ? 1 : 0;
  }();
  a.prefetch = prefetch;
  return a;
}
}  // namespace

size_t gemv_q8_row_bytes(TensorType type, int64_t k) {
  const auto& info = tensor_type_info(type);
  return static_cast<size_t>(k / info.block_elements) * info.block_bytes;
}

cudaError_t gemv_q8_multi(const GemvQ8Multi& g, int64_t k, const void* xq, cudaStream_t stream) {
  if (g.count < 1 || g.count > kMaxGemvMulti) return cudaErrorInvalidValue;
  bool pairs = pair_mode() != 0;
  int64_t total = 0;
  TensorType kind = TensorType::Q4_K;
  for (int i = 0; i < g.count; ++i) {
    pairs = pairs && pair_type(g.mats[i].type, k);
    total += (g.mats[i].m + 1) / 2;
    if (g.mats[i].type == TensorType::Q8_0) kind = TensorType::Q8_0;
  }
  if (pairs) {  // the same matrices, row pairs
    const int warps = pair_warps(total, kind, true);
    const int64_t per = kPairWarps / warps;
    GemvQ8Multi p = g;
    for (int i = 0; i < g.count; ++i)
      p.block_ends[i] =
          (i == 0 ? 0 : p.block_ends[i - 1]) + ((g.mats[i].m + 1) / 2 + per - 1) / per;
    const int64_t blocks = p.block_ends[p.count - 1];
    if (blocks == 0) return cudaSuccess;
    auto* kernel =
        warps == 1
            ? (pair_wide_kernel(total) ? gemv_pair_multi_kernel<1, 4> : gemv_pair_multi_kernel<1>)
        : warps == 2                            ? gemv_pair_multi_kernel<2>
        : kind == TensorType::Q8_0 && q8_wide() ? gemv_pair_multi_kernel<4, 0, true>
                                                : gemv_pair_multi_kernel<4>;
    (void)launch_pdl(kernel, static_cast<unsigned>(blocks), 32 * kPairWarps, stream, p,
                     acts(xq, 1, k));
    return cudaGetLastError();
  }
  const int64_t blocks = g.block_ends[g.count - 1];
  if (blocks == 0) return cudaSuccess;
  (void)launch_pdl(gemv_q8_multi_kernel, static_cast<unsigned>(blocks), 32 * kRowsPerBlock, stream,
                   g, acts(xq, 1, k));
  return cudaGetLastError();
}

int64_t gemv_q8_blocks(int64_t m) {
  return (m + kRowsPerBlock - 1) / kRowsPerBlock;
}

bool gemv_q8_glu_quantizes(const GemvQ8Matrix& gate, const GemvQ8Matrix& up, int64_t k, int group) {
  return (group == 32 || group == 256) && pair_mode() != 0 && gate.type == up.type &&
         pair_type(gate.type, k) && gate.m == up.m && gate.m > 0 && gate.m % group == 0 &&
         gate.m / group <= kQ8OutputGroups;
}

cudaError_t gemv_q8_glu(const GemvQ8Matrix& gate, const GemvQ8Matrix& up, int64_t k, const void* xq,
                        bool gelu, float* out, cudaStream_t stream, const Q8Output& quant) {
  if (gate.m != up.m) return cudaErrorInvalidValue;
  if (gate.m == 0) return cudaSuccess;
  if (quant.qs != nullptr && !gemv_q8_glu_quantizes(gate, up, k, quant.group)) {
    return cudaErrorInvalidValue;
  }
  if (pair_mode() != 0 && gate.type == up.type && pair_type(gate.type, k)) {
    const int warps = pair_warps(gate.m, gate.type);
    const auto blocks =
        static_cast<unsigned>((gate.m + kPairWarps / warps - 1) / (kPairWarps / warps));
    const Acts a = acts(xq, 1, k);
    const auto pick = [&](auto k1, auto k2, auto k4) {
      return warps == 1 ? k1 : warps == 2 ? k2 : k4;
    };
    static const bool wide_registers = [] {
      const char* v = std::getenv("TERN_CUDA_GEMV_GLU_REGS");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    auto* kernel = gemv_pair_glu_kernel<TensorType::Q4_K, 4>;
    if (gate.type == TensorType::Q4_K && warps == 1 && wide_registers) {
      kernel = gemv_pair_glu_kernel<TensorType::Q4_K, 1, 4>;
    } else if (gate.type == TensorType::Q4_K) {
      kernel =
          pick(gemv_pair_glu_kernel<TensorType::Q4_K, 1>, gemv_pair_glu_kernel<TensorType::Q4_K, 2>,
               gemv_pair_glu_kernel<TensorType::Q4_K, 4>);
    } else if (gate.type == TensorType::Q6_K) {
      kernel =
          pick(gemv_pair_glu_kernel<TensorType::Q6_K, 1>, gemv_pair_glu_kernel<TensorType::Q6_K, 2>,
               gemv_pair_glu_kernel<TensorType::Q6_K, 4>);
    } else if (warps == 4 && q8_wide()) {
      kernel = gemv_pair_glu_kernel<TensorType::Q8_0, 4, 0, true>;
    } else {
      kernel =
          pick(gemv_pair_glu_kernel<TensorType::Q8_0, 1>, gemv_pair_glu_kernel<TensorType::Q8_0, 2>,
               gemv_pair_glu_kernel<TensorType::Q8_0, 4>);
    }
    (void)launch_pdl(kernel, blocks, 32 * kPairWarps, stream, gate, up, a, gelu, out, quant);
    return cudaGetLastError();
  }
  (void)launch_pdl(gemv_q8_glu_kernel, static_cast<unsigned>(gemv_q8_blocks(gate.m)),
                   32 * kRowsPerBlock, stream, gate, up, acts(xq, 1, k), gelu, out);
  return cudaGetLastError();
}

cudaError_t gemv_q8(TensorType type, const void* w, int64_t m, int64_t k, const void* xq, int64_t n,
                    float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  const Acts a = acts(xq, n, k);
  switch (type) {
#define TERN_CASE(T)                                 \
  case TensorType::T:                                \
    launch<TensorType::T>(w, m, k, a, n, y, stream); \
    break;
    TERN_CASE(Q4_0)
    TERN_CASE(Q4_1)
    TERN_CASE(Q5_0)
    TERN_CASE(Q5_1)
    TERN_CASE(Q8_0)
    TERN_CASE(Q4_K)
    TERN_CASE(Q5_K)
    TERN_CASE(Q6_K)
#undef TERN_CASE
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda

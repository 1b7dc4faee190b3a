// gemv_float: decode matrix-vector products for F32, F16 and BF16 weights, y[j, :] = W . x[j, :]
// for j < n <= 8. One warp per row, four rows per block; 16-byte weight loads when each row is
// 16-byte aligned (k a multiple of 8, or of 4 for F32), element loads otherwise.
// Reads: the weights once, n * k * 4 activation bytes per row (from L1/L2). Writes n * m floats.
// Measured on the H200 (2026-12-03, tern-cuda-bench, inside a CUDA graph; copy roofline 4229 GB/s;
// n = 1): BF16 and F16 12288x4096 and 4096x12288 (100 MB, past the L2) at 77-79%; 1024x4096 41%.
// In the decode step of the BF16 Qwen3-8B file (2026-12-04, PDL launches with the rows prefetched
// into L2): 7.7 ms of GPU time a token for ~16.4 GB, ~2.1 TB/s (50%): 124 tok/s, llama.cpp 202.
// With the row pairs below: 6.8 ms, ~2.4 TB/s (57%): 136 tok/s vs llama.cpp 199 (0.68x).
// q/k/v and gate/up each in one launch (gemv_float_multi; with attention v4 and greedy on the
// GPU): 6.1 ms, ~2.7 TB/s (63%): 157 tok/s vs llama.cpp 199 (0.79x).
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_device.cuh"

namespace tern::cuda {
namespace {

constexpr int kRowsPerBlock = 4;

template <TensorType T>
__device__ __forceinline__ float element(const void* w, int64_t i) {
  if constexpr (T == TensorType::F32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (T == TensorType::F16) {
    return half_bits_to_float(static_cast<const uint16_t*>(w)[i]);
  } else {
    return bf16_bits_to_float(static_cast<const uint16_t*>(w)[i]);
  }
}

// 8 consecutive elements from a 16-byte-aligned (32 for F32) address.
template <TensorType T>
__device__ __forceinline__ void load8(const void* w, int64_t i, float (&v)[8]) {
  if constexpr (T == TensorType::F32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w) + i);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w) + i);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      if constexpr (T == TensorType::F16) {
        v[2 * p] = half_bits_to_float(static_cast<uint16_t>(words[p] & 0xFFFF));
        v[2 * p + 1] = half_bits_to_float(static_cast<uint16_t>(words[p] >> 16));
      } else {
        v[2 * p] = __uint_as_float(words[p] << 16);
        v[2 * p + 1] = __uint_as_float(words[p] & 0xFFFF0000u);
      }
    }
  }
}

template <TensorType T, int N>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    gemv_float_kernel(const void* w, int64_t m, int64_t k, const float* x, int n, float* y,
                      bool vector_path) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= m) return;
  constexpr int64_t kElemBytes = T == TensorType::F32 ? 4 : 2;
  prefetch_l2(static_cast<const char*>(w) + row * k * kElemBytes,
              static_cast<size_t>(k * kElemBytes), lane);  // weights: before the wait
  pdl_launch_dependents();
  pdl_wait();
  float acc[N];
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = 0.0f;
  const int64_t base = row * k;
  if (vector_path) {
    for (int64_t i = lane * 8; i < k; i += 32 * 8) {
      float v[8];
      load8<T>(w, base + i, v);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if (j < n) {
          const float4* xp = reinterpret_cast<const float4*>(x + j * k + i);
          const float4 a = __ldg(xp), b = __ldg(xp + 1);
          acc[j] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y +
                    v[6] * b.z + v[7] * b.w;
        }
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += 32) {
      const float v = element<T>(w, base + i);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if (j < n) acc[j] += v * x[j * k + i];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float s = acc[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && j < n) y[j * m + row] = s;
  }
}

// Row pairs (n = 1, k % 8 == 0; 2026-12-04): two weight rows share each activation load (F32
// activations are twice the bytes of 16-bit weights), W warps a pair (W = 1: the warp streams
// both rows alone, 4 steps of 256 elements in flight; W = 2 or 4: the pair's warps split k and
// add up in shared memory), chosen from the shape as gemv_q8's pairs are.
constexpr int kPairWarps = 4;

// The matrices of one launch (one for a lone product; q, k, v or gate, up fused), each
// matrix's pairs a run of blocks: blocks [ends[i - 1], ends[i]) are matrix i's.
struct PairMats {
  const void* w[kMaxGemvFloatMulti];
  int64_t m[kMaxGemvFloatMulti];
  float* y[kMaxGemvFloatMulti];
  int64_t ends[kMaxGemvFloatMulti];
  int count;
};

static_assert(kMaxGemvFloatMulti == 3, "gemv_fpair_kernel picks among three matrices");

template <TensorType T, int W>
__global__ void __launch_bounds__(32 * kPairWarps)
    gemv_fpair_kernel(const PairMats mats, int64_t k, const float* x) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int sw = warp % W;
  // Constant indices only: a dynamic index into the parameters puts a copy of them on every
  // thread's stack (104 bytes of local memory a thread: measured 2026-12-04, BF16 step
  // 6.8 -> 7.5 ms).
  const auto block = static_cast<int64_t>(blockIdx.x);
  const int mi = (mats.count > 1 && block >= mats.ends[0] ? 1 : 0) +
                 (mats.count > 2 && block >= mats.ends[1] ? 1 : 0);
  const int64_t first = mi == 0 ? 0 : mi == 1 ? mats.ends[0] : mats.ends[1];
  const void* w = mi == 0 ? mats.w[0] : mi == 1 ? mats.w[1] : mats.w[2];
  const int64_t m = mi == 0 ? mats.m[0] : mi == 1 ? mats.m[1] : mats.m[2];
  float* y = mi == 0 ? mats.y[0] : mi == 1 ? mats.y[1] : mats.y[2];
  const int64_t want = ((block - first) * (kPairWarps / W) + warp / W) * 2;
  const bool valid = want < m;
  const int64_t row0 = valid ? want : 0;
  const int64_t row1 = row0 + 1 < m ? row0 + 1 : row0;
  constexpr int64_t kElem = T == TensorType::F32 ? 4 : 2;
  if (valid) {
    const char* base = static_cast<const char*>(w);
    if (sw == 0) prefetch_l2(base + row0 * k * kElem, static_cast<size_t>(k * kElem), lane);
    if (sw == (W > 1 ? 1 : 0) && row1 != row0)
      prefetch_l2(base + row1 * k * kElem, static_cast<size_t>(k * kElem), lane);
  }
  pdl_launch_dependents();
  pdl_wait();
  float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll(W == 1 ? 4 : 2)
  for (int64_t e = (sw * 32 + lane) * 8; e < k; e += W * 256) {
    float v0[8], v1[8];
    load8<T>(w, row0 * k + e, v0);
    load8<T>(w, row1 * k + e, v1);
    const float4* xp = reinterpret_cast<const float4*>(x + e);
    const float4 a = __ldg(xp), b = __ldg(xp + 1);
    const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      acc0 += v0[i] * xs[i];
      acc1 += v1[i] * xs[i];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    acc0 += __shfl_xor_sync(0xffffffffu, acc0, o);
    acc1 += __shfl_xor_sync(0xffffffffu, acc1, o);
  }
  if constexpr (W > 1) {
    __shared__ float part[2][kPairWarps];
    if (lane == 0) {
      part[0][warp] = acc0;
      part[1][warp] = acc1;
    }
    __syncthreads();
    acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
    for (int i = 0; i < W; ++i) acc0 += part[0][warp - sw + i], acc1 += part[1][warp - sw + i];
  }
  if (valid && threadIdx.x % (32 * W) == 0) {
    y[row0] = acc0;
    if (row1 != row0) y[row1] = acc1;
  }
}

bool fpair_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_PAIR");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

int fpair_warps(int64_t pairs) {
  static const int64_t target = [] {
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      sms = 132;
    }
    return static_cast<int64_t>(sms) * 32;
  }();
  return pairs >= target ? 1 : 2 * pairs >= target ? 2 : kPairWarps;
}

// Row pairs of every matrix in one launch; the warps a pair from all the launch's pairs.
template <TensorType T>
void launch_pairs(const GemvFloatMulti& g, int64_t k, const float* x, cudaStream_t stream) {
  int64_t pairs = 0;
  for (int i = 0; i < g.count; ++i) pairs += (g.m[i] + 1) / 2;
  const int warps = fpair_warps(pairs);
  const int64_t per = kPairWarps / warps;
  PairMats mats{};
  mats.count = g.count;
  int64_t blocks = 0;
  for (int i = 0; i < g.count; ++i) {
    mats.w[i] = g.w[i];
    mats.m[i] = g.m[i];
    mats.y[i] = g.y[i];
    blocks += ((g.m[i] + 1) / 2 + per - 1) / per;
    mats.ends[i] = blocks;
  }
  auto* kernel = warps == 1   ? gemv_fpair_kernel<T, 1>
                 : warps == 2 ? gemv_fpair_kernel<T, 2>
                              : gemv_fpair_kernel<T, 4>;
  (void)launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), 32 * kPairWarps, stream, mats, k,
                   x);
}

template <TensorType T>
void launch(const void* w, int64_t m, int64_t k, const float* x, int64_t n, float* y,
            cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((m + kRowsPerBlock - 1) / kRowsPerBlock));
  const bool vec = k % 8 == 0;
  const int ni = static_cast<int>(n);
  if (n == 1 && vec && fpair_enabled()) {
    GemvFloatMulti one;
    one.type = T;
    one.w[0] = w;
    one.m[0] = m;
    one.y[0] = y;
    one.count = 1;
    launch_pairs<T>(one, k, x, stream);
    return;
  }
  if (n <= 2) {
    (void)launch_pdl(gemv_float_kernel<T, 2>, grid, 32 * kRowsPerBlock, stream, w, m, k, x, ni, y,
                     vec);
  } else {
    (void)launch_pdl(gemv_float_kernel<T, 8>, grid, 32 * kRowsPerBlock, stream, w, m, k, x, ni, y,
                     vec);
  }
}

}  // namespace

cudaError_t gemv_float(TensorType type, const void* w, int64_t m, int64_t k, const float* x,
                       int64_t n, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  switch (type) {
    case TensorType::F32:
      launch<TensorType::F32>(w, m, k, x, n, y, stream);
      break;
    case TensorType::F16:
      launch<TensorType::F16>(w, m, k, x, n, y, stream);
      break;
    case TensorType::BF16:
      launch<TensorType::BF16>(w, m, k, x, n, y, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool gemv_float_multi_supported(TensorType type, int64_t k) {
  return (type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16) &&
         k % 8 == 0 && fpair_enabled();
}

cudaError_t gemv_float_multi(const GemvFloatMulti& g, int64_t k, const float* x,
                             cudaStream_t stream) {
  if (g.count < 1 || g.count > kMaxGemvFloatMulti || !gemv_float_multi_supported(g.type, k))
    return cudaErrorInvalidValue;
  switch (g.type) {
    case TensorType::F32:
      launch_pairs<TensorType::F32>(g, k, x, stream);
      break;
    case TensorType::F16:
      launch_pairs<TensorType::F16>(g, k, x, stream);
      break;
    default:
      launch_pairs<TensorType::BF16>(g, k, x, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda

// gemv_float: decode matrix-vector products for F32, F16 and BF16 weights, y[j, :] = W . x[j, :]
// for j < n <= 8. One warp per row, four rows per block; 16-byte weight loads when each row is
// 16-byte aligned (k a multiple of 8, or of 4 for F32), element loads otherwise.
// Reads: the weights once, n * k * 4 activation bytes per row (from L1/L2). Writes n * m floats.
// Measured: BF16 12288x4096 n = 1 alone 98% of the copy bandwidth (H100, tern-cuda-bench); the
// Qwen3-8B BF16 decode step at 81% of it over the whole step (H200).
#include <cstdlib>
#include <cstring>

#include "backend/cuda/gated_activation.cuh"
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

// 16 bytes of weights that no kernel writes: through the read-only path, optionally streamed
// past L1 with a 256-byte L2 fetch.
template <bool Stream>
__device__ __forceinline__ uint4 load_weights16(const void* p) {
  if constexpr (Stream) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
  } else {
    return __ldg(static_cast<const uint4*>(p));
  }
}

// The 16 (F16/BF16) or 32 (F32) bytes of 8 consecutive weights, as loaded.
template <TensorType T>
struct Raw8 {
  uint4 q[T == TensorType::F32 ? 2 : 1];
};

// Elements [e, e + 8) of a row (16-byte aligned for 16-bit types, 32 for F32).
template <TensorType T, bool Stream>
__device__ __forceinline__ Raw8<T> load_raw8(const char* row, int64_t e) {
  Raw8<T> r;
  if constexpr (T == TensorType::F32) {
    r.q[0] = load_weights16<Stream>(row + e * 4);
    r.q[1] = load_weights16<Stream>(row + e * 4 + 16);
  } else {
    r.q[0] = load_weights16<Stream>(row + e * 2);
  }
  return r;
}

template <TensorType T>
__device__ __forceinline__ void unpack8(const Raw8<T>& r, float (&v)[8]) {
  if constexpr (T == TensorType::F32) {
    const uint32_t words[8] = {r.q[0].x, r.q[0].y, r.q[0].z, r.q[0].w,
                               r.q[1].x, r.q[1].y, r.q[1].z, r.q[1].w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __uint_as_float(words[i]);
  } else {
    const uint32_t words[4] = {r.q[0].x, r.q[0].y, r.q[0].z, r.q[0].w};
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
      unpack8<T>(load_raw8<T, false>(static_cast<const char*>(w), base + i), v);
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

// Row pairs (n = 1, k % 8 == 0): two weight rows share each activation load (F32 activations
// are twice the bytes of 16-bit weights), a block's four warps a pair (they split k and add up in
// shared memory), the pairs of all of a launch's matrices in one grid. For a gated MLP the pair
// is gate row r and up row r, and the kernel writes act(gate) * up as well. The weights are
// streamed past L1 (ld.global.nc.L1::no_allocate.L2::256B: L1 keeps x) in runs of 4 steps whose
// 8 16-byte loads a lane are all issued before the first product, and nothing is prefetched into
// L2 before the PDL wait: of the variants measured in the BF16 decode step (one step's loads at
// a time, whole-row L2 prefetch, longer runs, one or two warps a pair) this was the fastest
// (bench/README.md).
constexpr int kPairWarps = 4;
constexpr int kPairRuns = 4;  // steps of 256 elements a warp whose loads go out together

// The matrices of one launch (one for a lone product; q, k, v or gate, up fused), each
// matrix's pairs a run of blocks: blocks [ends[i - 1], ends[i]) are matrix i's.
struct PairMats {
  const void* w[kMaxGemvFloatMulti];
  int64_t m[kMaxGemvFloatMulti];
  float* y[kMaxGemvFloatMulti];
  int64_t ends[kMaxGemvFloatMulti];
  int count;
  int glu;     // GemvFloatMulti::glu: pair r = gate row r and up row r
  float* out;  // act(gate) * up when glu
};

static_assert(kMaxGemvFloatMulti == 3, "gemv_fpair_kernel picks among three matrices");

// acc0 += row a's 8 weights . x[e, e + 8), acc1 likewise for row b.
template <TensorType T>
__device__ __forceinline__ void dot8_pair(const Raw8<T>& a, const Raw8<T>& b, const float* x,
                                          int64_t e, float& acc0, float& acc1) {
  float v0[8], v1[8];
  unpack8<T>(a, v0);
  unpack8<T>(b, v1);
  const float4* xp = reinterpret_cast<const float4*>(x + e);
  const float4 p = __ldg(xp), q = __ldg(xp + 1);
  const float xs[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    acc0 += v0[i] * xs[i];
    acc1 += v1[i] * xs[i];
  }
}

template <TensorType T>
__global__ void __launch_bounds__(32 * kPairWarps)
    gemv_fpair_kernel(const PairMats mats, int64_t k, const float* x) {
  constexpr int W = kPairWarps;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int sw = warp % W;
  constexpr int64_t kElem = T == TensorType::F32 ? 4 : 2;
  // Constant indices only: a dynamic index into the parameters puts a copy of them on every
  // thread's stack (104 bytes of local memory a thread; the BF16 step measured 10% slower).
  const auto block = static_cast<int64_t>(blockIdx.x);
  const char *row_a, *row_b;
  int64_t ra, rb;
  bool valid;
  float* y = nullptr;
  if (mats.glu != 0) {
    const int64_t pair = block * (kPairWarps / W) + warp / W;
    valid = pair < mats.m[0];
    ra = rb = valid ? pair : 0;
    row_a = static_cast<const char*>(mats.w[0]) + ra * k * kElem;
    row_b = static_cast<const char*>(mats.w[1]) + rb * k * kElem;
  } else {
    const int mi = (mats.count > 1 && block >= mats.ends[0] ? 1 : 0) +
                   (mats.count > 2 && block >= mats.ends[1] ? 1 : 0);
    const int64_t first = mi == 0 ? 0 : mi == 1 ? mats.ends[0] : mats.ends[1];
    const void* w = mi == 0 ? mats.w[0] : mi == 1 ? mats.w[1] : mats.w[2];
    const int64_t m = mi == 0 ? mats.m[0] : mi == 1 ? mats.m[1] : mats.m[2];
    y = mi == 0 ? mats.y[0] : mi == 1 ? mats.y[1] : mats.y[2];
    const int64_t want = ((block - first) * (kPairWarps / W) + warp / W) * 2;
    valid = want < m;
    ra = valid ? want : 0;
    rb = ra + 1 < m ? ra + 1 : ra;
    row_a = static_cast<const char*>(w) + ra * k * kElem;
    row_b = static_cast<const char*>(w) + rb * k * kElem;
  }
  pdl_launch_dependents();
  pdl_wait();
  float acc0 = 0.0f, acc1 = 0.0f;
  constexpr int64_t kStep = W * 256;  // elements a pair's warps cover per step
  int64_t e = (sw * 32 + lane) * 8;
  // Runs of kPairRuns steps with every weight load of the run issued before the first product:
  // 2 * kPairRuns 16-byte loads a lane in flight; then the steps left over one at a time.
  constexpr int Runs = kPairRuns;
  for (; e + (Runs - 1) * kStep < k; e += Runs * kStep) {
    Raw8<T> a[Runs], b[Runs];
#pragma unroll
    for (int r = 0; r < Runs; ++r) {
      a[r] = load_raw8<T, true>(row_a, e + r * kStep);
      b[r] = load_raw8<T, true>(row_b, e + r * kStep);
    }
#pragma unroll
    for (int r = 0; r < Runs; ++r) dot8_pair<T>(a[r], b[r], x, e + r * kStep, acc0, acc1);
  }
  for (; e < k; e += kStep) {
    const Raw8<T> a = load_raw8<T, true>(row_a, e), b = load_raw8<T, true>(row_b, e);
    dot8_pair<T>(a, b, x, e, acc0, acc1);
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
    if (mats.glu != 0) {
      mats.y[0][ra] = acc0;
      mats.y[1][ra] = acc1;
      mats.out[ra] = gated(acc0, acc1, mats.glu == 2);  // (glu: 1 SiLU, 2 GELU)
    } else {
      y[ra] = acc0;
      if (rb != ra) y[rb] = acc1;
    }
  }
}

bool fpair_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_GEMV_PAIR");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Row pairs of every matrix in one launch, a block a pair.
template <TensorType T>
void launch_pairs(const GemvFloatMulti& g, int64_t k, const float* x, cudaStream_t stream) {
  PairMats mats{};
  mats.count = g.count;
  mats.glu = g.glu;
  mats.out = g.out;
  int64_t blocks = 0;
  for (int i = 0; i < g.count; ++i) {
    mats.w[i] = g.w[i];
    mats.m[i] = g.m[i];
    mats.y[i] = g.y[i];
    if (g.glu == 0 || i == 0) blocks += g.glu != 0 ? g.m[i] : (g.m[i] + 1) / 2;
    mats.ends[i] = blocks;
  }
  (void)launch_pdl(gemv_fpair_kernel<T>, dim3(static_cast<unsigned>(blocks)), 32 * kPairWarps,
                   stream, mats, k, x);
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
  if (g.glu != 0 && (g.glu > 2 || g.count != 2 || g.m[0] != g.m[1] || g.out == nullptr))
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

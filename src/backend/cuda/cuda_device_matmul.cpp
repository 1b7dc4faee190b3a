// The CudaDevice's products: 8-bit GEMVs for decode, F32/F16/BF16 GEMVs, the int8 prefill GEMM
// or dequantize + cuBLAS BF16 GEMM, and the cached 8-bit copy of the last quantized input.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_internal.h"
#include "backend/cuda/kernels.h"

namespace tern {
namespace {

// Prefill dequantizes weights into BF16 tiles of at most this many elements (64M: 128 MB, more
// than the H100's 50 MB L2, so each tile goes out to memory and comes back for cuBLAS).
// TERN_CUDA_DEQUANT_TILE_MB=N takes tiles of N MB instead (A/B runs: tiles that stay in L2 save
// that round trip but cut each product into more, smaller GEMMs).
int64_t dequant_tile_elements() {
  static const int64_t elements = [] {
    const char* v = std::getenv("TERN_CUDA_DEQUANT_TILE_MB");
    const int64_t mb = v == nullptr ? 0 : std::atoll(v);
    return mb >= 1 && mb <= 1024 ? (mb << 20) / 2 : int64_t{1} << 26;
  }();
  return elements;
}

}  // namespace

using cuda_device_detail::row_bytes;
using cuda_device_detail::u;

Result<void> CudaDevice::matmul(const Tensor& w, const Tensor& x, Tensor& y) {
  if (failed_) return error_;
  const int64_t k = w.ne[0], m = w.rows(), n = x.rows();
  if (x.ne[0] != k || y.ne[0] != m || y.rows() != n) {
    return make_error("matmul shapes: W [{} x {}], x [{} x {}], y [{} x {}]", m, k, n, x.ne[0],
                      y.rows(), y.ne[0]);
  }
  if (!cuda::is_supported(w.type)) {
    return make_error("matmul: the CUDA backend cannot compute with {} weights",
                      tensor_type_name(w.type));
  }
  if (n == 0 || m == 0) return {};
  const bool is_float =
      w.type == TensorType::F32 || w.type == TensorType::F16 || w.type == TensorType::BF16;
  const TensorType type = w.type;
  const void* wd = w.data;
  const float* xd = x.f32();
  float* yd = y.f32();
  cudaStream_t s = stream_;
  if (n <= cuda::kMaxGemvRows) {
    if (is_float) {
      enqueue({2, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd)},
              [=]() -> Result<void> {
                TERN_CUDA_TRY(cuda::gemv_float(type, wd, m, k, xd, n, yd, s));
                return {};
              });
    } else if (int8_gemv_ && cuda::gemv_q8_supported(type)) {
      // The 8-bit copy of x: cached from the product before (q, k, v) or written by the op
      // that produced x (q8_for_next_product), else quantized by this launch.
      const int group = cuda::q8_group(type);
      const bool fresh = !q8_cached(x, group);
      auto xq = quantized_activations(x, group);
      if (!xq) return xq.error();
      void* xqd = const_cast<void*>(*xq);
      enqueue(
          {3, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd), u(xqd), fresh,
           static_cast<uint64_t>(group)},
          [=]() -> Result<void> {
            if (fresh) TERN_CUDA_TRY(cuda::quantize_q8(xd, n, k, group, xqd, s));
            TERN_CUDA_TRY(cuda::gemv_q8(type, wd, m, k, xqd, n, yd, s));
            return {};
          },
          true);
    } else {
      enqueue({4, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd)},
              [=]() -> Result<void> {
                TERN_CUDA_TRY(cuda::gemv_blocks(type, wd, m, k, xd, n, yd, s));
                return {};
              });
    }
  } else if (int8_prefill_ && cuda::gemm_q8_supported(type, k)) {
    // Prefill with the decode path's 8-bit activations and integer products (gemm_q8.cu).
    const int group = cuda::q8_group(type);
    const bool fresh = !q8_cached(x, group);
    auto xq = quantized_activations(x, group);
    if (!xq) return xq.error();
    void* xqd = const_cast<void*>(*xq);
    enqueue(
        {5, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd), u(xqd), fresh,
         static_cast<uint64_t>(group)},
        [=]() -> Result<void> {
          if (fresh) TERN_CUDA_TRY(cuda::quantize_q8(xd, n, k, group, xqd, s));
          TERN_CUDA_TRY(cuda::gemm_q8(type, wd, m, k, xqd, n, yd, s));
          return {};
        },
        true);
  } else {
    TERN_TRY(gemm(w, x, y));
  }
  // A product written over the cached input makes its 8-bit copy stale.
  const auto* ylo = static_cast<const char*>(y.data);
  const auto* xlo = reinterpret_cast<const char*>(q8_x_);
  if (q8_valid_ && ylo < xlo + q8_n_ * q8_k_ * 4 && xlo < ylo + n * m * 4) q8_valid_ = false;
  return {};
}

bool CudaDevice::q8_cached(const Tensor& x, int group) const {
  return q8_valid_ && q8_x_ == x.f32() && q8_n_ == x.rows() && q8_k_ == x.ne[0] &&
         q8_group_ == group;
}

// The 8-bit copy of x with one scale per `group` values (quantized by the caller's launch when
// not cached).
Result<const void*> CudaDevice::quantized_activations(const Tensor& x, int group) {
  const int64_t n = x.rows(), k = x.ne[0];
  if (q8_cached(x, group)) return q8_.data;
  const size_t bytes = cuda::q8_activation_bytes(n, k);
  if (q8_.bytes < bytes) {
    q8_ = Temp();
    auto t = temp(bytes);
    if (!t) return t.error();
    q8_ = std::move(*t);
  }
  q8_x_ = x.f32();
  q8_n_ = n;
  q8_k_ = k;
  q8_group_ = group;
  q8_valid_ = true;
  return static_cast<const void*>(q8_.data);
}

// Prefill: y^T [m, n] = W [m, k] . x^T, in cuBLAS's column-major terms C = op(A) B with A the
// weights as a k x m column-major matrix (transposed) and B = x as k x n.
Result<void> CudaDevice::gemm(const Tensor& w, const Tensor& x, Tensor& y) {
  const int64_t k = w.ne[0], m = w.rows(), n = x.rows();
  const TensorType type = w.type;
  const void* wd = w.data;
  const float* xd = x.f32();
  float* yd = y.f32();
  cudaStream_t s = stream_;
  cublasHandle_t handle = cublas_;
  if (type == TensorType::F32) {
    enqueue({5, u(wd), u(m), u(k), u(xd), u(n), u(yd)}, [=]() -> Result<void> {
      const float alpha = 1.0f, beta = 0.0f;
      const int ik = static_cast<int>(k);
      TERN_CUBLAS_TRY(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                                  static_cast<int>(n), ik, &alpha, static_cast<const float*>(wd),
                                  ik, xd, ik, &beta, yd, static_cast<int>(m)));
      return {};
    });
    return {};
  }
  // Activations (and block weights, in tiles of rows) in BF16 (F16 for F16 weights).
  const bool f16 = type == TensorType::F16;
  auto xh = temp(static_cast<size_t>(n * k) * 2);
  if (!xh) return xh.error();
  auto* xp = static_cast<uint16_t*>(xh->data);
  const bool blocks = !f16 && type != TensorType::BF16;
  // Rows a tile: whole multiples of 128 (the GEMM's tensor-core tiles) when the matrix is cut.
  int64_t tile_rows = blocks ? std::max<int64_t>(1, std::min(m, dequant_tile_elements() / k)) : m;
  if (tile_rows < m && tile_rows > 128) tile_rows -= tile_rows % 128;
  Temp tile;
  if (blocks) {
    auto t = temp(static_cast<size_t>(tile_rows * k) * 2);
    if (!t) return t.error();
    tile = std::move(*t);
  }
  auto* tp = static_cast<uint16_t*>(tile.data);
  enqueue({6, u(wd), static_cast<uint64_t>(type), u(m), u(k), u(xd), u(n), u(yd), u(xp), u(tp)},
          [=]() -> Result<void> {
            const float alpha = 1.0f, beta = 0.0f;
            const int ik = static_cast<int>(k), in = static_cast<int>(n);
            const cudaDataType_t dtype = f16 ? CUDA_R_16F : CUDA_R_16BF;
            if (f16) {
              TERN_CUDA_TRY(cuda::f32_to_f16(xd, n * k, xp, s));
            } else {
              TERN_CUDA_TRY(cuda::f32_to_bf16(xd, n * k, xp, s));
            }
            const size_t rb = row_bytes(type, k);
            for (int64_t r0 = 0; r0 < m; r0 += tile_rows) {
              const int64_t rows = std::min(tile_rows, m - r0);
              const void* a = wd;
              if (blocks) {
                TERN_CUDA_TRY(cuda::dequantize_bf16(
                    type, static_cast<const uint8_t*>(wd) + static_cast<size_t>(r0) * rb, rows, k,
                    tp, s));
                a = tp;
              }
              TERN_CUBLAS_TRY(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                           in, ik, &alpha, a, dtype, ik, xp, dtype, ik, &beta,
                                           yd + r0, CUDA_R_32F, static_cast<int>(m),
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            }
            return {};
          });
  return {};
}

}  // namespace tern

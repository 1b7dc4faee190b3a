// The CudaDevice's row, element-wise and per-head ops: embedding rows, RMSNorm (with the 8-bit
// copy of the next product's input), adds, scaling, argmax and sampling, the gated activations
// and RoPE.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_internal.h"
#include "backend/cuda/kernels.h"

namespace tern {

using cuda_device_detail::row_bytes;
using cuda_device_detail::u;

Result<void> CudaDevice::get_rows(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  if (failed_) return error_;
  const int64_t cols = table.ne[0], rows = table.rows();
  if (!cuda::is_supported(table.type)) {
    return make_error("get_rows: the CUDA backend cannot read {} tables",
                      tensor_type_name(table.type));
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= rows)
      return make_error("token id {} is outside the vocabulary of {}", id, rows);
  }
  if (ids.empty()) return {};
  auto dev_ids = stage(ids);
  if (!dev_ids) return dev_ids.error();
  const TensorType type = table.type;
  const void* td = table.data;
  const int32_t* idp = *dev_ids;
  const int64_t n = static_cast<int64_t>(ids.size());
  float* o = out.f32();
  cudaStream_t s = stream_;
  enqueue({7, static_cast<uint64_t>(type), u(td), u(rows), u(cols), u(idp), u(n), u(o)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::get_rows(type, td, rows, cols, idp, n, o, s));
            return {};
          });
  return {};
}

void CudaDevice::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  const float* xd = x.f32();
  const float* wd = weight != nullptr ? weight->f32() : nullptr;
  const int64_t rows = x.rows(), cols = x.ne[0];
  float* o = out.f32();
  cudaStream_t s = stream_;
  // A norm that feeds a product writes the product's 8-bit input too.
  const Q8Target q8 = q8_for_next_product(
      o, rows, cols, [&](int group) { return cuda::norm_q8_supported(cols, group); });
  void* xq = q8.xq;
  const int group = q8.group;
  enqueue(
      {8, u(xd), u(wd), u(eps), u(rows), u(cols), u(o), u(xq), static_cast<uint64_t>(group)},
      [=]() -> Result<void> {
        if (xq != nullptr) {
          TERN_CUDA_TRY(
              cuda::add_rms_norm_q8(xd, nullptr, nullptr, wd, eps, rows, cols, o, xq, group, s));
        } else {
          TERN_CUDA_TRY(cuda::rms_norm(xd, wd, eps, rows, cols, o, s));
        }
        return {};
      },
      xq != nullptr);
}

void CudaDevice::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *ad = a.f32(), *bd = b.f32();
  float* o = out.f32();
  const int64_t n = a.elements();
  cudaStream_t s = stream_;
  enqueue({9, u(ad), u(bd), u(o), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::add(ad, bd, o, n, s));
    return {};
  });
}

void CudaDevice::add_row_vector(Tensor& x, const Tensor& v) {
  float* xd = x.f32();
  const float* vd = v.f32();
  const int64_t rows = x.rows(), cols = x.ne[0];
  cudaStream_t s = stream_;
  enqueue({10, u(xd), u(vd), u(rows), u(cols)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::add_row_vector(xd, vd, rows, cols, s));
    return {};
  });
}

void CudaDevice::scale(Tensor& x, float factor) {
  float* xd = x.f32();
  const int64_t n = x.elements();
  cudaStream_t s = stream_;
  enqueue({11, u(xd), u(factor), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::scale(xd, factor, n, s));
    return {};
  });
}

void CudaDevice::argmax_rows(const Tensor& x, int32_t* ids) {
  const float* xd = x.f32();
  const int64_t rows = x.rows(), cols = x.ne[0];
  cudaStream_t s = stream_;
  enqueue({30, u(xd), u(ids), u(rows), u(cols)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::argmax_rows(xd, rows, cols, ids, s));
    return {};
  });
}

void CudaDevice::sample_rows(const Tensor& x, std::span<const SampleDraw> draws, int32_t* ids) {
  if (failed_) return;
  const float* xd = x.f32();
  const int64_t rows = x.rows(), cols = x.ne[0];
  if (static_cast<int64_t>(draws.size()) < rows) {
    return fail(make_error("sample_rows: {} draws for {} rows", draws.size(), rows));
  }
  // The draws travel as the words of cuda::DrawParams, staged like ids (a step's draws change
  // every step without a new graph).
  static_assert(sizeof(cuda::DrawParams) % sizeof(int32_t) == 0);
  std::vector<int32_t> words(static_cast<size_t>(rows) * sizeof(cuda::DrawParams) / 4);
  for (int64_t r = 0; r < rows; ++r) {
    const SampleDraw& d = draws[static_cast<size_t>(r)];
    const cuda::DrawParams p{d.temperature, d.top_k, d.top_p, d.min_p, d.uniform};
    std::memcpy(words.data() + r * static_cast<int64_t>(sizeof(p) / 4), &p, sizeof(p));
  }
  auto staged = stage(words);
  if (!staged) return fail(staged.error());
  const size_t bytes = cuda::sample_workspace_bytes(cols);
  if (sample_workspace_.bytes < bytes) {
    sample_workspace_ = Temp();
    auto t = temp(bytes);
    if (!t) return fail(t.error());
    sample_workspace_ = std::move(*t);
  }
  const auto* dp = reinterpret_cast<const cuda::DrawParams*>(*staged);
  void* ws = sample_workspace_.data;
  cudaStream_t s = stream_;
  enqueue({32, u(xd), u(ids), u(rows), u(cols), u(dp), u(ws)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::sample_rows(xd, rows, cols, dp, ids, ws, s));
    return {};
  });
}

void CudaDevice::add_weighted_rows(const Tensor& src, std::span<const int32_t> rows,
                                   std::span<const float> weights, Tensor& dst) {
  if (failed_ || rows.empty()) return;
  auto row_ids = stage(rows);
  if (!row_ids) return fail(row_ids.error());
  // The weights travel as their bits, staged like the row ids.
  std::vector<int32_t> bits(weights.size());
  std::memcpy(bits.data(), weights.data(), weights.size_bytes());
  auto weight_bits = stage(bits);
  if (!weight_bits) return fail(weight_bits.error());
  const float* sd = src.f32();
  float* dd = dst.f32();
  const int32_t* rd = *row_ids;
  const auto* wd = reinterpret_cast<const float*>(*weight_bits);
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t cols = src.ne[0];
  cudaStream_t s = stream_;
  enqueue({19, u(sd), u(dd), u(rd), u(wd), u(n), u(cols)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::add_weighted_rows(sd, rd, wd, n, cols, dd, s));
    return {};
  });
}

void CudaDevice::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const float *g = gate.f32(), *up_d = up.f32();
  float* o = out.f32();
  const int64_t n = gate.elements();
  cudaStream_t s = stream_;
  enqueue({12, u(g), u(up_d), u(o), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::silu_mul(g, up_d, o, n, s));
    return {};
  });
}

void CudaDevice::gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const float *g = gate.f32(), *up_d = up.f32();
  float* o = out.f32();
  const int64_t n = gate.elements();
  cudaStream_t s = stream_;
  enqueue({13, u(g), u(up_d), u(o), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::gelu_tanh_mul(g, up_d, o, n, s));
    return {};
  });
}

void CudaDevice::rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& params) {
  if (failed_) return;
  const int64_t head_dim = x.ne[0], heads = x.ne[1], n = x.ne[2];
  if (static_cast<int64_t>(positions.size()) < n || params.rotary_dim > head_dim) {
    fail(make_error("rope: {} positions for {} tokens, rotary dim {} of head size {}",
                    positions.size(), n, params.rotary_dim, head_dim));
    return;
  }
  auto inv = inverse_frequencies(params);
  if (!inv) return fail(inv.error());
  auto pos = stage(positions.first(static_cast<size_t>(n)));
  if (!pos) return fail(pos.error());
  float* xd = x.f32();
  const int32_t* pd = *pos;
  const float* fd = *inv;
  const int64_t rd = params.rotary_dim;
  const bool neox = params.neox;
  const float ps = params.position_scale;
  cudaStream_t s = stream_;
  enqueue({14, u(xd), u(head_dim), u(heads), u(n), u(pd), u(fd), u(rd), neox, u(ps)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::rope(xd, head_dim, heads, n, pd, fd, rd, neox, ps, s));
            return {};
          });
}

}  // namespace tern

// The CudaDevice's row, element-wise and per-head ops: embedding rows, RMSNorm (fused with the
// residual add and the 8-bit quantization of the next product's input), adds, scaling, argmax
// and sampling, the gated activations (fused into the gate/up product) and RoPE (fused into the
// per-head norm).
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

using cuda_device_detail::apart;
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
  const std::initializer_list<uint64_t> sig = {8, u(xd), u(wd), u(eps), u(rows), u(cols), u(o)};
  OpInfo info;
  info.kind = OpInfo::kNorm;
  info.a = xd;
  info.weight = wd;
  info.eps = eps;
  info.rows = rows;
  info.cols = cols;
  info.out = o;
  OpInfo* last = queued_info();
  if (last != nullptr && last->kind == OpInfo::kAdd && last->out == xd && last->n == rows * cols) {
    // The residual add that wrote x, and this norm of it, in one kernel.
    q8_valid_ = false;
    info.a = last->a;
    info.b = last->b;
    info.sum = last->out;
    fuse_into(infos_.size() - 1, sig, norm_launch(info), info);
    return;
  }
  enqueue(
      sig,
      [=]() -> Result<void> {
        TERN_CUDA_TRY(cuda::rms_norm(xd, wd, eps, rows, cols, o, s));
        return {};
      },
      info);
}

void CudaDevice::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *ad = a.f32(), *bd = b.f32();
  float* o = out.f32();
  const int64_t n = a.elements();
  cudaStream_t s = stream_;
  OpInfo info;
  info.kind = OpInfo::kAdd;
  info.a = ad;
  info.b = bd;
  info.out = o;
  info.n = n;
  enqueue(
      {9, u(ad), u(bd), u(o), u(n)},
      [=]() -> Result<void> {
        TERN_CUDA_TRY(cuda::add(ad, bd, o, n, s));
        return {};
      },
      info);
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

// gate and up products of one token queued as one launch, then act(gate) * up: all in one kernel.
bool CudaDevice::fuse_glu(const float* g, const float* up, float* out, int64_t n, bool gelu,
                          std::initializer_list<uint64_t> signature) {
  OpInfo* last = queued_info();
  if (last != nullptr && last->kind == OpInfo::kFloatGemv && last->floats.count == 2 &&
      last->floats.y[0] == g && last->floats.y[1] == up && last->floats.m[0] == n &&
      last->floats.m[1] == n) {
    // F32/F16/BF16 gate and up: pair r is gate row r and up row r; one launch writes the product.
    q8_valid_ = false;  // `out` may be the input an 8-bit copy was made of, as in the path below
    OpInfo i = *last;
    i.floats.glu = gelu ? 2 : 1;
    i.floats.out = out;
    i.kind = OpInfo::kOther;  // nothing to fuse into a gated activation
    fuse_into(infos_.size() - 1, signature, float_gemv_launch(i), i);
    return true;
  }
  if (last == nullptr || last->kind != OpInfo::kGemv || last->multi.count != 2) return false;
  const auto& gm = last->multi.mats[0];
  const auto& um = last->multi.mats[1];
  if (gm.y != g || um.y != up || gm.m != n || um.m != n) return false;
  q8_valid_ = false;
  OpInfo i = *last;
  i.kind = OpInfo::kGlu;  // (only the down product's quantization fuses into it)
  i.gelu = gelu;
  i.out = out;
  fuse_into(infos_.size() - 1, signature, glu_launch(i), i);
  return true;
}

CudaDevice::Launch CudaDevice::glu_launch(const OpInfo& i) {
  cudaStream_t s = stream_;
  cuda::Q8Output quant;
  if (i.out_xq != nullptr) {
    const cuda::Q8Activations a = cuda::q8_activations(i.out_xq, 1, i.multi.mats[0].m);
    quant.qs = const_cast<int8_t*>(a.qs);
    quant.d = const_cast<float*>(a.d);
    quant.s = const_cast<float*>(a.s);
    quant.counters = q8_counters_;
    quant.group = i.out_q8_group;
  }
  return [i, s, quant]() -> Result<void> {
    if (i.quantize) TERN_CUDA_TRY(cuda::quantize_q8(i.a, 1, i.k, i.q8_group, i.xq, s));
    TERN_CUDA_TRY(
        cuda::gemv_q8_glu(i.multi.mats[0], i.multi.mats[1], i.k, i.xq, i.gelu, i.out, s, quant));
    return {};
  };
}

void CudaDevice::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  const float *g = gate.f32(), *up_d = up.f32();
  float* o = out.f32();
  const int64_t n = gate.elements();
  cudaStream_t s = stream_;
  if (fuse_glu(g, up_d, o, n, false, {12, u(g), u(up_d), u(o), u(n)})) return;
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
  if (fuse_glu(g, up_d, o, n, true, {13, u(g), u(up_d), u(o), u(n)})) return;
  enqueue({13, u(g), u(up_d), u(o), u(n)}, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::gelu_tanh_mul(g, up_d, o, n, s));
    return {};
  });
}

// Queues rope on x [n, heads, head_dim] as a norm + rope launch (kNormRope) when fusion is on:
// with the per-head norm that wrote x in place (one of the last two queued ops; the other one
// touches other memory), or alone (norm off: models without q/k norms); a second such op for the
// same tokens and rotation right after the first (a layer's k after its q) joins it, and
// store_kv may join them after that. False: queue the plain rope. TERN_CUDA_ROPE_MERGE=0 keeps
// the launches of before (a norm + rope launch each for q and k, the RoPE alone and store_kv
// apart) for A/B runs.
bool CudaDevice::fuse_rope(float* xd, int64_t head_dim, int64_t heads, int64_t n, const int32_t* pd,
                           const float* fd, int64_t rd, bool neox, float ps,
                           std::initializer_list<uint64_t> sig) {
  if (!cuda::rms_norm_rope_supported(head_dim) || !fuse_ || !graphs_ || failed_) return false;
  const int64_t x_elems = n * heads * head_dim;
  OpInfo info;
  info.kind = OpInfo::kNormRope;
  cuda::NormRopeLaunch& l = info.norm_rope;
  l.parts[0] = {xd, nullptr, 0.0f, heads, false};
  l.head_dim = head_dim, l.n = n, l.positions = pd, l.inv_freq = fd;
  l.rotary_dim = rd, l.neox = neox, l.position_scale = ps;
  static const bool merge = [] {
    const char* v = std::getenv("TERN_CUDA_ROPE_MERGE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  int norm_back = -1;  // the queued norm this rope takes over, counted from the end
  for (size_t back = 0; back < 2; ++back) {
    OpInfo* op = queued_info(back);
    if (op == nullptr || op->kind != OpInfo::kNorm || op->b != nullptr || op->xq != nullptr) break;
    if (op->a == xd && op->out == xd && op->rows == n * heads && op->cols == head_dim) {
      l.parts[0] = {xd, op->weight, op->eps, heads, true};
      norm_back = static_cast<int>(back);
      break;
    }
    const int64_t elems = op->rows * op->cols;
    if (!apart(op->a, elems, xd, x_elems) || !apart(op->out, elems, xd, x_elems)) break;
  }
  if (!merge && norm_back < 0) return false;
  q8_valid_ = false;
  // The q heads' op queued just before this one (before its norm, when it has one).
  OpInfo* q = !merge           ? nullptr
              : norm_back == 0 ? queued_info(1)
              : norm_back < 0  ? queued_info(0)
                               : nullptr;
  const cuda::NormRopeLaunch* ql = q != nullptr ? &q->norm_rope : nullptr;
  if (ql != nullptr && q->kind == OpInfo::kNormRope && ql->count == 1 && ql->head_dim == head_dim &&
      ql->n == n && ql->positions == pd && ql->inv_freq == fd && ql->rotary_dim == rd &&
      ql->neox == neox && ql->position_scale == ps &&
      apart(ql->parts[0].x, n * ql->parts[0].heads * head_dim, xd, x_elems)) {
    const cuda::NormRopeHeads k = l.parts[0];
    l = *ql;
    l.parts[1] = k;
    l.count = 2;
    if (norm_back == 0) drop_last_queued();
    fuse_into(infos_.size() - 1, sig, norm_rope_launch(info), info);
  } else if (norm_back >= 0) {
    fuse_into(infos_.size() - 1 - static_cast<size_t>(norm_back), sig, norm_rope_launch(info),
              info);
  } else {
    enqueue(sig, norm_rope_launch(info), info);
  }
  return true;
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
  const std::initializer_list<uint64_t> sig = {14,    u(xd), u(head_dim), u(heads), u(n),
                                               u(pd), u(fd), u(rd),       neox,     u(ps)};
  if (fuse_rope(xd, head_dim, heads, n, pd, fd, rd, neox, ps, sig)) return;
  enqueue({14, u(xd), u(head_dim), u(heads), u(n), u(pd), u(fd), u(rd), neox, u(ps)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::rope(xd, head_dim, heads, n, pd, fd, rd, neox, ps, s));
            return {};
          });
}

}  // namespace tern

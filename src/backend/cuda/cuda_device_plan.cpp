// The CudaDevice's plan execution and its fused ops: add + RMSNorm, several one-token products
// of one input in one launch (q, k, v), gate/up with the gated activation, and the q/k norm +
// RoPE + F16 KV store in one launch. Each fused op is one the model asked for (ops/step_plan.h);
// where its kernel does not apply (prefill shapes, other types), Device's unfused composition
// runs instead.
#include <cuda_runtime_api.h>

#include <variant>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_internal.h"
#include "backend/cuda/kernels.h"

namespace tern {

using cuda_device_detail::apart;
using cuda_device_detail::u;

Result<void> CudaDevice::execute(const StepPlan& plan) {
  TERN_TRY(plan.status());
  if (failed_) return error_;
  plan_ = &plan;
  Result<void> ok;
  for (size_t i = 0; i < plan.size() && ok; ++i) {
    plan_index_ = i;
    ok = run(plan, i);
    if (ok && failed_) ok = error_;
  }
  plan_ = nullptr;
  TERN_TRY(ok);
  // The plan (or what is left of it after a host read) is one graph.
  return flush();
}

CudaDevice::Q8Target CudaDevice::q8_for_next_product(const float* x, int64_t rows, int64_t k,
                                                     const std::function<bool(int group)>& fits) {
  if (!int8_gemv_ || !graphs_ || failed_ || plan_ == nullptr || plan_index_ + 1 >= plan_->size() ||
      rows > cuda::kMaxGemvRows)
    return {};
  // The weights of the next op, when it reads x [rows, k].
  std::vector<const Tensor*> weights;
  const Tensor* input = nullptr;
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, op::Matmul>) {
          input = &o.x;
          weights = {&o.w};
        } else if constexpr (std::is_same_v<T, op::MatmulsSharedInput>) {
          input = &o.x;
          for (int i = 0; i < o.count; ++i) weights.push_back(&o.w[static_cast<size_t>(i)]);
        } else if constexpr (std::is_same_v<T, op::GateUpActivation>) {
          input = &o.x;
          weights = {&o.gate_w, &o.up_w};
        }
      },
      plan_->ops()[plan_index_ + 1]);
  if (input == nullptr || input->data != x || input->ne[0] != k || input->rows() != rows) return {};
  const int group = cuda::q8_group(weights.front()->type);
  for (const Tensor* w : weights) {
    if (!cuda::gemv_q8_supported(w->type) || cuda::q8_group(w->type) != group) return {};
  }
  if (!fits(group)) return {};
  auto xq = quantized_activations(*input, group);
  if (!xq) return {};
  ++producer_quantizations_;
  return {const_cast<void*>(*xq), group};
}

Result<void> CudaDevice::add_rms_norm(const op::AddRmsNorm& o) {
  const float *ad = o.residual.f32(), *bd = o.add.f32(), *wd = o.weight.f32();
  float* sum = o.residual.f32();
  float* out = o.out.f32();
  const int64_t rows = o.residual.rows(), cols = o.residual.ne[0];
  const float eps = o.eps;
  const Q8Target q8 = q8_for_next_product(
      out, rows, cols, [&](int group) { return cuda::norm_q8_supported(cols, group); });
  void* xq = q8.xq;
  const int group = q8.group;
  cudaStream_t s = stream_;
  enqueue(
      {20, u(ad), u(bd), u(wd), u(eps), u(rows), u(cols), u(out), u(xq),
       static_cast<uint64_t>(group)},
      [=]() -> Result<void> {
        TERN_CUDA_TRY(cuda::add_rms_norm_q8(ad, bd, sum, wd, eps, rows, cols, out, xq, group, s));
        return {};
      },
      xq != nullptr);
  return failed_ ? Result<void>(error_) : Result<void>();
}

bool CudaDevice::token_products(const Tensor& x, std::span<const Tensor> weights,
                                std::span<float* const> ys) {
  const int64_t k = x.ne[0];
  const float* xd = x.f32();
  cudaStream_t s = stream_;
  const TensorType first = weights.front().type;
  bool same_type = true, q8 = int8_gemv_, apart_from_x = true;
  const int group = cuda::q8_group(first);
  for (size_t i = 0; i < weights.size(); ++i) {
    same_type = same_type && weights[i].type == first;
    q8 = q8 && cuda::gemv_q8_supported(weights[i].type) && cuda::q8_group(weights[i].type) == group;
    apart_from_x = apart_from_x && apart(ys[i], weights[i].rows(), xd, k);
  }
  if (!apart_from_x) return false;
  if (q8 && weights.size() <= static_cast<size_t>(cuda::kMaxGemvMulti)) {
    cuda::GemvQ8Multi multi;
    std::vector<uint64_t> sig = {17, u(xd), u(k), static_cast<uint64_t>(group)};
    for (size_t i = 0; i < weights.size(); ++i) {
      cuda::GemvQ8Matrix& mat = multi.mats[i];
      mat.w = weights[i].data;
      mat.type = weights[i].type;
      mat.m = weights[i].rows();
      mat.row_bytes = cuda::gemv_q8_row_bytes(mat.type, k);
      mat.y = ys[i];
      multi.block_ends[i] = (i == 0 ? 0 : multi.block_ends[i - 1]) + cuda::gemv_q8_blocks(mat.m);
      multi.count = static_cast<int>(i + 1);
      sig.insert(sig.end(), {u(mat.w), static_cast<uint64_t>(mat.type), u(mat.m), u(mat.y)});
    }
    const bool fresh = !q8_cached(x, group);
    auto xq = quantized_activations(x, group);
    if (!xq) return false;
    void* xqd = const_cast<void*>(*xq);
    sig.insert(sig.end(), {u(xqd), fresh});
    auto launch = [=]() -> Result<void> {
      if (fresh) TERN_CUDA_TRY(cuda::quantize_q8(xd, 1, k, group, xqd, s));
      TERN_CUDA_TRY(cuda::gemv_q8_multi(multi, k, xqd, s));
      return {};
    };
    enqueue(sig, launch, true);
    return true;
  }
  if (same_type && weights.size() <= static_cast<size_t>(cuda::kMaxGemvFloatMulti) &&
      cuda::gemv_float_multi_supported(first, k)) {
    cuda::GemvFloatMulti multi;
    multi.type = first;
    std::vector<uint64_t> sig = {31, u(xd), u(k), static_cast<uint64_t>(first)};
    for (size_t i = 0; i < weights.size(); ++i) {
      multi.w[i] = weights[i].data;
      multi.m[i] = weights[i].rows();
      multi.y[i] = ys[i];
      multi.count = static_cast<int>(i + 1);
      sig.insert(sig.end(), {u(multi.w[i]), u(multi.m[i]), u(multi.y[i])});
    }
    enqueue(sig, [=]() -> Result<void> {
      TERN_CUDA_TRY(cuda::gemv_float_multi(multi, k, xd, s));
      return {};
    });
    return true;
  }
  return false;
}

Result<void> CudaDevice::matmuls(const op::MatmulsSharedInput& o) {
  if (failed_) return error_;
  if (o.x.rows() == 1 && o.count > 1) {
    std::vector<Tensor> weights(o.w.begin(), o.w.begin() + o.count);
    std::vector<float*> ys;
    for (int i = 0; i < o.count; ++i) ys.push_back(o.y[static_cast<size_t>(i)].f32());
    for (const Tensor& w : weights) {
      if (!cuda::is_supported(w.type)) {
        return make_error("matmul: the CUDA backend cannot compute with {} weights",
                          tensor_type_name(w.type));
      }
    }
    if (token_products(o.x, weights, ys)) return failed_ ? Result<void>(error_) : Result<void>();
  }
  return Device::matmuls(o);
}

Result<void> CudaDevice::gate_up_activation(const op::GateUpActivation& o) {
  if (failed_) return error_;
  const int64_t k = o.x.ne[0];
  const TensorType gt = o.gate_w.type, ut = o.up_w.type;
  const bool gelu = o.act == Activation::GeluTanh;
  if (o.x.rows() == 1) {
    const float* xd = o.x.f32();
    float* out = o.out.f32();
    cudaStream_t s = stream_;
    const int group = cuda::q8_group(gt);
    if (int8_gemv_ && cuda::gemv_q8_supported(gt) && cuda::gemv_q8_supported(ut) &&
        cuda::q8_group(ut) == group) {
      cuda::GemvQ8Matrix gate{o.gate_w.data, gt, o.gate_w.rows(), cuda::gemv_q8_row_bytes(gt, k),
                              o.gate.f32()};
      cuda::GemvQ8Matrix up{o.up_w.data, ut, o.up_w.rows(), cuda::gemv_q8_row_bytes(ut, k),
                            o.up.f32()};
      const bool fresh = !q8_cached(o.x, group);
      auto xq = quantized_activations(o.x, group);
      if (!xq) return xq.error();
      void* xqd = const_cast<void*>(*xq);
      enqueue({21, u(xd), u(k), u(gate.w), static_cast<uint64_t>(gt), u(gate.m), u(gate.y), u(up.w),
               static_cast<uint64_t>(ut), u(up.y), u(out), u(xqd), fresh, gelu,
               static_cast<uint64_t>(group)},
              [=]() -> Result<void> {
                if (fresh) TERN_CUDA_TRY(cuda::quantize_q8(xd, 1, k, group, xqd, s));
                TERN_CUDA_TRY(cuda::gemv_q8_glu(gate, up, k, xqd, gelu, out, s));
                return {};
              });
      return failed_ ? Result<void>(error_) : Result<void>();
    }
    if (gt == ut && cuda::gemv_float_multi_supported(gt, k) &&
        apart(o.gate.f32(), o.gate.elements(), xd, k) &&
        apart(o.up.f32(), o.up.elements(), xd, k)) {
      cuda::GemvFloatMulti multi;
      multi.type = gt;
      multi.w[0] = o.gate_w.data;
      multi.w[1] = o.up_w.data;
      multi.m[0] = o.gate_w.rows();
      multi.m[1] = o.up_w.rows();
      multi.y[0] = o.gate.f32();
      multi.y[1] = o.up.f32();
      multi.count = 2;
      multi.glu = gelu ? 2 : 1;
      multi.out = out;
      enqueue(
          {22, u(xd), u(k), static_cast<uint64_t>(gt), u(multi.w[0]), u(multi.w[1]), u(multi.m[0]),
           u(multi.y[0]), u(multi.y[1]), u(out), static_cast<uint64_t>(multi.glu)},
          [=]() -> Result<void> {
            TERN_CUDA_TRY(cuda::gemv_float_multi(multi, k, xd, s));
            return {};
          });
      return failed_ ? Result<void>(error_) : Result<void>();
    }
  }
  return Device::gate_up_activation(o);
}

Result<void> CudaDevice::qk_norm_rope_store_kv(const op::QkNormRopeStoreKv& o) {
  if (failed_) return error_;
  const int64_t head_dim = o.q.ne[0], n = o.q.ne[2];
  if (!cuda::rms_norm_rope_supported(head_dim)) return Device::qk_norm_rope_store_kv(o);
  auto inv = inverse_frequencies(*o.rope);
  if (!inv) return inv.error();
  auto pos = stage(o.positions.first(static_cast<size_t>(n)));
  if (!pos) return pos.error();
  cuda::NormRopeLaunch l;
  l.parts[0] = {o.q.f32(), o.q_norm.f32(), o.eps, o.q.ne[1], o.q_norm.data != nullptr};
  l.parts[1] = {o.k.f32(), o.k_norm.f32(), o.eps, o.k.ne[1], o.k_norm.data != nullptr};
  l.count = 2;
  l.head_dim = head_dim;
  l.n = n;
  l.positions = *pos;
  l.inv_freq = *inv;
  l.rotary_dim = o.rope->rotary_dim;
  l.neox = o.rope->neox;
  l.position_scale = o.rope->position_scale;
  // An F16 cache: the same launch writes the rotated keys and the values into it.
  const bool store = o.cache->k.type == TensorType::F16;
  if (store) {
    auto slots = stage(o.slots);
    if (!slots) return slots.error();
    step_kv_stores_.push_back(o.cache->k.data);
    l.k_cache = static_cast<uint16_t*>(o.cache->k.data);
    l.v_cache = static_cast<uint16_t*>(o.cache->v.data);
    l.v = o.v.f32();
    l.slots = *slots;
  }
  cudaStream_t s = stream_;
  enqueue({23, u(l.parts[0].x), u(l.parts[0].weight), u(l.parts[1].x), u(l.parts[1].weight),
           u(o.eps), u(l.parts[0].heads), u(l.parts[1].heads), u(head_dim), u(n), u(l.positions),
           u(l.inv_freq), u(l.rotary_dim), l.neox, u(l.position_scale), u(l.k_cache), u(l.v_cache),
           u(l.v), u(l.slots)},
          [l, s]() -> Result<void> {
            TERN_CUDA_TRY(cuda::rms_norm_rope(l, s));
            return {};
          });
  if (!store) store_kv(*o.cache, o.k, o.v, o.slots);
  return failed_ ? Result<void>(error_) : Result<void>();
}

}  // namespace tern

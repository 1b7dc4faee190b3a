#include "backend/cpu_device/cpu_device.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/activations.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "backend/cpu_device/attention_cpu.h"

namespace tern {

CpuDevice::CpuDevice(size_t threads) : pool_(threads) {}

std::string CpuDevice::name() const {
  return fmt::format("cpu ({} threads, {})", pool_.size(),
                     cpu::cpu_path_name(cpu::default_cpu_path()));
}

Result<DeviceBuffer> CpuDevice::allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) return make_error("out of host memory allocating {} bytes", bytes);
  return DeviceBuffer(this, p, bytes);
}

void CpuDevice::free(void* data, size_t) {
  std::free(data);
}

void CpuDevice::upload(const void* host, void* device_data, size_t bytes) {
  std::memcpy(device_data, host, bytes);
}

void CpuDevice::download(const void* device_data, void* host, size_t bytes) {
  std::memcpy(host, device_data, bytes);
}

void CpuDevice::copy(const void* src, void* dst, size_t bytes) {
  std::memmove(dst, src, bytes);
}

namespace {

bool packing_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("TERN_PACKED_WEIGHTS");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return enabled;
}

// The source pages are not read again once packed: drop them from this process's resident set
// (they stay in the page cache; the mapping is read-only, so nothing is lost).
void release_pages(const void* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

Result<Tensor> CpuDevice::prepare_matmul_weight(const Tensor& w, std::vector<DeviceBuffer>& owned) {
  const int64_t cols = w.ne[0], rows = w.rows();
  if (!packing_enabled() || w.layout != WeightLayout::Rows || !cpu::can_pack(w.type, rows, cols))
    return w;
  auto buffer = allocate(cpu::packed_bytes(w.type, rows, cols));
  if (!buffer) return buffer.error();
  cpu::pack_rows(w.type, w.data, rows, cols, buffer->data(), pool_);
  release_pages(w.data, *tensor_bytes(w.type, static_cast<uint64_t>(rows * cols)));
  Tensor packed = w;
  packed.data = buffer->data();
  packed.layout = WeightLayout::DevicePacked;
  owned.push_back(std::move(*buffer));
  return packed;
}

Result<void> CpuDevice::matmul(const Tensor& w, const Tensor& x, Tensor& y) {
  const int64_t k = w.ne[0], m = w.rows(), n = x.rows();
  if (x.ne[0] != k || y.ne[0] != m || y.rows() != n) {
    return make_error("matmul shapes: W [{} x {}], x [{} x {}], y [{} x {}]", m, k, n, x.ne[0],
                      y.rows(), y.ne[0]);
  }
  if (w.layout == WeightLayout::DevicePacked)
    return cpu::matmul_packed(w.type, w.data, m, k, x.f32(), n, y.f32(), pool_);
  if (n == 1) return cpu::matvec(w.type, w.data, m, k, x.f32(), y.f32(), pool_);
  return cpu::matmul(w.type, w.data, m, k, x.f32(), n, y.f32(), pool_);
}

Result<void> CpuDevice::get_rows(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  const int64_t cols = table.ne[0], rows = table.rows();
  const auto& info = tensor_type_info(table.type);
  const size_t row_bytes = static_cast<size_t>(cols / info.block_elements) * info.block_bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return make_error("token id {} is outside the vocabulary of {}", ids[i], rows);
    }
    float* dst = out.f32() + static_cast<int64_t>(i) * cols;
    if (table.layout == WeightLayout::DevicePacked) {
      cpu::dequantize_packed_row(table.type, table.data, cols, ids[i], dst);
      continue;
    }
    const auto* src =
        static_cast<const uint8_t*>(table.data) + static_cast<size_t>(ids[i]) * row_bytes;
    cpu::dequantize_row(table.type, src, dst, cols);
  }
  return {};
}

void CpuDevice::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  const int64_t cols = x.ne[0];
  pool_.parallel_for(static_cast<size_t>(x.rows()), [&](size_t begin, size_t end, size_t) {
    for (size_t r = begin; r < end; ++r) {
      const float* in = x.f32() + static_cast<int64_t>(r) * cols;
      float* o = out.f32() + static_cast<int64_t>(r) * cols;
      double sum = 0.0;
      for (int64_t i = 0; i < cols; ++i) sum += static_cast<double>(in[i]) * in[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(cols)) + eps);
      if (weight != nullptr) {
        const float* w = weight->f32();
        for (int64_t i = 0; i < cols; ++i) o[i] = in[i] * inv * w[i];
      } else {
        for (int64_t i = 0; i < cols; ++i) o[i] = in[i] * inv;
      }
    }
  });
}

void CpuDevice::add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = a.elements();
  const float *pa = a.f32(), *pb = b.f32();
  float* po = out.f32();
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

void CpuDevice::add_row_vector(Tensor& x, const Tensor& v) {
  const int64_t cols = x.ne[0], rows = x.rows();
  const float* pv = v.f32();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.f32() + r * cols;
    for (int64_t i = 0; i < cols; ++i) row[i] += pv[i];
  }
}

void CpuDevice::scale(Tensor& x, float factor) {
  const int64_t n = x.elements();
  float* p = x.f32();
  for (int64_t i = 0; i < n; ++i) p[i] *= factor;
}

void CpuDevice::argmax_rows(const Tensor& x, int32_t* ids) {
  const int64_t cols = x.ne[0];
  for (int64_t r = 0; r < x.rows(); ++r) {
    const float* row = x.f32() + r * cols;
    ids[r] = static_cast<int32_t>(std::max_element(row, row + cols) - row);
  }
}

void CpuDevice::sample_rows(const Tensor& x, std::span<const SampleDraw> draws, int32_t* ids) {
  const int64_t cols = x.ne[0];
  for (int64_t r = 0; r < x.rows(); ++r) {
    ids[r] = pick_token(std::span<const float>(x.f32() + r * cols, static_cast<size_t>(cols)),
                        draws[static_cast<size_t>(r)]);
  }
}

void CpuDevice::add_weighted_rows(const Tensor& src, std::span<const int32_t> rows,
                                  std::span<const float> weights, Tensor& dst) {
  const int64_t cols = src.ne[0];
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* s = src.f32() + static_cast<int64_t>(i) * cols;
    float* d = dst.f32() + static_cast<int64_t>(rows[i]) * cols;
    const float w = weights[i];
    for (int64_t c = 0; c < cols; ++c) d[c] += w * s[c];
  }
}

namespace {

// Elementwise over n floats in chunks of whole cache lines, spread over the pool.
void gated_parallel(cpu::GatedActivationFn fn, const Tensor& gate, const Tensor& up, Tensor& out,
                    ThreadPool& pool) {
  constexpr int64_t kChunk = 4096;
  const int64_t n = gate.elements();
  const float *g = gate.f32(), *u = up.f32();
  float* o = out.f32();
  if (n <= kChunk) return fn(g, u, o, n);
  pool.parallel_for(static_cast<size_t>((n + kChunk - 1) / kChunk),
                    [&](size_t begin, size_t end, size_t) {
                      const int64_t first = static_cast<int64_t>(begin) * kChunk;
                      const int64_t last = std::min(n, static_cast<int64_t>(end) * kChunk);
                      fn(g + first, u + first, o + first, last - first);
                    });
}

}  // namespace

void CpuDevice::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  gated_parallel(cpu::silu_mul_fn(cpu::default_cpu_path()), gate, up, out, pool_);
}

void CpuDevice::gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  gated_parallel(cpu::gelu_tanh_mul_fn(cpu::default_cpu_path()), gate, up, out, pool_);
}

void CpuDevice::rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& params) {
  const int64_t head_dim = x.ne[0], heads = x.ne[1], n = x.ne[2];
  const int64_t half = params.rotary_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(params.theta,
                              static_cast<float>(2 * i) / static_cast<float>(params.rotary_dim));
    if (!params.inverse_frequency_factors.empty())
      f /= params.inverse_frequency_factors[static_cast<size_t>(i)];
    inv_freq[static_cast<size_t>(i)] = f;
  }
  pool_.parallel_for(static_cast<size_t>(n), [&](size_t begin, size_t end, size_t) {
    std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
    for (size_t t = begin; t < end; ++t) {
      const float pos = static_cast<float>(positions[t]) * params.position_scale;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[static_cast<size_t>(i)];
        cos_v[static_cast<size_t>(i)] = std::cos(angle);
        sin_v[static_cast<size_t>(i)] = std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x.f32() + (static_cast<int64_t>(t) * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t a = params.neox ? i : 2 * i;
          const int64_t b = params.neox ? i + half : 2 * i + 1;
          const float c = cos_v[static_cast<size_t>(i)], s = sin_v[static_cast<size_t>(i)];
          const float x0 = v[a], x1 = v[b];
          v[a] = x0 * c - x1 * s;
          v[b] = x0 * s + x1 * c;
        }
      }
    }
  });
}

namespace {

size_t kv_row_bytes(TensorType type, int64_t head_dim) {
  const auto& info = tensor_type_info(type);
  return static_cast<size_t>(head_dim / info.block_elements) * info.block_bytes;
}

}  // namespace

void CpuDevice::store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                         std::span<const int32_t> slots) {
  const int64_t row = cache.head_dim;
  const size_t row_bytes = kv_row_bytes(cache.k.type, row);
  const int64_t heads = cache.kv_heads;
  for (size_t t = 0; t < slots.size(); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t dst_row = static_cast<size_t>(slots[t] * heads + h);
      const int64_t src = (static_cast<int64_t>(t) * heads + h) * row;
      cpu::quantize_row(cache.k.type, k.f32() + src,
                        static_cast<uint8_t*>(cache.k.data) + dst_row * row_bytes, row);
      cpu::quantize_row(cache.v.type, v.f32() + src,
                        static_cast<uint8_t*>(cache.v.data) + dst_row * row_bytes, row);
    }
  }
}

void CpuDevice::attention(const Tensor& q, const KvLayer& cache,
                          std::span<const AttentionSequence> sequences,
                          const AttentionParams& params, Tensor& out) {
  cpu_attention(q, cache, sequences, params, out, pool_);
}

}  // namespace tern

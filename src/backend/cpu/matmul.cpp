// matvec / matmul drivers: validate shapes, quantize activations into scratch, and split weight
// rows over the thread pool. Each weight row is read once per call (matmul keeps a tile of rows
// hot in cache while it visits every activation row). The bandwidth numbers of the kernels are in
// their own files and in bench/results/.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"

namespace tern::cpu {
namespace {

using detail::ActFormat;
using detail::Acts;
using detail::DotFn;

constexpr size_t align64(size_t n) {
  return (n + 63) & ~size_t{63};
}

DotFn pick_kernel(TensorType type, CpuPath path) {
  DotFn fn = nullptr;
  if (path == CpuPath::Avx512) fn = detail::dot_avx512(type);
  if (path == CpuPath::Avx2 || (path == CpuPath::Avx512 && fn == nullptr))
    fn = detail::dot_avx2(type);
  if (fn == nullptr) fn = detail::dot_scalar(type);
  return fn;
}

// The quantized activations of n rows, laid out in one scratch buffer.
struct PreparedActs {
  ActFormat format;
  int64_t cols;
  const float* f32 = nullptr;
  int8_t* qs = nullptr;
  float* d = nullptr;
  int32_t* isum = nullptr;
  float* ds = nullptr;
  int16_t* bsums = nullptr;

  Acts row(int64_t j) const {
    Acts a;
    if (format == ActFormat::F32) {
      a.f32 = f32 + j * cols;
    } else if (format == ActFormat::Q8x32) {
      a.qs = qs + j * cols;
      a.d = d + j * (cols / 32);
      a.isum = isum + j * (cols / 32);
      a.ds = ds + j * (cols / 32) * 2;
    } else {
      a.qs = qs + j * cols;
      a.d = d + j * (cols / 256);
      a.bsums = bsums + j * (cols / 16);
    }
    return a;
  }
};

PreparedActs prepare(TensorType type, CpuPath path, const float* x, int64_t n, int64_t cols,
                     Scratch& scratch, ThreadPool& pool) {
  PreparedActs p{detail::act_format(type), cols};
  if (p.format == ActFormat::F32) {
    p.f32 = x;
    return p;
  }
  const auto un = static_cast<size_t>(n), ucols = static_cast<size_t>(cols);
  const size_t block = p.format == ActFormat::Q8x32 ? 32 : 256;
  const size_t qs_bytes = align64(un * ucols);
  const size_t d_bytes = align64(un * (ucols / block) * sizeof(float));
  const size_t sum_bytes =
      align64(p.format == ActFormat::Q8x32 ? un * (ucols / 32) * sizeof(int32_t)
                                           : un * (ucols / 16) * sizeof(int16_t));
  const size_t ds_bytes = p.format == ActFormat::Q8x32 ? un * (ucols / 32) * 2 * sizeof(float) : 0;
  const size_t total = qs_bytes + d_bytes + sum_bytes + ds_bytes + 64;
  if (scratch.bytes.size() < total) scratch.bytes.resize(total);
  auto base = reinterpret_cast<uintptr_t>(scratch.bytes.data());
  std::byte* start = scratch.bytes.data() + (align64(base) - base);
  p.qs = reinterpret_cast<int8_t*>(start);
  p.d = reinterpret_cast<float*>(start + qs_bytes);
  void* sums = start + qs_bytes + d_bytes;
  if (p.format == ActFormat::Q8x32) {
    p.isum = static_cast<int32_t*>(sums);
    p.ds = reinterpret_cast<float*>(start + qs_bytes + d_bytes + sum_bytes);
  } else {
    p.bsums = static_cast<int16_t*>(sums);
  }
  const auto q32 = detail::quantize_acts_q8x32_fn(path);
  const auto q256 = detail::quantize_acts_q8x256_fn(path);
  auto quantize_rows = [&](size_t begin, size_t end, size_t) {
    for (size_t j = begin; j < end; ++j) {
      const auto row = static_cast<int64_t>(j);
      Acts a = p.row(row);
      if (p.format == ActFormat::Q8x32) {
        q32(x + row * cols, cols, const_cast<int8_t*>(a.qs), const_cast<float*>(a.d),
            const_cast<int32_t*>(a.isum));
        auto* ds = const_cast<float*>(a.ds);
        for (int64_t b = 0; b < cols / 32; ++b) {
          ds[2 * b] = a.d[b];
          ds[2 * b + 1] = a.d[b] * static_cast<float>(a.isum[b]);
        }
      } else {
        q256(x + row * cols, cols, const_cast<int8_t*>(a.qs), const_cast<float*>(a.d),
             const_cast<int16_t*>(a.bsums));
      }
    }
  };
  if (n > 1) {
    pool.parallel_for(un, quantize_rows);
  } else {
    quantize_rows(0, un, 0);
  }
  return p;
}

Result<void> check_shape(TensorType type, int64_t rows, int64_t cols, int64_t n) {
  if (!is_supported(type)) {
    return make_error("CPU matmul: weight type {} is not supported", tensor_type_name(type));
  }
  const int64_t block = tensor_type_info(type).block_elements;
  if (rows < 0 || n < 0 || cols <= 0 || cols % block != 0) {
    return make_error(
        "CPU matmul: {} weights need cols a positive multiple of {} (got rows={}, "
        "cols={}, n={})",
        tensor_type_name(type), block, rows, cols, n);
  }
  return ok_result();
}

}  // namespace

namespace detail {
QuantizeQ8x32Fn quantize_acts_q8x32_fn(CpuPath path) {
  switch (path) {
    case CpuPath::Avx512:
      return quantize_acts_q8x32_avx512;
    case CpuPath::Avx2:
      return quantize_acts_q8x32_avx2;
    default:
      return quantize_acts_q8x32;
  }
}
QuantizeQ8x256Fn quantize_acts_q8x256_fn(CpuPath path) {
  switch (path) {
    case CpuPath::Avx512:
      return quantize_acts_q8x256_avx512;
    case CpuPath::Avx2:
      return quantize_acts_q8x256_avx2;
    default:
      return quantize_acts_q8x256;
  }
}
}  // namespace detail

Result<void> matmul(TensorType type, const void* w, int64_t rows, int64_t cols, const float* x,
                    int64_t n, float* y, ThreadPool& pool, const KernelOptions& options) {
  TERN_TRY(check_shape(type, rows, cols, n));
  if (rows == 0 || n == 0) return ok_result();
  const CpuPath path = options.path.value_or(default_cpu_path());
  const DotFn dot = pick_kernel(type, path);
  Scratch local;
  Scratch& scratch = options.scratch ? *options.scratch : local;
  const PreparedActs acts = prepare(type, path, x, n, cols, scratch, pool);
  const size_t row_bytes = *tensor_bytes(type, static_cast<uint64_t>(cols));
  const auto* wbytes = static_cast<const std::byte*>(w);

  // Tiles of weight rows small enough to stay in L2 while all n activation rows pass over them.
  constexpr int64_t kTile = 16;
  const int64_t tiles = (rows + kTile - 1) / kTile;
  pool.parallel_for(
      static_cast<size_t>(n == 1 ? rows : tiles), [&](size_t begin, size_t end, size_t) {
        if (n == 1) {
          const Acts a = acts.row(0);
          for (size_t r = begin; r < end; ++r) y[r] = dot(wbytes + r * row_bytes, a, cols);
          return;
        }
        for (size_t t = begin; t < end; ++t) {
          const int64_t r0 = static_cast<int64_t>(t) * kTile;
          const int64_t r1 = std::min(rows, r0 + kTile);
          for (int64_t j = 0; j < n; ++j) {
            const Acts a = acts.row(j);
            for (int64_t r = r0; r < r1; ++r) {
              y[j * rows + r] = dot(wbytes + static_cast<size_t>(r) * row_bytes, a, cols);
            }
          }
        }
      });
  return ok_result();
}

Result<void> matvec(TensorType type, const void* w, int64_t rows, int64_t cols, const float* x,
                    float* y, ThreadPool& pool, const KernelOptions& options) {
  return matmul(type, w, rows, cols, x, 1, y, pool, options);
}

}  // namespace tern::cpu

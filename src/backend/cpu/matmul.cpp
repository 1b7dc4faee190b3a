// matvec / matmul drivers: validate shapes, quantize activations into scratch, and split weight
// rows over the thread pool. Each weight row is read once per call (matmul keeps a tile of rows
// hot in cache while it visits every activation row). The bandwidth numbers of the kernels are in
// their own files and in bench/results/cpu-kernels.md.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/packed.h"
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
  float* lane_d = nullptr;       // [n x cols/4] when prepared for a GemmKernel with lanes
  int32_t* lane_bias = nullptr;  // bias types
  float* lane_dsum = nullptr;    // affine types

  Acts row(int64_t j) const {
    Acts a;
    if (format == ActFormat::F32) {
      a.f32 = f32 + j * cols;
    } else if (format == ActFormat::Q8x32) {
      a.qs = qs + j * cols;
      a.d = d + j * (cols / 32);
      a.isum = isum + j * (cols / 32);
      a.ds = ds + j * (cols / 32) * 2;
      if (lane_d) a.lane_d = lane_d + j * (cols / 4);
      if (lane_bias) a.lane_bias = lane_bias + j * (cols / 4);
      if (lane_dsum) a.lane_dsum = lane_dsum + j * (cols / 4);
    } else {
      a.qs = qs + j * cols;
      a.d = d + j * (cols / 256);
      a.bsums = bsums + j * (cols / 16);
    }
    return a;
  }
};

// The per-lane data of one prepared Q8x32 row for a GemmKernel (kernels.h, Acts::lane_*).
void fill_lanes(const Acts& a, int64_t cols, const detail::GemmKernel& g, float* lane_d,
                int32_t* lane_bias, float* lane_dsum) {
  for (int64_t l = 0; l < cols / 4; ++l) {
    const int8_t* q = a.qs + 4 * l;
    const int32_t sum = int32_t{q[0]} + q[1] + q[2] + q[3];
    const float d = a.d[l / 8];
    lane_d[l] = d;
    if (g.affine) {
      lane_dsum[l] = d * static_cast<float>(sum);
    } else {
      lane_bias[l] = -g.bias * sum;
    }
  }
}

PreparedActs prepare(TensorType type, CpuPath path, const float* x, int64_t n, int64_t cols,
                     Scratch& scratch, ThreadPool& pool, const detail::GemmKernel& gemm) {
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
  const bool lanes = gemm.fn != nullptr && gemm.lanes && p.format == ActFormat::Q8x32;
  const size_t lane_bytes = lanes ? align64(un * (ucols / 4) * sizeof(float)) : 0;
  const size_t total = align64(qs_bytes + d_bytes + sum_bytes + ds_bytes) + 2 * lane_bytes + 64;
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
  if (lanes) {
    std::byte* lane_base = start + align64(qs_bytes + d_bytes + sum_bytes + ds_bytes);
    p.lane_d = reinterpret_cast<float*>(lane_base);
    if (gemm.affine) {
      p.lane_dsum = reinterpret_cast<float*>(lane_base + lane_bytes);
    } else {
      p.lane_bias = reinterpret_cast<int32_t*>(lane_base + lane_bytes);
    }
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
        if (lanes) {
          fill_lanes(a, cols, gemm, p.lane_d + row * (cols / 4),
                     p.lane_bias ? p.lane_bias + row * (cols / 4) : nullptr,
                     p.lane_dsum ? p.lane_dsum + row * (cols / 4) : nullptr);
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
  detail::GemmKernel gemm;
  // n = 1 keeps the dot kernels: in DRAM-resident matvecs the multi-row kernel is 20-60% slower
  // (bench/results/cpu-kernels.md). Rows of the multi-row kernel do not depend on
  // their group, so the scheduler recomputes at least two prompt tokens after a prefix hit.
  if (n > 1 && path == CpuPath::Avx512) gemm = detail::gemm_avx512(type);
  if (n > 1 && path == CpuPath::Avx2) gemm = detail::gemm_avx2(type);
  Scratch local;
  Scratch& scratch = options.scratch ? *options.scratch : local;
  const PreparedActs acts = prepare(type, path, x, n, cols, scratch, pool, gemm);
  const size_t row_bytes = *tensor_bytes(type, static_cast<uint64_t>(cols));
  const auto* wbytes = static_cast<const std::byte*>(w);

  if (gemm.fn != nullptr) {
    // Tiles of weight rows (in L2) x groups of kGemmRows activation rows (in L1): each group
    // passes over the tile's rows, each weight block decoded once per group.
    constexpr int64_t kGemmTile = 32;
    const int64_t gemm_tiles = (rows + kGemmTile - 1) / kGemmTile;
    // Tiles are handed out one at a time from a shared counter rather than split evenly up
    // front: on a shared machine one thread is often descheduled, and the others take its tiles.
    std::atomic<int64_t> next_tile{0};
    const size_t workers = std::min(pool.size(), static_cast<size_t>(gemm_tiles));
    pool.parallel_for(workers, [&](size_t, size_t, size_t) {
      for (int64_t t = next_tile.fetch_add(1); t < gemm_tiles; t = next_tile.fetch_add(1)) {
        const int64_t r0 = t * kGemmTile;
        const int64_t r1 = std::min(rows, r0 + kGemmTile);
        for (int64_t j = 0; j < n; j += detail::kGemmRows) {
          const int group = static_cast<int>(std::min<int64_t>(detail::kGemmRows, n - j));
          Acts a[detail::kGemmRows];
          for (int k = 0; k < group; ++k) a[k] = acts.row(j + k);
          for (int64_t r = r0; r < r1; ++r) {
            gemm.fn(wbytes + static_cast<size_t>(r) * row_bytes, a, group, cols, y + j * rows + r,
                    rows);
          }
        }
      }
    });
    return ok_result();
  }

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

// The packed kernel of a path: AVX-512 VNNI's, or AVX2's (Q4_0, Q4_1, Q4_K). Weights packed on an
// AVX-512 machine keep its kernels under TERN_CPU_PATH=avx2 for the types AVX2 has none for.
static detail::GemmFn packed_kernel(TensorType type, CpuPath path) {
  detail::GemmFn k =
      path == CpuPath::Avx512 ? detail::packed_avx512(type) : detail::packed_avx2(type);
  if (k == nullptr && default_cpu_path() == CpuPath::Avx512) k = detail::packed_avx512(type);
  return k;
}

Result<void> matmul_packed(TensorType type, const void* packed, int64_t rows, int64_t cols,
                           const float* x, int64_t n, float* y, ThreadPool& pool,
                           const KernelOptions& options) {
  TERN_TRY(check_shape(type, rows, cols, n));
  const CpuPath path = options.path.value_or(default_cpu_path());
  const detail::GemmFn kernel = packed_kernel(type, path);
  if (rows % kPackRows != 0 || kernel == nullptr) {
    return make_error("CPU matmul: no packed {} kernel for {} rows", tensor_type_name(type), rows);
  }
  if (rows == 0 || n == 0) return ok_result();
  Scratch local;
  Scratch& scratch = options.scratch ? *options.scratch : local;
  const PreparedActs acts = prepare(type, path, x, n, cols, scratch, pool, {});
  const size_t group_bytes = packed_bytes(type, kPackRows, cols);
  const auto* wbytes = static_cast<const std::byte*>(packed);
  const int64_t groups = rows / kPackRows;

  if (n == 1) {
    // Decode: the weights stream from DRAM; one contiguous share per thread keeps each stream
    // sequential for the prefetchers.
    const Acts a = acts.row(0);
    pool.parallel_for(static_cast<size_t>(groups), [&](size_t begin, size_t end, size_t) {
      for (size_t g = begin; g < end; ++g)
        kernel(wbytes + g * group_bytes, &a, 1, cols, y + g * kPackRows, rows);
    });
    return ok_result();
  }
  // Prefill: tiles of groups (in L2) x chunks of kGemmRows activation rows; tiles are taken from
  // a shared counter so a descheduled thread's share is picked up by the others.
  constexpr int64_t kTileGroups = 4;
  const int64_t tiles = (groups + kTileGroups - 1) / kTileGroups;
  std::atomic<int64_t> next_tile{0};
  const size_t workers = std::min(pool.size(), static_cast<size_t>(tiles));
  pool.parallel_for(workers, [&](size_t, size_t, size_t) {
    for (int64_t t = next_tile.fetch_add(1); t < tiles; t = next_tile.fetch_add(1)) {
      const int64_t g0 = t * kTileGroups, g1 = std::min(groups, g0 + kTileGroups);
      for (int64_t j = 0; j < n; j += detail::kGemmRows) {
        const int count = static_cast<int>(std::min<int64_t>(detail::kGemmRows, n - j));
        Acts a[detail::kGemmRows];
        for (int k = 0; k < count; ++k) a[k] = acts.row(j + k);
        for (int64_t g = g0; g < g1; ++g) {
          kernel(wbytes + static_cast<size_t>(g) * group_bytes, a, count, cols,
                 y + j * rows + g * kPackRows, rows);
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

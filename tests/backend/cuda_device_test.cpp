// Every op of CudaDevice against CpuDevice on random inputs: matmul of every weight type (decode
// GEMV paths and the prefill GEMM, sizes that are not multiples of the kernels' tiles),
// get_rows, the element-wise ops, RoPE, and store_kv + paged attention for every KV type over
// several sequences of different lengths with scattered block tables, sliding window and
// soft-capping. Skipped when no CUDA GPU is present. The largest error of each case is printed
// (and recorded as a test property) for bench/README.md and bench/results/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cpu/quant.h"
#include "backend/cpu_device/cpu_device.h"
#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_device.h"
#include "base/fp16.h"
#include "ops/ops.h"
#include "test_util.h"

namespace tern {
namespace {

struct Diff {
  double max_abs = 0, rel_rms = 0;
};

Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  double err = 0, norm = 0;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    if (!std::isfinite(got[i])) d.max_abs = INFINITY;
    d.max_abs = std::max(d.max_abs, std::fabs(e));
    err += e * e;
    norm += static_cast<double>(want[i]) * want[i];
  }
  d.rel_rms = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
  return d;
}

void report(const std::string& what, const Diff& d) {
  std::printf("[cuda-op] %-44s max_abs %.3g rel_rms %.3g\n", what.c_str(), d.max_abs, d.rel_rms);
  ::testing::Test::RecordProperty(what, std::to_string(d.rel_rms));
}

TEST(CudaDevice, WithoutAGpuCreationSaysSo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA GPU is present";
  auto d = CudaDevice::create(0);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message, "no CUDA GPU found");
}

TEST(CudaAllocator, BucketsRoundUpWithLittleSlack) {
  for (size_t bytes : {size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{4096},
                       size_t{1} << 20, (size_t{1} << 20) + 1, size_t{123456789}}) {
    const size_t b = cuda::CachingAllocator::bucket(bytes);
    EXPECT_GE(b, bytes);
    EXPECT_EQ(b % 256, 0u);
    if (bytes > (size_t{1} << 20)) {
      EXPECT_LE(b, bytes + bytes / 8) << bytes;
    }
    EXPECT_EQ(cuda::CachingAllocator::bucket(b), b) << "a bucket's size is its own bucket";
  }
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
    auto d = CudaDevice::create(0);
    ASSERT_TRUE(d.ok()) << d.error().message;
    gpu_ = std::move(*d);
  }

  // A GPU tensor holding `bytes` of host data.
  Tensor gpu_tensor(const void* data, size_t bytes, TensorType type, std::array<int64_t, 4> ne) {
    auto b = gpu_->allocate(bytes);
    EXPECT_TRUE(b.ok());
    gpu_->upload(data, b->data(), bytes);
    Tensor t;
    t.data = b->data();
    t.type = type;
    t.ne = ne;
    buffers_.push_back(std::move(*b));
    return t;
  }
  Tensor gpu_f32(const std::vector<float>& v, std::array<int64_t, 4> ne) {
    return gpu_tensor(v.data(), v.size() * 4, TensorType::F32, ne);
  }
  // A GPU F32 tensor filled with NaN, so unwritten outputs show.
  Tensor gpu_poisoned(std::array<int64_t, 4> ne) {
    std::vector<float> nan(static_cast<size_t>(ne[0] * ne[1] * ne[2] * ne[3]), NAN);
    return gpu_f32(nan, ne);
  }
  void run_fused_decode_ops(const std::array<TensorType, 5>& types, int64_t tokens = 1,
                            bool qk_norm = true, int64_t head_dim = 64);
  std::vector<float> read(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.elements()));
    gpu_->download(t.data, v.data(), v.size() * 4);
    auto ok = gpu_->synchronize();
    EXPECT_TRUE(ok.ok()) << ok.error().message;
    return v;
  }
  // A host tensor over GGUF blocks (for the CPU device).
  static Tensor host_blocks(std::vector<uint8_t>& w, TensorType type, std::array<int64_t, 4> ne) {
    Tensor t;
    t.data = w.data();
    t.type = type;
    t.ne = ne;
    return t;
  }
  static Tensor host(std::vector<float>& v, std::array<int64_t, 4> ne) {
    Tensor t;
    t.data = v.data();
    t.ne = ne;
    return t;
  }
  std::vector<float> random(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng_);
    return v;
  }

  std::mt19937 rng_{1234};
  CpuDevice cpu_{4};
  std::unique_ptr<CudaDevice> gpu_;
  std::vector<DeviceBuffer> buffers_;
};

// Double-precision reference of W . x from the CPU dequantizer; `scale` gets each output's natural
// error scale, sqrt(sum_i (w_i x_i)^2), which a single dot product that cancels to near zero
// does not shrink.
std::vector<float> reference_matmul(TensorType type, const std::vector<uint8_t>& w, int64_t m,
                                    int64_t k, const std::vector<float>& x, int64_t n,
                                    std::vector<double>& scale) {
  scale.assign(static_cast<size_t>(n * m), 0.0);
  const auto& info = tensor_type_info(type);
  const size_t rb = static_cast<size_t>(k / info.block_elements) * info.block_bytes;
  std::vector<float> row(static_cast<size_t>(k)), y(static_cast<size_t>(n * m));
  for (int64_t r = 0; r < m; ++r) {
    cpu::dequantize_row(type, w.data() + static_cast<size_t>(r) * rb, row.data(), k);
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, s2 = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(row[i]) * x[j * k + i];
        s += p;
        s2 += p * p;
      }
      y[j * m + r] = static_cast<float>(s);
      scale[static_cast<size_t>(j * m + r)] = std::sqrt(s2);
    }
  }
  return y;
}

// up and SiLU(gate) * up as a fused gate/up launch wrote them (act), against the reference on x:
// each within `tol` of its output's error scale.
::testing::AssertionResult gate_up_match(TensorType type, const std::vector<uint8_t>& wg,
                                         const std::vector<uint8_t>& wu, int64_t m, int64_t k,
                                         const std::vector<float>& x, const std::vector<float>& act,
                                         const std::vector<float>& up, double tol) {
  std::vector<double> sg, su;
  const auto ng = reference_matmul(type, wg, m, k, x, 1, sg);
  const auto nu = reference_matmul(type, wu, m, k, x, 1, su);
  for (int64_t r = 0; r < m; ++r) {
    if (!(std::fabs(static_cast<double>(up[r]) - nu[r]) / su[r] < tol)) {
      return ::testing::AssertionFailure() << "up, row " << r;
    }
    const double gv = ng[r], want = gv / (1.0 + std::exp(-gv)) * nu[r];
    const double scale = (sg[r] + std::fabs(gv)) * (std::fabs(nu[r]) + su[r]) + 1e-30;
    if (!(std::fabs(act[r] - want) / scale < tol)) {
      return ::testing::AssertionFailure() << "silu(gate) * up, row " << r;
    }
  }
  return ::testing::AssertionSuccess();
}

const TensorType kWeightTypes[] = {
    TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0,   TensorType::Q4_1,
    TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K,   TensorType::Q3_K,
    TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS};

TEST_F(CudaOps, MatmulEveryTypeAndShapeMatchesTheReference) {
  for (TensorType type : kWeightTypes) {
    const auto& info = tensor_type_info(type);
    const bool is_float = info.block_elements == 1;
    // k: below one warp of tasks, odd numbers of blocks, and not a multiple of 8 for floats.
    std::vector<int64_t> ks = {info.block_elements == 256 ? 768 : 96,
                               info.block_elements == 256 ? 4352 : 4128};
    if (is_float) ks.push_back(100);
    // A multiple of 256 for 32-element block types too (the row-pair GEMV takes those).
    if (!is_float && info.block_elements == 32) ks.push_back(1024);
    for (int64_t k : ks) {
      for (int64_t m : {1, 37, 515}) {
        auto w = testing::random_weights(type, m, k, rng_);
        Tensor gw = gpu_tensor(w.data(), w.size(), type, {k, m, 1, 1});
        for (int64_t n : {1, 3, 8, 9, 33}) {
          auto x = random(static_cast<size_t>(n * k));
          std::vector<double> scale;
          auto want = reference_matmul(type, w, m, k, x, n, scale);
          Tensor gx = gpu_f32(x, {k, n, 1, 1});
          for (bool int8 : {true, false}) {
            if (!int8 && (n > 8 || is_float)) continue;
            gpu_->set_int8_gemv(int8);
            Tensor gy = gpu_poisoned({m, n, 1, 1});
            auto ok = gpu_->matmul(gw, gx, gy);
            ASSERT_TRUE(ok.ok()) << ok.error().message;
            const auto got = read(gy);
            const Diff d = compare(got, want);
            double worst = 0;  // largest error in units of the output's error scale
            for (size_t i = 0; i < got.size(); ++i) {
              const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / scale[i];
              worst = std::isfinite(e) ? std::max(worst, e) : INFINITY;
            }
            // 8-bit activations: each product off by ~0.5%, BF16 GEMM operands ~0.3%; F32 sums.
            // (n > 8 with quantized weights: the BF16 GEMM, or gemm_q8 when TERN_CUDA_MMQ=1.)
            const double tol = n > 8      ? (type == TensorType::F32 ? 1e-5
                                             : is_float              ? 3e-2
                                                                     : 5e-2)
                               : is_float ? 1e-5
                               : int8     ? 5e-2
                                          : 1e-5;
            const std::string name =
                fmt::format("matmul {} m{} k{} n{}{}", info.name, m, k, n,
                            n <= 8 && !is_float ? (int8 ? " q8" : " f32") : "");
            if (m == 515 && k == ks[1]) report(name, d);
            EXPECT_LT(worst, tol) << name << " (rel rms " << d.rel_rms << ")";
          }
        }
        gpu_->set_int8_gemv(true);
      }
    }
  }
}

// The GPU's 8-bit products quantize activations as the CPU backend does (one scale per 32 values,
// per 256 for the K-quants) and multiply the same integers, so for every n (the decode GEMVs for
// n <= 8, gemv_mma when TERN_CUDA_GEMV_MMA=1, the int8 prefill GEMM gemm_q8 for n > 8) they
// equal the CPU backend's matmul up to the float summation order. A different 8-bit activation
// anywhere shows as an error of ~1e-3 of the output's scale; summation order as ~1e-6.
TEST_F(CudaOps, Int8ProductsEqualTheCpuBackend) {
  const TensorType types[] = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                              TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K,
                              TensorType::Q5_K, TensorType::Q6_K};
  gpu_->set_int8_prefill(true);
  for (TensorType type : types) {
    const auto& info = tensor_type_info(type);
    // 20 blocks of 32 (a partial chunk of gemm_q8's 8) or 3 super-blocks; and for the 32-element
    // types a multiple of 256 too (Q8_0's row-pair GEMV takes those, as a model's 256-wide
    // down projection does).
    std::vector<int64_t> ks = {info.block_elements == 256 ? 768 : 640};
    if (info.block_elements == 32) ks.push_back(256);
    for (int64_t k : ks) {
      // 256 rows: a multiple of the packed layout's 16-row groups.
      for (int64_t m : {37, 515, 256}) {
        auto w = testing::random_weights(type, m, k, rng_);
        Tensor gw = gpu_tensor(w.data(), w.size(), type, {k, m, 1, 1});
        const Tensor cw = host_blocks(w, type, {k, m, 1, 1});
        // The layout the CPU backend gives a model's weights (row-interleaved for its VNNI
        // kernels where the CPU has them): packed from a copy (packing releases the source pages).
        auto copy = w;
        std::vector<DeviceBuffer> owned;
        auto packed = cpu_.prepare_matmul_weight(host_blocks(copy, type, {k, m, 1, 1}), owned);
        ASSERT_TRUE(packed.ok()) << packed.error().message;
        const bool is_packed = packed->layout == WeightLayout::DevicePacked;
        for (int64_t n : {1, 3, 8, 9, 33, 100, 130}) {
          auto x = random(static_cast<size_t>(n * k));
          std::vector<double> scale;
          (void)reference_matmul(type, w, m, k, x, n, scale);
          std::vector<float> want(static_cast<size_t>(n * m)), want_packed(want.size());
          Tensor cx = host(x, {k, n, 1, 1}), cy = host(want, {m, n, 1, 1});
          ASSERT_TRUE(cpu_.matmul(cw, cx, cy).ok());
          Tensor cyp = host(want_packed, {m, n, 1, 1});
          ASSERT_TRUE(cpu_.matmul(*packed, cx, cyp).ok());
          Tensor gx = gpu_f32(x, {k, n, 1, 1});
          Tensor gy = gpu_poisoned({m, n, 1, 1});
          auto ok = gpu_->matmul(gw, gx, gy);
          ASSERT_TRUE(ok.ok()) << ok.error().message;
          const auto got = read(gy);
          double worst = 0, worst_packed = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / scale[i];
            const double ep = std::fabs(static_cast<double>(got[i]) - want_packed[i]) / scale[i];
            worst = std::isfinite(e) ? std::max(worst, e) : INFINITY;
            worst_packed = std::isfinite(ep) ? std::max(worst_packed, ep) : INFINITY;
          }
          const std::string name =
              fmt::format("int8 matmul vs cpu {} m{} k{} n{}", info.name, m, k, n);
          if (m == 515) report(name, compare(got, want));
          EXPECT_LT(worst, 2e-5) << name;
          if (is_packed) {
            report(name + " (cpu packed)", compare(got, want_packed));
            EXPECT_LT(worst_packed, 2e-5) << name << " against the CPU's packed weights";
          }
        }
      }
    }
  }
  gpu_->set_int8_prefill(false);
}

// The n = 1 row-pair products of 16- and 32-bit weights (a block of four warps a pair): row
// counts odd and past a wave of blocks, with k leaving a partial run of steps (and for 1032 no
// whole run at all), alone and as a fused gate/up + SiLU.
TEST_F(CudaOps, FloatRowPairsMatchTheReference) {
  for (TensorType type : {TensorType::BF16, TensorType::F16, TensorType::F32}) {
    for (int64_t m : {515, 4225, 8449}) {
      for (int64_t k : {1032, 4104}) {
        auto wg = testing::random_weights(type, m, k, rng_);
        auto wu = testing::random_weights(type, m, k, rng_);
        auto x = random(static_cast<size_t>(k));
        std::vector<double> sg;
        const auto want_g = reference_matmul(type, wg, m, k, x, 1, sg);
        Tensor tg = gpu_tensor(wg.data(), wg.size(), type, {k, m, 1, 1});
        Tensor tu = gpu_tensor(wu.data(), wu.size(), type, {k, m, 1, 1});
        Tensor gx = gpu_f32(x, {k, 1, 1, 1});
        const std::string name = fmt::format("{} m{} k{}", tensor_type_info(type).name, m, k);
        // Alone (the first op queued, so nothing to fuse with).
        Tensor y = gpu_poisoned({m, 1, 1, 1});
        ASSERT_TRUE(gpu_->matmul(tg, gx, y).ok());
        const auto got = read(y);
        for (int64_t r = 0; r < m; ++r) {
          const double e = std::fabs(static_cast<double>(got[r]) - want_g[r]) / sg[r];
          ASSERT_LT(e, 1e-5) << name << " row " << r;
        }
        // gate, up, silu(gate) * up: one launch when fusion is on.
        Tensor g = gpu_poisoned({m, 1, 1, 1}), u = gpu_poisoned({m, 1, 1, 1});
        gpu_->rms_norm(gx, nullptr, 1e-6f, gx);  // an op before, as in a layer
        ASSERT_TRUE(gpu_->matmul(tg, gx, g).ok());
        ASSERT_TRUE(gpu_->matmul(tu, gx, u).ok());
        gpu_->silu_mul(g, u, g);
        EXPECT_TRUE(gate_up_match(type, wg, wu, m, k, read(gx), read(g), read(u), 1e-5)) << name;
      }
    }
  }
}

// The n = 1 gate/up products of 8-bit blocks fused with SiLU(gate) * up (the row-pair kernels),
// against the reference on the normed x: rows from under one a warp to several waves of warps,
// and k of 4 and 16 superblocks.
TEST_F(CudaOps, QuantizedGateUpProductsMatchTheReference) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0}) {
    for (int64_t m : {515, 8449}) {
      for (int64_t k : {1024, 4096}) {
        auto wg = testing::random_weights(type, m, k, rng_);
        auto wu = testing::random_weights(type, m, k, rng_);
        auto x = random(static_cast<size_t>(k));
        Tensor tg = gpu_tensor(wg.data(), wg.size(), type, {k, m, 1, 1});
        Tensor tu = gpu_tensor(wu.data(), wu.size(), type, {k, m, 1, 1});
        Tensor gx = gpu_f32(x, {k, 1, 1, 1});
        const std::string name = fmt::format("{} m{} k{}", tensor_type_info(type).name, m, k);
        Tensor g = gpu_poisoned({m, 1, 1, 1}), u = gpu_poisoned({m, 1, 1, 1});
        gpu_->rms_norm(gx, nullptr, 1e-6f, gx);  // the op before, which quantizes x
        ASSERT_TRUE(gpu_->matmul(tg, gx, g).ok());
        ASSERT_TRUE(gpu_->matmul(tu, gx, u).ok());
        gpu_->silu_mul(g, u, g);
        // 8-bit activations: each product off by ~0.5% (as MatmulEveryTypeAndShape allows).
        EXPECT_TRUE(gate_up_match(type, wg, wu, m, k, read(gx), read(g), read(u), 5e-2)) << name;
      }
    }
  }
}

TEST_F(CudaOps, MatmulRejectsBadShapes) {
  auto w = random(64 * 8);
  Tensor gw = gpu_f32(w, {64, 8, 1, 1});
  Tensor gx = gpu_poisoned({63, 1, 1, 1});
  Tensor gy = gpu_poisoned({8, 1, 1, 1});
  EXPECT_FALSE(gpu_->matmul(gw, gx, gy).ok());
}

TEST_F(CudaOps, GetRowsEveryTypeIsExact) {
  for (TensorType type : kWeightTypes) {
    const auto& info = tensor_type_info(type);
    const int64_t cols = info.block_elements == 256 ? 512 : 160, rows = 50;
    auto w = testing::random_weights(type, rows, cols, rng_);
    Tensor gw = gpu_tensor(w.data(), w.size(), type, {cols, rows, 1, 1});
    const Tensor cw = host_blocks(w, type, {cols, rows, 1, 1});
    const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
    std::vector<float> want(ids.size() * static_cast<size_t>(cols));
    Tensor co = host(want, {cols, 5, 1, 1});
    ASSERT_TRUE(cpu_.get_rows(cw, ids, co).ok());
    Tensor go = gpu_poisoned({cols, 5, 1, 1});
    ASSERT_TRUE(gpu_->get_rows(gw, ids, go).ok());
    const Diff d = compare(read(go), want);
    report(fmt::format("get_rows {}", info.name), d);
    EXPECT_EQ(d.max_abs, 0.0) << info.name;
    const std::vector<int32_t> bad = {50};
    EXPECT_FALSE(gpu_->get_rows(gw, bad, go).ok());
  }
}

TEST_F(CudaOps, ElementwiseOpsMatchTheCpu) {
  const int64_t rows = 7, cols = 1000;
  const size_t n = static_cast<size_t>(rows * cols);
  auto a = random(n), b = random(n), wv = random(static_cast<size_t>(cols));
  Tensor ga = gpu_f32(a, {cols, rows, 1, 1}), gb = gpu_f32(b, {cols, rows, 1, 1});
  Tensor gw = gpu_f32(wv, {cols, 1, 1, 1});
  auto run = [&](const std::string& name, auto&& cpu_op, auto&& gpu_op, double tol) {
    std::vector<float> ca = a, cb = b, co(n, 0.0f);
    Tensor ta = host(ca, {cols, rows, 1, 1}), tb = host(cb, {cols, rows, 1, 1}),
           to = host(co, {cols, rows, 1, 1});
    cpu_op(ta, tb, to);
    Tensor ga2 = gpu_f32(a, {cols, rows, 1, 1});
    Tensor go = gpu_poisoned({cols, rows, 1, 1});
    gpu_op(ga2, gb, go);
    // In-place ops write their first operand; the others `out`.
    const bool in_place =
        name == "add_row_vector" || name == "scale" || name == "add_weighted_rows";
    const Diff d = compare(read(in_place ? ga2 : go), in_place ? ca : co);
    report(name, d);
    EXPECT_LT(d.rel_rms, tol) << name;
  };
  std::vector<float> wcopy = wv;
  Tensor tw = host(wcopy, {cols, 1, 1, 1});
  run(
      "rms_norm", [&](Tensor& x, Tensor&, Tensor& o) { cpu_.rms_norm(x, &tw, 1e-6f, o); },
      [&](Tensor& x, Tensor&, Tensor& o) { gpu_->rms_norm(x, &gw, 1e-6f, o); }, 1e-6);
  run(
      "rms_norm (no weight)",
      [&](Tensor& x, Tensor&, Tensor& o) { cpu_.rms_norm(x, nullptr, 1e-5f, o); },
      [&](Tensor& x, Tensor&, Tensor& o) { gpu_->rms_norm(x, nullptr, 1e-5f, o); }, 1e-6);
  run(
      "add", [&](Tensor& x, Tensor& y, Tensor& o) { cpu_.add(x, y, o); },
      [&](Tensor& x, Tensor& y, Tensor& o) { gpu_->add(x, y, o); }, 1e-7);
  run(
      "add_row_vector", [&](Tensor& x, Tensor&, Tensor&) { cpu_.add_row_vector(x, tw); },
      [&](Tensor& x, Tensor&, Tensor&) { gpu_->add_row_vector(x, gw); }, 1e-7);
  run(
      "scale", [&](Tensor& x, Tensor&, Tensor&) { cpu_.scale(x, 3.5f); },
      [&](Tensor& x, Tensor&, Tensor&) { gpu_->scale(x, 3.5f); }, 1e-7);
  // Three rows of b scattered, weighted, into rows 5, 0 and 3 of a (a MoE expert's outputs).
  const std::vector<int32_t> dst_rows = {5, 0, 3};
  const std::vector<float> row_weights = {0.5f, -2.0f, 1.25f};
  run(
      "add_weighted_rows",
      [&](Tensor& x, Tensor& y, Tensor&) {
        cpu_.add_weighted_rows(y.row_slice(0, 3), dst_rows, row_weights, x);
      },
      [&](Tensor& x, Tensor& y, Tensor&) {
        gpu_->add_weighted_rows(y.row_slice(0, 3), dst_rows, row_weights, x);
      },
      1e-7);
  run(
      "silu_mul", [&](Tensor& x, Tensor& y, Tensor& o) { cpu_.silu_mul(x, y, o); },
      [&](Tensor& x, Tensor& y, Tensor& o) { gpu_->silu_mul(x, y, o); }, 1e-6);
  run(
      "gelu_tanh_mul", [&](Tensor& x, Tensor& y, Tensor& o) { cpu_.gelu_tanh_mul(x, y, o); },
      [&](Tensor& x, Tensor& y, Tensor& o) { gpu_->gelu_tanh_mul(x, y, o); }, 1e-6);
  (void)ga;
}

TEST_F(CudaOps, ArgmaxRowsPicksTheFirstMaximumLikeTheCpu) {
  // Widths: tiny, not a multiple of 4 (rows then start unaligned), Qwen3's vocabulary, and one
  // past the 16K elements a block's unrolled pass covers.
  for (const int64_t cols :
       {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{151936}, int64_t{16385}}) {
    const int64_t rows = 5;
    auto x = random(static_cast<size_t>(rows * cols));
    // Row 1: a tie between two maxima (the first must win); row 2: all equal; row 3: the
    // maximum in the last element; row 4: -inf everywhere but one element.
    auto at = [&](int64_t r, int64_t c) -> float& { return x[static_cast<size_t>(r * cols + c)]; };
    if (cols > 2) {
      at(1, cols / 3) = 50.0f;
      at(1, cols - 1) = 50.0f;
    }
    for (int64_t c = 0; c < cols; ++c) at(2, c) = 0.25f;
    at(3, cols - 1) = 99.0f;
    for (int64_t c = 0; c < cols; ++c) at(4, c) = -INFINITY;
    at(4, cols / 2) = -1e30f;
    std::vector<int32_t> want(static_cast<size_t>(rows));
    Tensor hx = host(x, {cols, rows, 1, 1});
    cpu_.argmax_rows(hx, want.data());
    Tensor gx = gpu_f32(x, {cols, rows, 1, 1});
    auto ids = gpu_->allocate(static_cast<size_t>(rows) * sizeof(int32_t));
    ASSERT_TRUE(ids.ok());
    gpu_->argmax_rows(gx, static_cast<int32_t*>(ids->data()));
    std::vector<int32_t> got(static_cast<size_t>(rows), -7);
    gpu_->download(ids->data(), got.data(), got.size() * sizeof(int32_t));
    ASSERT_TRUE(gpu_->synchronize().ok());
    EXPECT_EQ(got, want) << cols << " columns";
    if (cols > 2) {
      EXPECT_EQ(want[1], cols / 3);
    }
    EXPECT_EQ(want[2], 0);
    EXPECT_EQ(want[3], cols - 1);
  }
}

// Temperature sampling on the GPU (sort + walk) picks what the host's pick_token picks from the
// same row and draw: whole vocabularies (SmolLM2's, Qwen3's), ties, every cut (top-k, min-p,
// top-p) and several rows at once (a batch of sequences). Float exp and double sums in another
// order can differ in the last bits, which moves a pick only when a draw lands within ~1e-12 of
// a boundary: never in these 1,440 draws.
TEST_F(CudaOps, SampleRowsPicksWhatTheHostPicks) {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t cols : {1000, 49152, 151936}) {
    const int64_t rows = 3;
    auto x = random(static_cast<size_t>(rows * cols), 3.0f);
    for (size_t i = 0; i < x.size(); i += 3) x[i] = std::round(x[i] * 2.0f) / 2.0f;  // ties
    Tensor gx = gpu_f32(x, {cols, rows, 1, 1});
    auto ids = gpu_->allocate(static_cast<size_t>(rows) * sizeof(int32_t));
    ASSERT_TRUE(ids.ok());
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<SampleDraw> draws(static_cast<size_t>(rows));
      for (auto& d : draws) {
        d.temperature = trial % 2 == 0 ? 1.0f : 0.6f;
        d.top_k = trial % 4 == 1 ? 40 : 0;
        d.top_p = trial % 4 == 2 ? 0.9f : 1.0f;
        d.min_p = trial % 4 == 3 ? 0.05f : 0.0f;
        d.uniform = uniform(rng_);
      }
      for (int rep = 0; rep < 20; ++rep) {
        for (auto& d : draws) d.uniform = uniform(rng_);
        gpu_->sample_rows(gx, draws, static_cast<int32_t*>(ids->data()));
        std::vector<int32_t> got(static_cast<size_t>(rows), -7);
        gpu_->download(ids->data(), got.data(), got.size() * sizeof(int32_t));
        ASSERT_TRUE(gpu_->synchronize().ok());
        for (int64_t r = 0; r < rows; ++r) {
          const std::span<const float> row(x.data() + r * cols, static_cast<size_t>(cols));
          EXPECT_EQ(got[static_cast<size_t>(r)], pick_token(row, draws[static_cast<size_t>(r)]))
              << cols << " columns, trial " << trial << ", row " << r;
        }
      }
    }
  }
}

TEST_F(CudaOps, RopeMatchesTheCpu) {
  const int64_t head_dim = 64, heads = 3, n = 6;
  const std::vector<int32_t> positions = {0, 17, 1000, 16000, 33, 40959};
  for (bool neox : {false, true}) {
    for (bool factors : {false, true}) {
      RopeParams p;
      p.rotary_dim = 48;
      p.theta = 1000000.0f;
      p.neox = neox;
      p.position_scale = factors ? 0.25f : 1.0f;
      if (factors) {
        for (int i = 0; i < 24; ++i)
          p.inverse_frequency_factors.push_back(1.0f + 0.3f * static_cast<float>(i));
      }
      auto x = random(static_cast<size_t>(n * heads * head_dim));
      std::vector<float> cx = x;
      Tensor tc = host(cx, {head_dim, heads, n, 1});
      cpu_.rope(tc, positions, p);
      Tensor tg = gpu_f32(x, {head_dim, heads, n, 1});
      gpu_->rope(tg, positions, p);
      const Diff d = compare(read(tg), cx);
      report(fmt::format("rope neox={} factors={}", neox, factors), d);
      EXPECT_LT(d.max_abs, 2e-3) << neox << factors;  // angles of 4e4 rad: float rounding
    }
  }
}

// A decode layer's op sequence (one token) queued on two devices, one fusing the ops (residual
// add + rms_norm + 8-bit quantization, q/k/v in one launch, q/k norm + RoPE, gate/up + SiLU) and
// one launching each op alone (each tested against the CPU above): every output the ops promise
// must agree.
// The fused norms quantize for the products after them with the products' activation group:
// 256 for the K-quants (two warps' maxima meet in shared memory), 32 for the others. Products
// needing different groups cannot share one 8-bit copy, so each case keeps a layer's types alike,
// as real files do (Q4_K_M: K-quants; Gemma 3's Q4_K_M and SmolLM2's Q4_1: 32-element types in
// q, k, v, gate and up).
TEST_F(CudaOps, FusedDecodeOpsEqualTheUnfusedOps) {
  using T = TensorType;
  run_fused_decode_ops({T::Q4_K, T::Q4_K, T::Q6_K, T::Q4_K, T::Q4_K});
}

TEST_F(CudaOps, FusedDecodeOpsOf32ElementBlocksEqualTheUnfusedOps) {
  using T = TensorType;
  run_fused_decode_ops({T::Q5_0, T::Q5_0, T::Q8_0, T::Q4_1, T::Q4_1});
}

// Several sequences' tokens a step (5 rows): the norms quantize for the products after them.
TEST_F(CudaOps, FusedDecodeOpsOfSeveralSequencesEqualTheUnfusedOps) {
  using T = TensorType;
  run_fused_decode_ops({T::Q4_K, T::Q4_K, T::Q6_K, T::Q4_K, T::Q4_K}, 5);
  run_fused_decode_ops({T::Q5_0, T::Q5_0, T::Q8_0, T::Q4_1, T::Q4_1}, 3);
}

// Models without q/k norms (Llama, SmolLM2): q's and k's RoPE and the cache store still one launch.
TEST_F(CudaOps, FusedDecodeOpsWithoutQkNormsEqualTheUnfusedOps) {
  using T = TensorType;
  run_fused_decode_ops({T::Q4_K, T::Q4_K, T::Q6_K, T::Q4_K, T::Q4_K}, 1, false);
  run_fused_decode_ops({T::Q4_K, T::Q4_K, T::Q6_K, T::Q4_K, T::Q4_K}, 3, false);
}

// Heads of 128 and 256: the decode attention's folded q/k norm + RoPE with one and two float4s
// a lane of a head row.
TEST_F(CudaOps, FusedDecodeOpsWithWiderHeadsEqualTheUnfusedOps) {
  using T = TensorType;
  run_fused_decode_ops({T::Q4_K, T::Q4_K, T::Q6_K, T::Q4_K, T::Q4_K}, 1, true, 128);
  run_fused_decode_ops({T::Q4_K, T::Q4_K, T::Q6_K, T::Q4_K, T::Q4_K}, 1, true, 256);
}

TEST_F(CudaOps, FusedBf16DecodeProductsEqualTheUnfusedOps) {
  // q, k and v in one launch, gate and up in another with SiLU(gate) * up: at least four fusions.
  using T = TensorType;
  run_fused_decode_ops({T::BF16, T::BF16, T::BF16, T::BF16, T::BF16});
}

// Decode attention whose combine step also writes the 8-bit copy of its output for the o
// projection when the plan's next op is that projection: the projection's result equals the one
// a separate quantize launch gives (the two ops in plans of their own), and the copy was written
// once. One token over 3,000 cached keys (split contexts).
TEST_F(CudaOps, FusedAttentionOutputQuantizationEqualsAQuantizeLaunch) {
  const int64_t heads = 8, kv_heads = 2, head_dim = 128, hidden = 512, cached = 3000;
  const int64_t block_size = 16, blocks = (cached + 1 + block_size - 1) / block_size;
  const int64_t row = kv_heads * head_dim;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng_);
  for (const TensorType o_type : {TensorType::Q4_K, TensorType::Q8_0}) {  // groups of 256, 32
    const auto o_w = testing::random_weights(o_type, hidden, heads * head_dim, rng_);
    const auto keys = random(static_cast<size_t>((cached + 1) * row)),
               values = random(static_cast<size_t>((cached + 1) * row)),
               q0 = random(static_cast<size_t>(heads * head_dim));
    const size_t cache_bytes = static_cast<size_t>(blocks * block_size * row * 2);
    std::vector<uint8_t> zeros(cache_bytes, 0);
    KvLayer cache;
    cache.block_size = block_size;
    cache.kv_heads = kv_heads;
    cache.head_dim = head_dim;
    cache.k = gpu_tensor(zeros.data(), cache_bytes, TensorType::F16,
                         {head_dim, kv_heads, block_size, blocks});
    cache.v = gpu_tensor(zeros.data(), cache_bytes, TensorType::F16, cache.k.ne);
    std::vector<int32_t> slots;
    for (int64_t p = 0; p <= cached; ++p) {
      slots.push_back(static_cast<int32_t>(table[static_cast<size_t>(p / block_size)] * block_size +
                                           p % block_size));
    }
    gpu_->store_kv(cache, gpu_f32(keys, {head_dim, kv_heads, cached + 1, 1}),
                   gpu_f32(values, {head_dim, kv_heads, cached + 1, 1}), slots);
    ASSERT_TRUE(gpu_->synchronize().ok());
    AttentionSequence seq;
    seq.first_token = 0;
    seq.token_count = 1;
    seq.first_position = cached;
    seq.block_table = table;
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    Tensor o_proj = gpu_tensor(o_w.data(), o_w.size(), o_type, {heads * head_dim, hidden, 1, 1});
    auto run = [&](bool one_plan, uint64_t* fused) {
      const uint64_t before = gpu_->producer_quantizations();
      Tensor q = gpu_f32(q0, {head_dim, heads, 1, 1});
      Tensor attn = gpu_poisoned({head_dim, heads, 1, 1});
      Tensor y = gpu_poisoned({hidden, 1, 1, 1});
      Tensor flat = attn;
      flat.ne = {heads * head_dim, 1, 1, 1};
      StepPlan first, second;
      Ops(first).attention(q, cache, std::span<const AttentionSequence>(&seq, 1), params, attn);
      Ops(one_plan ? first : second).matmul(o_proj, flat, y);
      EXPECT_TRUE(gpu_->execute(first).ok());
      if (!one_plan) {
        EXPECT_TRUE(gpu_->execute(second).ok());
      }
      auto result = read(y);
      *fused = gpu_->producer_quantizations() - before;
      return result;
    };
    uint64_t fused_with = 0, fused_without = 0;
    const auto with = run(true, &fused_with);
    const auto without = run(false, &fused_without);
    const Diff d = compare(with, without);
    report(fmt::format("o projection after attention's fused quantization ({})",
                       tensor_type_name(o_type)),
           d);
    EXPECT_EQ(d.max_abs, 0.0) << "the fused quantization wrote other bytes";
    EXPECT_EQ(fused_with, 1u) << "the combine step should have written the copy";
    EXPECT_EQ(fused_without, 0u);
  }
}

// One layer's decode ops (q, k, v; gate, up) for `tokens` rows with weights of `types`, fused
// and unfused.
void CudaOps::run_fused_decode_ops(const std::array<TensorType, 5>& types, int64_t tokens,
                                   bool qk_norm, int64_t head_dim) {
  // Heads of 64: 8 query heads over 2 KV heads; of 128 (Qwen3-8B's) and 256: groups of 2. The
  // query heads fill the hidden size, so the attention output can be the residual.
  const int64_t hidden = 512, ffn = 1002, heads = hidden / head_dim;
  const int64_t kv_heads = head_dim == 64 ? 2 : heads / 2;
  struct Weights {
    TensorType type;
    int64_t rows;
    std::vector<uint8_t> data;
  };
  std::vector<Weights> ws = {{types[0], heads * head_dim, {}},
                             {types[1], kv_heads * head_dim, {}},
                             {types[2], kv_heads * head_dim, {}},
                             {types[3], ffn, {}},
                             {types[4], ffn, {}}};
  for (auto& w : ws) w.data = testing::random_weights(w.type, w.rows, hidden, rng_);
  const auto x0 = random(hidden * tokens), y0 = random(hidden * tokens), nw = random(hidden, 0.3f),
             nw2 = random(hidden, 0.3f), qn = random(head_dim, 0.3f), kn = random(head_dim, 0.3f);
  std::vector<int32_t> positions, slots;
  for (int64_t t = 0; t < tokens; ++t) {
    positions.push_back(static_cast<int32_t>(777 + 5 * t));
    slots.push_back(static_cast<int32_t>(9 + 7 * t));  // of 4 blocks of 16
  }
  RopeParams rope;
  rope.rotary_dim = head_dim;
  rope.theta = 1000000.0f;
  rope.neox = true;
  // The paged cache's earlier keys and values (F16 in [-1, 1)), and the block table of the one
  // sequence attention reads when tokens == 1: pool block 0 holds the step's position.
  std::vector<uint16_t> old_keys, old_values;
  for (int64_t i = 0; i < 50 * 16 * kv_heads * head_dim; ++i) {
    old_keys.push_back(float_to_fp16(std::uniform_real_distribution<float>(-1, 1)(rng_)));
    old_values.push_back(float_to_fp16(std::uniform_real_distribution<float>(-1, 1)(rng_)));
  }
  std::vector<int32_t> table;
  for (int32_t b = 0; b < 48; ++b) table.push_back(b + 1);
  table.push_back(0);
  // Outputs in order: x, h, q, k, v, h2, gate (= silu(gate) * up), up. `fused`: the CUDA
  // device's fused kernels; else Device's unfused compositions of its other kernels.
  CudaDevice& d = *gpu_;
  auto run = [&](bool fused) {
    std::vector<DeviceBuffer> keep;
    auto make = [&](const void* data, size_t bytes, TensorType type, std::array<int64_t, 4> ne) {
      auto b = d.allocate(bytes);
      EXPECT_TRUE(b.ok());
      if (data != nullptr) d.upload(data, b->data(), bytes);
      Tensor t;
      t.data = b->data();
      t.type = type;
      t.ne = ne;
      keep.push_back(std::move(*b));
      return t;
    };
    auto f32 = [&](const std::vector<float>& v, std::array<int64_t, 4> ne) {
      return make(v.data(), v.size() * 4, TensorType::F32, ne);
    };
    auto out = [&](int64_t n) {
      std::vector<float> nan(static_cast<size_t>(n * tokens), NAN);
      return f32(nan, {n, tokens, 1, 1});
    };
    std::vector<Tensor> w;
    for (auto& wt : ws)
      w.push_back(make(wt.data.data(), wt.data.size(), wt.type, {hidden, wt.rows, 1, 1}));
    Tensor x = f32(x0, {hidden, tokens, 1, 1}), y = f32(y0, {hidden, tokens, 1, 1});
    Tensor tnw = f32(nw, {hidden, 1, 1, 1}), tnw2 = f32(nw2, {hidden, 1, 1, 1});
    Tensor tqn = f32(qn, {head_dim, 1, 1, 1}), tkn = f32(kn, {head_dim, 1, 1, 1});
    Tensor h = out(hidden), q = out(heads * head_dim), k = out(kv_heads * head_dim),
           v = out(kv_heads * head_dim), h2 = out(hidden), g = out(ffn), up = out(ffn),
           attn = out(heads * head_dim);  // (allocated up front: an upload runs the queued ops)
    // An F16 paged cache with room for one sequence's 778 positions (block 48, the step's, is
    // pool block 0: slot 9).
    KvLayer cache;
    cache.block_size = 16;
    cache.kv_heads = kv_heads;
    cache.head_dim = head_dim;
    const int64_t pool = 50;
    const size_t cache_bytes = static_cast<size_t>(pool * 16 * kv_heads * head_dim * 2);
    cache.k = make(old_keys.data(), cache_bytes, TensorType::F16, {head_dim, kv_heads, 16, pool});
    cache.v = make(old_values.data(), cache_bytes, TensorType::F16, {head_dim, kv_heads, 16, pool});
    const op::AddRmsNorm first_norm{x, y, tnw, 1e-6f, h};
    const op::MatmulsSharedInput qkv{h, {w[0], w[1], w[2], {}}, {q, k, v, {}}, 3};
    const Tensor qh = q.as_heads(heads, head_dim), kh = k.as_heads(kv_heads, head_dim),
                 vh = v.as_heads(kv_heads, head_dim);
    // The step's keys and values go into the cache at scattered slots.
    const op::QkNormRopeStoreKv rope_store{qh,
                                           kh,
                                           vh,
                                           qk_norm ? tqn : Tensor{nullptr},
                                           qk_norm ? tkn : Tensor{nullptr},
                                           1e-6f,
                                           positions,
                                           &rope,
                                           &cache,
                                           slots};
    EXPECT_TRUE((fused ? d.add_rms_norm(first_norm) : d.Device::add_rms_norm(first_norm)).ok());
    EXPECT_TRUE((fused ? d.matmuls(qkv) : d.Device::matmuls(qkv)).ok());
    EXPECT_TRUE(
        (fused ? d.qk_norm_rope_store_kv(rope_store) : d.Device::qk_norm_rope_store_kv(rope_store))
            .ok());
    Tensor residual = q;  // (a stand-in for the attention output when there are several tokens)
    if (tokens == 1) {
      // Attention over the 777 cached keys and the step's, its output the residual.
      AttentionSequence seq;
      seq.token_count = 1;
      seq.first_position = positions[0];
      seq.block_table = table;
      AttentionParams params;
      params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      Tensor attn_heads = attn.as_heads(heads, head_dim);
      d.attention(qh, cache, std::span<const AttentionSequence>(&seq, 1), params, attn_heads);
      residual = attn;
    }
    const op::AddRmsNorm second_norm{x, residual, tnw2, 1e-6f, h2};
    const op::GateUpActivation glu{Activation::Silu, h2, w[3], w[4], g, up, g};
    EXPECT_TRUE((fused ? d.add_rms_norm(second_norm) : d.Device::add_rms_norm(second_norm)).ok());
    EXPECT_TRUE((fused ? d.gate_up_activation(glu) : d.Device::gate_up_activation(glu)).ok());
    std::vector<std::vector<float>> res;
    for (const Tensor* t : {&x, &h, &q, &k, &v, &h2, &g, &up}) {
      std::vector<float> r(static_cast<size_t>(t->elements()));
      d.download(t->data, r.data(), r.size() * 4);
      res.push_back(std::move(r));
    }
    for (const Tensor* t : {&cache.k, &cache.v}) {  // the caches' F16 rows, as floats
      std::vector<uint16_t> halves(cache_bytes / 2);
      d.download(t->data, halves.data(), cache_bytes);
      EXPECT_TRUE(d.synchronize().ok());
      std::vector<float> r;
      for (uint16_t h16 : halves) r.push_back(fp16_to_float(h16));
      res.push_back(std::move(r));
    }
    EXPECT_TRUE(d.synchronize().ok());
    return res;
  };
  const auto fused = run(true);
  const auto plain = run(false);
  const char* names[] = {"x",  "h",       "q",      "k", "v", "h2", "silu(gate)*up",
                         "up", "k cache", "v cache"};
  for (size_t i = 0; i < fused.size(); ++i) {
    const Diff diff = compare(fused[i], plain[i]);
    report(fmt::format("fused decode ops ({} rows): {}", tokens, names[i]), diff);
    EXPECT_LT(diff.rel_rms, 1e-6) << names[i];
  }
}

// One attention layer's paged cache on both devices, filled through store_kv.
struct PagedCase {
  int64_t heads, kv_heads, head_dim;
  TensorType kv_type;
  std::vector<int64_t> cached, fresh;  // per sequence: tokens already cached, new tokens
  int64_t window = 0;
  float softcap = 0.0f;
  std::vector<std::vector<int32_t>> parents = {};  // token trees per sequence (empty: causal)
};

class CudaAttention : public CudaOps, public ::testing::WithParamInterface<PagedCase> {};

TEST_P(CudaAttention, StoreKvAndAttentionMatchTheCpu) {
  const PagedCase c = GetParam();
  const int64_t block_size = 16;
  int64_t blocks_needed = 0;
  for (size_t s = 0; s < c.cached.size(); ++s)
    blocks_needed += (c.cached[s] + c.fresh[s] + block_size - 1) / block_size;
  const int64_t pool = blocks_needed + 7;
  const auto& info = tensor_type_info(c.kv_type);
  const size_t cache_bytes =
      static_cast<size_t>(pool * block_size * c.kv_heads * (c.head_dim / info.block_elements)) *
      info.block_bytes;
  std::vector<uint8_t> ck(cache_bytes), cv(cache_bytes);
  KvLayer cpu_layer, gpu_layer;
  for (KvLayer* l : {&cpu_layer, &gpu_layer}) {
    l->block_size = block_size;
    l->kv_heads = c.kv_heads;
    l->head_dim = c.head_dim;
    l->k.type = l->v.type = c.kv_type;
    l->k.ne = l->v.ne = {c.head_dim, c.kv_heads, block_size, pool};
  }
  cpu_layer.k.data = ck.data();
  cpu_layer.v.data = cv.data();
  std::vector<uint8_t> zeros(cache_bytes, 0);
  gpu_layer.k = gpu_tensor(zeros.data(), cache_bytes, c.kv_type, cpu_layer.k.ne);
  gpu_layer.v = gpu_tensor(zeros.data(), cache_bytes, c.kv_type, cpu_layer.k.ne);

  // Scattered block tables: a shuffled pool.
  std::vector<int32_t> order(static_cast<size_t>(pool));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng_);
  std::vector<std::vector<int32_t>> tables(c.cached.size());
  size_t next = 0;
  for (size_t s = 0; s < c.cached.size(); ++s) {
    const int64_t nb = (c.cached[s] + c.fresh[s] + block_size - 1) / block_size;
    for (int64_t b = 0; b < nb; ++b) tables[s].push_back(order[next++]);
  }
  auto slot = [&](size_t s, int64_t p) {
    return static_cast<int32_t>(tables[s][static_cast<size_t>(p / block_size)] * block_size +
                                p % block_size);
  };
  const int64_t row = c.kv_heads * c.head_dim;
  // The cached prefix of every sequence, then the new tokens, each through store_kv.
  auto store = [&](const std::vector<int32_t>& slots) {
    const int64_t n = static_cast<int64_t>(slots.size());
    auto k = random(static_cast<size_t>(n * row)), v = random(static_cast<size_t>(n * row));
    Tensor hk = host(k, {c.head_dim, c.kv_heads, n, 1}),
           hv = host(v, {c.head_dim, c.kv_heads, n, 1});
    cpu_.store_kv(cpu_layer, hk, hv, slots);
    Tensor gk = gpu_f32(k, hk.ne), gv = gpu_f32(v, hv.ne);
    gpu_->store_kv(gpu_layer, gk, gv, slots);
  };
  std::vector<int32_t> prefix_slots, new_slots;
  std::vector<AttentionSequence> seqs;
  std::vector<std::vector<uint64_t>> masks(c.cached.size());
  int64_t tokens = 0;
  for (size_t s = 0; s < c.cached.size(); ++s) {
    for (int64_t p = 0; p < c.cached[s]; ++p) prefix_slots.push_back(slot(s, p));
    AttentionSequence a;
    a.first_token = tokens;
    a.token_count = c.fresh[s];
    a.first_position = c.cached[s];
    a.block_table = tables[s];
    if (s < c.parents.size() && !c.parents[s].empty()) {
      masks[s] = testing::ancestor_masks(c.parents[s]);
      a.ancestors = masks[s];
    }
    seqs.push_back(a);
    for (int64_t p = 0; p < c.fresh[s]; ++p) new_slots.push_back(slot(s, c.cached[s] + p));
    tokens += c.fresh[s];
  }
  if (!prefix_slots.empty()) store(prefix_slots);
  store(new_slots);
  std::vector<uint8_t> gk(cache_bytes);
  gpu_->download(gpu_layer.k.data, gk.data(), cache_bytes);
  ASSERT_TRUE(gpu_->synchronize().ok());
  EXPECT_EQ(gk, ck) << "store_kv wrote different " << info.name << " rows";

  auto q = random(static_cast<size_t>(tokens * c.heads * c.head_dim));
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.sliding_window = c.window;
  params.softcap = c.softcap;
  std::vector<float> want(q.size());
  Tensor hq = host(q, {c.head_dim, c.heads, tokens, 1}), ho = host(want, hq.ne);
  cpu_.attention(hq, cpu_layer, seqs, params, ho);
  Tensor gq = gpu_f32(q, hq.ne), go = gpu_poisoned(hq.ne);
  gpu_->attention(gq, gpu_layer, seqs, params, go);
  const Diff d = compare(read(go), want);
  report(fmt::format("attention {} h{}/{} d{} w{} cap{}{}", info.name, c.heads, c.kv_heads,
                     c.head_dim, c.window, c.softcap, c.parents.empty() ? "" : " tree"),
         d);
  EXPECT_LT(d.rel_rms, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttention,
    ::testing::Values(
        // prefill of one sequence, a decode step, a batch of mixed sequences
        PagedCase{8, 2, 64, TensorType::F16, {0}, {37}},
        PagedCase{8, 2, 128, TensorType::F16, {1000}, {1}},
        PagedCase{32, 8, 128, TensorType::F16, {0, 100, 1000, 5}, {37, 1, 5, 3}},
        PagedCase{32, 8, 128, TensorType::BF16, {0, 100, 1000}, {37, 1, 5}},
        PagedCase{32, 8, 128, TensorType::F32, {0, 100, 1000}, {37, 1, 5}},
        PagedCase{32, 8, 128, TensorType::Q8_0, {0, 100, 1000}, {37, 1, 5}},
        // head sizes 32 and 256, groups of 1, 3 and 16 query heads per KV head
        PagedCase{4, 4, 32, TensorType::F16, {20}, {9}},
        PagedCase{9, 3, 64, TensorType::F16, {70, 0}, {1, 12}},
        PagedCase{16, 1, 256, TensorType::F16, {300}, {2}},
        // long context split over many blocks; sliding window; soft-capping
        PagedCase{32, 8, 128, TensorType::F16, {5000}, {1}},
        PagedCase{8, 4, 64, TensorType::F16, {600, 0}, {3, 100}, 64},
        // Prefill shapes for attention_prefill.cu (TERN_CUDA_ATTN_PREFILL=2): several 64-token
        // tiles, partial tiles, soft-capping, a window, query heads = KV heads.
        PagedCase{16, 2, 128, TensorType::F16, {200, 0}, {150, 70}, 0, 30.0f},
        PagedCase{4, 4, 64, TensorType::F16, {33}, {129}, 100},
        PagedCase{8, 4, 256, TensorType::BF16, {50}, {20}, 0, 30.0f},
        // (attention_prefill_ws.cu's 64-key tiles: heads of 64 over several key tiles without
        // a window, heads of 128 with one.)
        PagedCase{8, 2, 64, TensorType::F16, {200}, {100}},
        PagedCase{8, 2, 128, TensorType::F16, {33}, {129}, 100},
        // decode after 16K tokens; a one-key context; Gemma 3 270M's 4/1/256;
        // a head size the 8-lanes-a-key kernel does not take (96); BF16 at
        // a group of 8 split over many blocks
        PagedCase{32, 8, 128, TensorType::F16, {16383}, {1}},
        PagedCase{32, 8, 128, TensorType::F16, {0}, {1}},
        PagedCase{4, 1, 256, TensorType::F16, {700}, {1}},
        PagedCase{12, 4, 96, TensorType::F16, {200}, {1}},
        PagedCase{64, 8, 128, TensorType::BF16, {3000, 33}, {1, 1}},
        // token trees: v4 (F16, heads of 128) beside a causal sequence, the
        // largest tree over a long prefix (split contexts), v2 (Q8_0 cache,
        // head 96), Gemma-like window and soft-capping
        PagedCase{32,
                  8,
                  128,
                  TensorType::F16,
                  {20, 50},
                  {5, 10},
                  0,
                  0.0f,
                  {{}, {-1, 0, 1, 1, 0, 4, 5, -1, 7, 2}}},
        PagedCase{32, 8, 128, TensorType::F16, {3000}, {64}, 0, 0.0f, {testing::binary_tree(64)}},
        PagedCase{12, 4, 96, TensorType::Q8_0, {70}, {7}, 0, 0.0f, {{-1, 0, 0, 1, 1, 2, -1}}},
        PagedCase{4,
                  1,
                  256,
                  TensorType::BF16,
                  {40},
                  {12},
                  16,
                  30.0f,
                  {{-1, 0, 1, 2, 3, 0, 5, 6, 1, 8, -1, 10}}}));

}  // namespace
}  // namespace tern

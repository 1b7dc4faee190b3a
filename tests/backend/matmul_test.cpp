// matvec/matmul on every supported type and every dispatch path this CPU has, against a float64
// product of the dequantized weights with the unquantized activations.
//
// Tolerance: weights enter exactly (they are dequantized), so the only approximation is the 8-bit
// activation rounding: |x_i - x~_i| <= d_block / 2 with d_block = amax_block / 127. Hence
// |y - y_ref| <= sum_i |w_i| * d_block(i) / 2, plus 1e-5 * sum |w_i x_i| for fp32 accumulation.
// Float weight types (F32/F16/BF16) keep fp32 activations: 1e-5 * sum |w_i x_i|.
// n > 1 on the AVX-512 path runs the multi-row kernels (gemm_avx512.cpp) for the types that have
// them; n = 2..33 covers full groups of kGemmRows activation rows and every remainder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "test_util.h"

namespace tern::cpu {
namespace {

constexpr TensorType kTypes[] = {
    TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0,   TensorType::Q4_1,
    TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K,   TensorType::Q3_K,
    TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS};

std::vector<CpuPath> available_paths() {
  std::vector<CpuPath> paths;
  const CpuFeatures f = detect_cpu_features();
  for (CpuPath p : {CpuPath::Scalar, CpuPath::Avx2, CpuPath::Avx512}) {
    if (cpu_path_available(p, f)) paths.push_back(p);
  }
  return paths;
}

int act_block(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
      return 0;
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
      return 256;
    default:
      return 32;
  }
}

struct Reference {
  std::vector<double> y;        // [n x rows]
  std::vector<double> tol;      // [n x rows]
  std::vector<double> abs_sum;  // [n x rows]: sum |w_i x_i|
};

Reference reference(TensorType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                    const std::vector<float>& x, int64_t n) {
  const size_t row_bytes = *tensor_bytes(type, static_cast<uint64_t>(cols));
  std::vector<float> wrow(static_cast<size_t>(cols));
  const auto outputs = static_cast<size_t>(n * rows);
  Reference ref{std::vector<double>(outputs), std::vector<double>(outputs),
                std::vector<double>(outputs)};
  const int block = act_block(type);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, w.data() + static_cast<size_t>(r) * row_bytes, wrow.data(), cols);
    for (int64_t j = 0; j < n; ++j) {
      const float* xj = x.data() + j * cols;
      double sum = 0, abs_sum = 0, act_err = 0;
      for (int64_t i = 0; i < cols; ++i) {
        sum += double{wrow[i]} * xj[i];
        abs_sum += std::fabs(double{wrow[i]} * xj[i]);
      }
      if (block > 0) {
        for (int64_t b = 0; b < cols / block; ++b) {
          double amax = 0;
          for (int i = 0; i < block; ++i)
            amax = std::max(amax, std::fabs(double{xj[b * block + i]}));
          for (int i = 0; i < block; ++i)
            act_err += std::fabs(double{wrow[b * block + i]}) * amax / 127 / 2;
        }
      }
      ref.y[j * rows + r] = sum;
      ref.tol[j * rows + r] = act_err * 1.001 + 1e-5 * abs_sum + 1e-30;
      ref.abs_sum[j * rows + r] = abs_sum;
    }
  }
  return ref;
}

std::vector<float> activations(int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(count));
  for (auto& v : x) v = normal(rng);
  return x;
}

class CpuProducts : public ::testing::TestWithParam<TensorType> {};

TEST_P(CpuProducts, MatchFloat64ReferenceOnEveryPath) {
  const TensorType type = GetParam();
  const int64_t block = tensor_type_info(type).block_elements;
  std::vector<int64_t> col_counts;
  if (block == 1)
    col_counts = {1, 7, 100, 1000};
  else if (block == 32)
    col_counts = {32, 64 * 3 + 32, 32 * 13, 4096};
  else
    col_counts = {256, 768, 4096};
  ThreadPool pool(3);
  std::mt19937 rng(static_cast<uint32_t>(type) * 7919u);
  for (int64_t cols : col_counts) {
    for (int64_t rows : {1, 7, 33}) {
      for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 33}) {
        const auto w = tern::testing::random_weights(type, rows, cols, rng);
        const auto x = activations(n * cols, rng);
        const Reference ref = reference(type, w, rows, cols, x, n);
        std::vector<float> scalar_y;
        for (CpuPath path : available_paths()) {
          SCOPED_TRACE(::testing::Message()
                       << tensor_type_name(type) << " path=" << cpu_path_name(path)
                       << " rows=" << rows << " cols=" << cols << " n=" << n);
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          KernelOptions options;
          options.path = path;
          if (n == 1) {
            ASSERT_TRUE(matvec(type, w.data(), rows, cols, x.data(), y.data(), pool, options));
          } else {
            ASSERT_TRUE(matmul(type, w.data(), rows, cols, x.data(), n, y.data(), pool, options));
          }
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], ref.y[i], ref.tol[i]) << "output " << i;
          }
          if (path == CpuPath::Scalar) {
            scalar_y = y;
          } else {
            // Same quantized activations, same integer sums: only fp32 summation order differs.
            for (size_t i = 0; i < y.size(); ++i) {
              ASSERT_NEAR(y[i], scalar_y[i], 2e-5 * ref.abs_sum[i] + 1e-30)
                  << "vs scalar, output " << i;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CpuProducts, ::testing::ValuesIn(kTypes),
                         [](const auto& param_info) {
                           return std::string(tensor_type_name(param_info.param));
                         });

// The row-interleaved layout (packed.h): every row unpacks to exactly dequantize_row's values,
// and the packed kernels give the row-major kernels' products (same quantized activations, same
// integer sums; only the fp32 summation order differs) for decode and prefill shapes, on each
// path of this CPU that has packed kernels for the type (AVX-512 VNNI: Q8_0, Q5_0, Q4_K, Q6_K;
// AVX2: Q4_0, Q4_1, Q4_K).
class PackedProducts : public ::testing::TestWithParam<TensorType> {};

TEST_P(PackedProducts, UnpackExactlyAndMatchTheRowMajorKernels) {
  const TensorType type = GetParam();
  const int64_t block = tensor_type_info(type).block_elements;
  EXPECT_FALSE(can_pack(type, 24, block, CpuPath::Avx512));
  EXPECT_EQ(can_pack(type, 16, block, CpuPath::Avx2),
            type == TensorType::Q4_0 || type == TensorType::Q4_1 || type == TensorType::Q4_K);
  EXPECT_FALSE(can_pack(type, 16, block, CpuPath::Scalar));
  int paths = 0;
  for (CpuPath path : {CpuPath::Avx512, CpuPath::Avx2}) {
    if (!cpu_path_available(path, detect_cpu_features()) || !can_pack(type, 16, block, path))
      continue;
    ++paths;
    ThreadPool pool(3);
    std::mt19937 rng(static_cast<uint32_t>(type) * 104729u);
    KernelOptions options;
    options.path = path;
    for (int64_t cols : {block, 3 * block, int64_t{2048}}) {
      for (int64_t rows : {int64_t{16}, int64_t{48}}) {
        ASSERT_TRUE(can_pack(type, rows, cols, path));
        const auto w = tern::testing::random_weights(type, rows, cols, rng);
        std::vector<uint8_t> packed(packed_bytes(type, rows, cols));
        pack_rows(type, w.data(), rows, cols, packed.data(), pool);
        const size_t row_bytes = *tensor_bytes(type, static_cast<uint64_t>(cols));
        std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(type, w.data() + static_cast<size_t>(r) * row_bytes, want.data(), cols);
          dequantize_packed_row(type, packed.data(), cols, r, got.data());
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
              << tensor_type_name(type) << " row " << r << " cols " << cols;
        }
        for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 33}) {
          SCOPED_TRACE(::testing::Message() << tensor_type_name(type) << " " << cpu_path_name(path)
                                            << " rows=" << rows << " cols=" << cols << " n=" << n);
          const auto x = activations(n * cols, rng);
          const Reference ref = reference(type, w, rows, cols, x, n);
          std::vector<float> y(static_cast<size_t>(n * rows), NAN), row_major(y.size(), NAN);
          ASSERT_TRUE(
              matmul_packed(type, packed.data(), rows, cols, x.data(), n, y.data(), pool, options));
          ASSERT_TRUE(
              matmul(type, w.data(), rows, cols, x.data(), n, row_major.data(), pool, options));
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], ref.y[i], ref.tol[i]) << "output " << i;
            ASSERT_NEAR(y[i], row_major[i], 2e-5 * ref.abs_sum[i] + 1e-30) << "output " << i;
          }
        }
      }
    }
    std::vector<float> x(static_cast<size_t>(block)), y(24);
    EXPECT_FALSE(matmul_packed(type, nullptr, 24, block, x.data(), 1, y.data(), pool, options));
  }
  if (paths == 0) GTEST_SKIP() << "no packed " << tensor_type_name(type) << " kernel on this CPU";
}

INSTANTIATE_TEST_SUITE_P(PackableTypes, PackedProducts,
                         ::testing::Values(TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                           TensorType::Q5_0, TensorType::Q4_K, TensorType::Q6_K),
                         [](const auto& param_info) {
                           return std::string(tensor_type_name(param_info.param));
                         });

TEST(CpuProducts, ReuseScratchAcrossCallsAndTypes) {
  ThreadPool pool(2);
  Scratch scratch;
  std::mt19937 rng(5);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q8_0, TensorType::BF16, TensorType::Q6_K}) {
    const auto w = tern::testing::random_weights(type, 9, 512, rng);
    const auto x = activations(2 * 512, rng);
    const Reference ref = reference(type, w, 9, 512, x, 2);
    std::vector<float> y(18);
    KernelOptions options;
    options.scratch = &scratch;
    ASSERT_TRUE(matmul(type, w.data(), 9, 512, x.data(), 2, y.data(), pool, options));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref.y[i], ref.tol[i]);
  }
}

TEST(CpuProducts, RejectBadShapesAndTypesWithAMessage) {
  ThreadPool pool(1);
  std::vector<uint8_t> w(4096);
  std::vector<float> x(256), y(4);
  auto bad_cols = matvec(TensorType::Q4_K, w.data(), 1, 100, x.data(), y.data(), pool);
  ASSERT_FALSE(bad_cols);
  EXPECT_NE(bad_cols.error().message.find("multiple of 256"), std::string::npos);
  auto bad_type = matvec(TensorType::Q8_1, w.data(), 1, 32, x.data(), y.data(), pool);
  ASSERT_FALSE(bad_type);
  EXPECT_NE(bad_type.error().message.find("Q8_1"), std::string::npos);
  EXPECT_TRUE(matvec(TensorType::Q8_0, w.data(), 0, 32, x.data(), y.data(), pool));
}

}  // namespace
}  // namespace tern::cpu

// Quantizers without a gguf-py reference (Q4_K, Q6_K): round-trip error bounds and layout sanity;
// plus API contracts of quantize_row for every quantizable type.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/quant.h"
#include "backend/quant_blocks.h"
#include "test_util.h"

namespace tern::cpu {
namespace {

double relative_rms_error(TensorType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(*tensor_bytes(type, x.size()));
  EXPECT_EQ(quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size())), q.size());
  std::vector<float> y(x.size());
  dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(x.size()));
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double{y[i]} - x[i]) * (double{y[i]} - x[i]);
    ref += double{x[i]} * x[i];
  }
  return std::sqrt(err / ref);
}

std::vector<float> gaussian(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

TEST(CpuQuantizer, BlockStructsMatchTensorTypeTable) {
  EXPECT_EQ(sizeof(quant::BlockQ4_K), tensor_type_info(TensorType::Q4_K).block_bytes);
  EXPECT_EQ(sizeof(quant::BlockQ6_K), tensor_type_info(TensorType::Q6_K).block_bytes);
  EXPECT_EQ(sizeof(quant::BlockIQ4_XS), tensor_type_info(TensorType::IQ4_XS).block_bytes);
  EXPECT_EQ(sizeof(quant::BlockQ3_K), tensor_type_info(TensorType::Q3_K).block_bytes);
  EXPECT_EQ(sizeof(quant::BlockQ2_K), tensor_type_info(TensorType::Q2_K).block_bytes);
  EXPECT_EQ(sizeof(quant::BlockQ5_K), tensor_type_info(TensorType::Q5_K).block_bytes);
}

// Expected relative RMS error on Gaussian data: 4.5 bits/weight ~ 7-9%, 6.5 bits ~ 2%.
TEST(CpuQuantizer, Q4KRoundTripErrorIsThatOfFourBits) {
  for (float scale : {1e-3f, 1.0f, 300.0f}) {
    const double e = relative_rms_error(TensorType::Q4_K, gaussian(256 * 64, scale, 1));
    EXPECT_LT(e, 0.095) << "scale " << scale;
    EXPECT_GT(e, 0.01) << "scale " << scale;
  }
}

TEST(CpuQuantizer, Q6KRoundTripErrorIsThatOfSixBits) {
  for (float scale : {1e-3f, 1.0f, 300.0f}) {
    const double e = relative_rms_error(TensorType::Q6_K, gaussian(256 * 64, scale, 2));
    EXPECT_LT(e, 0.025) << "scale " << scale;
  }
}

TEST(CpuQuantizer, KQuantsBeatTheirSmallerSiblings) {
  const auto x = gaussian(256 * 32, 1.0f, 3);
  EXPECT_LT(relative_rms_error(TensorType::Q4_K, x), relative_rms_error(TensorType::Q4_0, x));
  EXPECT_LT(relative_rms_error(TensorType::Q6_K, x), relative_rms_error(TensorType::Q5_0, x));
}

TEST(CpuQuantizer, ZeroAndConstantRowsSurvive) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::Q4_0}) {
    for (float v : {0.0f, 0.5f, -3.0f}) {
      std::vector<float> x(512, v);
      std::vector<uint8_t> q(*tensor_bytes(type, 512));
      quantize_row(type, x.data(), q.data(), 512);
      std::vector<float> y(512);
      dequantize_row(type, q.data(), y.data(), 512);
      for (float got : y) ASSERT_NEAR(got, v, std::fabs(v) * 0.02 + 1e-6) << tensor_type_name(type);
    }
  }
}

TEST(CpuQuantizer, OutlierDoesNotWreckTheRest) {
  auto x = gaussian(256, 1.0f, 4);
  x[17] = 80.0f;
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K}) {
    std::vector<uint8_t> q(*tensor_bytes(type, 256));
    quantize_row(type, x.data(), q.data(), 256);
    std::vector<float> y(256);
    dequantize_row(type, q.data(), y.data(), 256);
    EXPECT_NEAR(y[17], 80.0f, 80.0f * 0.05f) << tensor_type_name(type);
  }
}

TEST(CpuQuantizer, ReportsBytesAndRejectsWhatItCannotDo) {
  for (TensorType type :
       {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
        TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
    ASSERT_TRUE(can_quantize(type)) << tensor_type_name(type);
    std::vector<float> x(512, 1.0f);
    std::vector<uint8_t> q(4 * 512);
    EXPECT_EQ(quantize_row(type, x.data(), q.data(), 512), *tensor_bytes(type, 512));
  }
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_FALSE(can_quantize(TensorType::IQ2_XXS));
  EXPECT_EQ(quantize_row(TensorType::IQ2_XXS, x.data(), q.data(), 256), 0u);
  EXPECT_EQ(quantize_row(TensorType::Q4_K, x.data(), q.data(), 100), 0u);  // not whole blocks
}

}  // namespace
}  // namespace tern::cpu

// Dequantizers and quantizers against gguf-py's numpy reference, bit for bit
// (fixtures: tools/quant/make_quant_fixtures.py -> tests/data/quant/).
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/quant.h"
#include "test_util.h"

namespace tern::cpu {
namespace {

using tern::testing::as_floats;
using tern::testing::read_fixture;

class CpuDequantize : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuDequantize, MatchesGgufBitExactly) {
  const TensorType type = *tensor_type_from_name(GetParam());
  ASSERT_TRUE(is_supported(type));
  const auto blocks = read_fixture(std::string(GetParam()) + ".blocks");
  const auto expected = as_floats(read_fixture(std::string(GetParam()) + ".dequant"));
  ASSERT_FALSE(expected.empty()) << "missing fixture for " << GetParam();
  const auto n = static_cast<int64_t>(expected.size());
  ASSERT_EQ(blocks.size(), *tensor_bytes(type, static_cast<uint64_t>(n)));
  std::vector<float> got(expected.size(), -1.0f);
  dequantize_row(type, blocks.data(), got.data(), n);
  int mismatches = 0;
  for (size_t i = 0; i < got.size() && mismatches < 5; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &expected[i], 4);
    if (a != b) {
      ++mismatches;
      ADD_FAILURE() << GetParam() << " element " << i << ": got " << got[i] << " (0x" << std::hex
                    << a << "), gguf " << expected[i] << " (0x" << b << ")" << std::dec;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CpuDequantize,
                         ::testing::Values("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                           "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
                                           "IQ4_XS"),
                         [](const auto& param_info) { return std::string(param_info.param); });

class CpuQuantize : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuQuantize, MatchesGgufByteExactly) {
  const TensorType type = *tensor_type_from_name(GetParam());
  ASSERT_TRUE(can_quantize(type));
  const auto input = as_floats(read_fixture(std::string(GetParam()) + ".qin"));
  const auto expected = read_fixture(std::string(GetParam()) + ".qout");
  ASSERT_FALSE(input.empty());
  std::vector<uint8_t> got(expected.size() + 64, 0xEE);
  const size_t written =
      quantize_row(type, input.data(), got.data(), static_cast<int64_t>(input.size()));
  ASSERT_EQ(written, expected.size());
  const auto block_bytes = tensor_type_info(type).block_bytes;
  int mismatches = 0;
  for (size_t i = 0; i < expected.size() && mismatches < 5; ++i) {
    if (got[i] != expected[i]) {
      ++mismatches;
      ADD_FAILURE() << GetParam() << " byte " << i << " (block " << i / block_bytes << ", offset "
                    << i % block_bytes << "): got " << int{got[i]} << ", gguf " << int{expected[i]};
    }
  }
  EXPECT_EQ(got[expected.size()], 0xEE) << "wrote past the end";
}

INSTANTIATE_TEST_SUITE_P(GgufQuantizers, CpuQuantize,
                         ::testing::Values("F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace tern::cpu

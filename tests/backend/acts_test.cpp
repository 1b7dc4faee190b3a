// The SIMD activation quantizers (acts_avx2.cpp, acts_avx512.cpp) against the scalar one, bit for
// bit: int8 codes, scales and sums, on every path this CPU has. Includes all-zero blocks, exact
// .5 ties (round half to even) and blocks whose largest magnitude is negative.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"

namespace tern::cpu::detail {
namespace {

std::vector<float> tricky_row(int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (auto& v : x) v = normal(rng) * 3.0f;
  // Block 1: zeros. Block 2: amax = 127 (scale 1), so k + 0.5 values are exact ties.
  for (int i = 32; i < 64 && i < cols; ++i) x[static_cast<size_t>(i)] = 0.0f;
  if (cols >= 96) {
    x[64] = -127.0f;
    for (int i = 65; i < 96; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i - 80) + 0.5f;
  }
  return x;
}

TEST(CpuActs, SimdQuantizersMatchScalarBitForBit) {
  const CpuFeatures f = detect_cpu_features();
  for (CpuPath path : {CpuPath::Avx2, CpuPath::Avx512}) {
    if (!cpu_path_available(path, f)) continue;
    for (int64_t cols : {256, 512, 4096}) {
      SCOPED_TRACE(::testing::Message() << cpu_path_name(path) << " cols=" << cols);
      const auto x = tricky_row(cols, static_cast<uint32_t>(cols));
      const auto n = static_cast<size_t>(cols);
      {
        std::vector<int8_t> q_ref(n), q(n);
        std::vector<float> d_ref(n / 32), d(n / 32);
        std::vector<int32_t> s_ref(n / 32), s(n / 32);
        quantize_acts_q8x32(x.data(), cols, q_ref.data(), d_ref.data(), s_ref.data());
        quantize_acts_q8x32_fn(path)(x.data(), cols, q.data(), d.data(), s.data());
        EXPECT_EQ(q, q_ref);
        EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * 4));
        EXPECT_EQ(s, s_ref);
      }
      {
        std::vector<int8_t> q_ref(n), q(n);
        std::vector<float> d_ref(n / 256), d(n / 256);
        std::vector<int16_t> s_ref(n / 16), s(n / 16);
        quantize_acts_q8x256(x.data(), cols, q_ref.data(), d_ref.data(), s_ref.data());
        quantize_acts_q8x256_fn(path)(x.data(), cols, q.data(), d.data(), s.data());
        EXPECT_EQ(q, q_ref);
        EXPECT_EQ(0, std::memcmp(d.data(), d_ref.data(), d.size() * 4));
        EXPECT_EQ(s, s_ref);
      }
    }
  }
}

}  // namespace
}  // namespace tern::cpu::detail

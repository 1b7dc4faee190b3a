// The gated activations against a float64 reference of their definitions, on every CPU path this
// machine has: values over the range activations take (and far outside it), lengths that are not
// multiples of the vector width, and nothing written past out[n).
#include "backend/cpu/activations.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace tern::cpu {
namespace {

double silu_reference(double x) {
  return x / (1.0 + std::exp(-x));
}

double gelu_tanh_reference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

struct Case {
  const char* name;
  GatedActivationFn (*pick)(CpuPath);
  double (*reference)(double);
};

const Case kCases[] = {{"silu", silu_mul_fn, silu_reference},
                       {"gelu_tanh", gelu_tanh_mul_fn, gelu_tanh_reference}};

TEST(GatedActivations, MatchTheFloat64DefinitionOnEveryPath) {
  const CpuFeatures features = detect_cpu_features();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const Case& c : kCases) {
    for (CpuPath path : {CpuPath::Scalar, CpuPath::Avx2, CpuPath::Avx512}) {
      if (!cpu_path_available(path, features)) continue;
      const GatedActivationFn fn = c.pick(path);
      for (int64_t n : {1, 15, 16, 17, 100, 4099}) {
        SCOPED_TRACE(::testing::Message() << c.name << " " << cpu_path_name(path) << " n=" << n);
        std::vector<float> gate(static_cast<size_t>(n)), up(gate.size());
        for (size_t i = 0; i < gate.size(); ++i) {
          gate[i] = normal(rng);
          up[i] = normal(rng);
        }
        // The extremes: saturation on both sides, zero, and values past exp's range.
        const float extremes[] = {0.0f, -0.0f, 40.0f, -40.0f, 100.0f, -100.0f, 1e6f, -1e6f};
        for (size_t i = 0; i < std::size(extremes) && i < gate.size(); ++i) gate[i] = extremes[i];
        std::vector<float> out(gate.size() + 16, 12345.0f);
        fn(gate.data(), up.data(), out.data(), n);
        for (size_t i = 0; i < gate.size(); ++i) {
          const double want = c.reference(gate[i]) * up[i];
          ASSERT_TRUE(std::isfinite(out[i])) << "element " << i << " gate " << gate[i];
          ASSERT_NEAR(out[i], want, 2e-6 * std::fabs(want) + 1e-6 * std::fabs(up[i]) + 1e-30)
              << "element " << i << " gate " << gate[i];
        }
        for (size_t i = gate.size(); i < out.size(); ++i) ASSERT_EQ(out[i], 12345.0f);
      }
    }
  }
}

}  // namespace
}  // namespace tern::cpu

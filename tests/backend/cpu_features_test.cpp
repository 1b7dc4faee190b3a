// Feature detection and path selection.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cpu/cpu_features.h"

namespace tern::cpu {
namespace {

TEST(CpuFeatures, PathsFollowFeatures) {
  const CpuFeatures f = detect_cpu_features();
  EXPECT_TRUE(cpu_path_available(CpuPath::Scalar, f));
  if (cpu_path_available(CpuPath::Avx512, f)) {
    EXPECT_TRUE(cpu_path_available(CpuPath::Avx2, f));
  }
  EXPECT_TRUE(cpu_path_available(best_cpu_path(f), f));
  CpuFeatures none;
  EXPECT_EQ(best_cpu_path(none), CpuPath::Scalar);
  CpuFeatures avx2_only;
  avx2_only.avx2 = avx2_only.fma = avx2_only.f16c = true;
  EXPECT_EQ(best_cpu_path(avx2_only), CpuPath::Avx2);
}

TEST(CpuFeatures, DefaultPathHonoursTernCpuPath) {
  const CpuFeatures f = detect_cpu_features();
  const char* env = std::getenv("TERN_CPU_PATH");
  if (env != nullptr && cpu_path_from_name(env) &&
      cpu_path_available(*cpu_path_from_name(env), f)) {
    EXPECT_EQ(default_cpu_path(), *cpu_path_from_name(env));
  } else {
    EXPECT_EQ(default_cpu_path(), best_cpu_path(f));
  }
}

// Tests that compare paths in one process switch them; an unavailable path changes nothing.
TEST(CpuFeatures, OverrideSwitchesTheDefaultPathAndBack) {
  const CpuFeatures f = detect_cpu_features();
  const CpuPath detected = default_cpu_path();
  set_cpu_path_override(CpuPath::Scalar);
  EXPECT_EQ(default_cpu_path(), CpuPath::Scalar);
  set_cpu_path_override(CpuPath::Avx512);
  EXPECT_EQ(default_cpu_path(),
            cpu_path_available(CpuPath::Avx512, f) ? CpuPath::Avx512 : CpuPath::Scalar);
  set_cpu_path_override(std::nullopt);
  EXPECT_EQ(default_cpu_path(), detected);
}

TEST(CpuFeatures, PathNamesRoundTrip) {
  for (CpuPath p : {CpuPath::Scalar, CpuPath::Avx2, CpuPath::Avx512}) {
    EXPECT_EQ(cpu_path_from_name(cpu_path_name(p)), p);
  }
  EXPECT_FALSE(cpu_path_from_name("sse9"));
}

}  // namespace
}  // namespace tern::cpu

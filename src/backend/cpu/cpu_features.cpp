// cpuid/xgetbv feature detection and the choice of kernel path (TERN_CPU_PATH overrides).
#include "backend/cpu/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace tern::cpu {
namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool bit(uint32_t word, int index) {
  return ((word >> index) & 1u) != 0;
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = bit(ecx, 27);
  const bool avx = bit(ecx, 28);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;
  if (!ymm_state) return f;
  f.fma = bit(ecx, 12);
  f.f16c = bit(ecx, 29);

  uint32_t max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const uint32_t max_subleaf = eax;
  f.avx2 = bit(ebx, 5);
  if (zmm_state) {
    f.avx512f = bit(ebx, 16);
    f.avx512dq = bit(ebx, 17);
    f.avx512bw = bit(ebx, 30);
    f.avx512vl = bit(ebx, 31);
    f.avx512_vnni = bit(ecx, 11);
  }
  f.amx = tile_state && bit(edx, 22) && bit(edx, 24) && bit(edx, 25);
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avx_vnni = bit(eax, 4);
    f.avx512_bf16 = zmm_state && bit(eax, 5);
  }
  return f;
}

std::string_view cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::Scalar:
      return "scalar";
    case CpuPath::Avx2:
      return "avx2";
    case CpuPath::Avx512:
      return "avx512";
  }
  return "scalar";
}

std::optional<CpuPath> cpu_path_from_name(std::string_view name) {
  if (name == "scalar") return CpuPath::Scalar;
  if (name == "avx2") return CpuPath::Avx2;
  if (name == "avx512") return CpuPath::Avx512;
  return std::nullopt;
}

bool cpu_path_available(CpuPath path, const CpuFeatures& f) {
  switch (path) {
    case CpuPath::Scalar:
      return true;
    case CpuPath::Avx2:
      return f.avx2 && f.fma && f.f16c;
    case CpuPath::Avx512:
      return cpu_path_available(CpuPath::Avx2, f) && f.avx512f && f.avx512bw && f.avx512vl &&
             f.avx512dq && f.avx512_vnni;
  }
  return false;
}

CpuPath best_cpu_path(const CpuFeatures& f) {
  if (cpu_path_available(CpuPath::Avx512, f)) return CpuPath::Avx512;
  if (cpu_path_available(CpuPath::Avx2, f)) return CpuPath::Avx2;
  return CpuPath::Scalar;
}

namespace {

// -1: none; else a CpuPath.
std::atomic<int> path_override{-1};

CpuPath detected_cpu_path() {
  static const CpuPath path = [] {
    const CpuFeatures features = detect_cpu_features();
    CpuPath best = best_cpu_path(features);
    if (const char* env = std::getenv("TERN_CPU_PATH")) {
      auto forced = cpu_path_from_name(env);
      if (forced && cpu_path_available(*forced, features)) return *forced;
    }
    return best;
  }();
  return path;
}

}  // namespace

CpuPath default_cpu_path() {
  const int forced = path_override.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<CpuPath>(forced) : detected_cpu_path();
}

void set_cpu_path_override(std::optional<CpuPath> path) {
  if (path && !cpu_path_available(*path, detect_cpu_features())) return;
  path_override.store(path ? static_cast<int>(*path) : -1, std::memory_order_relaxed);
}

}  // namespace tern::cpu

// What this x86-64 CPU can run, detected with cpuid/xgetbv, and which kernel path to use.
#pragma once

#include <optional>
#include <string_view>

namespace tern::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool avx512_bf16 = false;
  bool amx = false;  // AMX tiles + int8 + bf16 (detected only; no kernel uses it yet)
};

// Reads cpuid and checks that the OS saves the YMM/ZMM/tile state (xgetbv).
CpuFeatures detect_cpu_features();

// Kernel families. Avx512 needs F+BW+VL+DQ+VNNI (BF16 is used when present); Avx2 needs
// AVX2+FMA+F16C.
enum class CpuPath { Scalar, Avx2, Avx512 };

std::string_view cpu_path_name(CpuPath path);
std::optional<CpuPath> cpu_path_from_name(std::string_view name);  // "scalar" | "avx2" | "avx512"
bool cpu_path_available(CpuPath path, const CpuFeatures& features);
CpuPath best_cpu_path(const CpuFeatures& features);

// The path kernels use when the caller does not name one: the override below if set, else
// TERN_CPU_PATH if set (and available on this CPU; otherwise the best available path), else the
// best. Detected once per process.
CpuPath default_cpu_path();

// Makes default_cpu_path() return `path` (nullopt: back to the detected one) for the whole
// process, for tests that compare the CPU backend's paths in one process (the GPU's agreement
// with the CPU against the CPU's with itself). Weights are packed for a path when a model is
// loaded: set it before loading the model it is meant for, and not while another thread runs
// CPU kernels. An unavailable path is ignored.
void set_cpu_path_override(std::optional<CpuPath> path);

}  // namespace tern::cpu

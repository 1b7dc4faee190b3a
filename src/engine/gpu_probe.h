// The GPUs this build of Tern can use, as its CUDA runtime sees them, with their device-to-device
// copy bandwidth measured on the spot (for `tern doctor`). A build without CUDA reports why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace tern {

struct GpuProbe {
  int ordinal = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  uint64_t total_bytes = 0, free_bytes = 0;
  int driver_version = 0, runtime_version = 0;  // CUDA's encoding: 13000 is 13.0
  double copy_gb_s = 0;                         // 0 when it could not be measured
  std::string copy_error;
};

Result<std::vector<GpuProbe>> probe_gpus();

}  // namespace tern

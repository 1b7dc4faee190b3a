#include "engine/gpu_probe.h"

#ifdef TERN_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#endif

namespace tern {

Result<std::vector<GpuProbe>> probe_gpus() {
#ifdef TERN_HAVE_CUDA
  std::vector<GpuProbe> out;
  for (int i = 0; i < cuda_device_count(); ++i) {
    auto info = cuda_device_info(i);
    if (!info) return info.error();
    GpuProbe p;
    p.ordinal = i;
    p.name = info->name;
    p.compute_major = info->major;
    p.compute_minor = info->minor;
    p.total_bytes = info->total_bytes;
    p.free_bytes = info->free_bytes;
    p.driver_version = info->driver_version;
    p.runtime_version = info->runtime_version;
    if (auto bw = measure_copy_bandwidth(i)) {
      p.copy_gb_s = *bw;
    } else {
      p.copy_error = bw.error().message;
    }
    out.push_back(std::move(p));
  }
  return out;
#else
  return Error{"this build of Tern has no CUDA backend (build with -DTERN_CUDA=ON)"};
#endif
}

}  // namespace tern

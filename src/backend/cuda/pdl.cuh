// Programmatic dependent launch (Hopper): a kernel launched through launch_pdl may start while
// the kernel before it on the stream is still running (CUDA graphs keep this as a programmatic
// edge), so its launch latency and whatever it does before pdl_wait() - prefetching weights,
// which no kernel writes - overlap the previous kernel. Every kernel launched this way calls
// pdl_wait() before it reads or writes memory that earlier kernels touch: the wait returns once
// the previous grid has completed and its writes are visible (at once for a normal launch).
// pdl_launch_dependents() lets the next kernel's blocks be scheduled as soon as every block of
// this one has started. TERN_CUDA_PDL=0 in the environment launches normally.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

namespace tern::cuda {

__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// Starts fetching the bytes [p, p + bytes) into L2 (lanes of a warp take 128-byte lines).
__device__ __forceinline__ void prefetch_l2(const void* p, size_t bytes, int lane) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = static_cast<size_t>(lane) * 128; off < bytes; off += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
}

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TERN_CUDA_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// TERN_CUDA_SKIP_KERNELS=name,name: launches of the kernels whose mangled names contain one of
// the names are dropped. For timing alone (the outputs are wrong): inside a captured decode step
// with PDL a kernel's cost is the step time it adds, which no per-kernel profile shows (Nsight
// Compute runs each kernel alone, cold; Nsight Systems cannot make reports on the GPU machine).
inline bool skip_launch(const void* kernel) {
  static const char* const names = std::getenv("TERN_CUDA_SKIP_KERNELS");
  if (names == nullptr || *names == '\0') return false;
  const char* name = nullptr;
  if (cudaFuncGetName(&name, kernel) != cudaSuccess || name == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  for (const char* p = names; *p != '\0';) {
    const char* end = std::strchr(p, ',');
    const size_t length = end == nullptr ? std::strlen(p) : static_cast<size_t>(end - p);
    if (length > 0 &&
        std::string_view(name).find(std::string_view(p, length)) != std::string_view::npos) {
      return true;
    }
    p += length + (end == nullptr ? 0 : 1);
  }
  return false;
}

// launch_pdl with `shared_bytes` of dynamic shared memory a block.
template <typename... Params, typename... Args>
cudaError_t launch_pdl_shared(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                              cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  if (skip_launch(reinterpret_cast<const void*>(kernel))) return cudaSuccess;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                       Args&&... args) {
  return launch_pdl_shared(kernel, grid, block, 0, stream, std::forward<Args>(args)...);
}

}  // namespace tern::cuda

#include "backend/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {

CachingAllocator::~CachingAllocator() {
  trim();
}

size_t CachingAllocator::bucket(size_t bytes) {
  if (bytes <= 256) return 256;
  if (bytes <= (size_t{1} << 20)) {  // powers of two up to 1 MiB
    size_t b = 512;
    while (b < bytes) b <<= 1;
    return b;
  }
  // Larger blocks: multiples of 1/16 of the next power of two (at most 6% slack).
  size_t p = size_t{1} << 20;
  while (p < bytes) p <<= 1;
  const size_t step = p / 16;
  return (bytes + step - 1) / step * step;
}

Result<void*> CachingAllocator::allocate(size_t bytes) {
  const size_t b = bucket(bytes);
  auto it = free_.find(b);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= b;
    live_bytes_ += b;
    return p;
  }
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, b);
  if (status == cudaErrorMemoryAllocation && cached_bytes_ > 0) {
    (void)cudaGetLastError();
    trim();
    status = cudaMalloc(&p, b);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    (void)cudaMemGetInfo(&free_bytes, &total);
    return make_error("out of GPU memory allocating {:.1f} MiB ({:.1f} MiB free of {:.1f}): {}",
                      static_cast<double>(b) / 1048576.0,
                      static_cast<double>(free_bytes) / 1048576.0,
                      static_cast<double>(total) / 1048576.0, cudaGetErrorString(status));
  }
  ++device_allocations_;
  live_bytes_ += b;
  return p;
}

void CachingAllocator::release(void* data, size_t bytes) {
  if (data == nullptr) return;
  const size_t b = bucket(bytes);
  free_[b].push_back(data);
  cached_bytes_ += b;
  live_bytes_ -= b;
}

void CachingAllocator::trim() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) (void)cudaFree(p);
  }
  free_.clear();
  cached_bytes_ = 0;
}

}  // namespace tern::cuda

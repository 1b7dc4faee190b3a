// Device memory with size-bucketed free lists, so the per-forward scratch buffers of a model
// (the same sizes every decode step) are handed out again instead of calling cudaMalloc. All work
// runs on one stream, so memory released here may be reused by later work on that stream at
// once: the stream orders the old readers before the new writers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "base/error.h"

namespace tern::cuda {

class CachingAllocator {
 public:
  CachingAllocator() = default;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator();

  // A block of at least `bytes` (256-byte aligned). On cudaMalloc failure the cached blocks are
  // given back to the driver and the allocation is tried once more.
  Result<void*> allocate(size_t bytes);
  // Returns a block from allocate(bytes) to its bucket.
  void release(void* data, size_t bytes);
  // Frees every cached (unused) block.
  void trim();

  uint64_t cached_bytes() const { return cached_bytes_; }
  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t device_allocations() const { return device_allocations_; }

  static size_t bucket(size_t bytes);

 private:
  std::map<size_t, std::vector<void*>> free_;
  uint64_t cached_bytes_ = 0;
  uint64_t live_bytes_ = 0;
  uint64_t device_allocations_ = 0;
};

}  // namespace tern::cuda

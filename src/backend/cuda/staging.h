// Host-to-device uploads of the small arrays each op call passes (token ids, positions, slots,
// block tables) through one pinned ring buffer: the host copies into the ring, one async copy
// moves it, and an event marks when that part of the ring may be written again. The host waits
// only when the ring wraps onto a copy the GPU has not done yet.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <deque>
#include <vector>

#include "base/error.h"

namespace tern::cuda {

class StagingRing {
 public:
  explicit StagingRing(size_t bytes = size_t{8} << 20) : capacity_(bytes) {}
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  ~StagingRing();

  // Allocates the pinned ring (done before any graph capture).
  Result<void> init();
  // Copies `bytes` from `host` to `device_dst` on `stream`; `host` may be reused on return.
  // `deferred`: the stream is being captured into a graph, so the copy runs only when the graph
  // is launched; record_deferred() must follow that launch.
  Result<void> upload(const void* host, void* device_dst, size_t bytes, cudaStream_t stream,
                      bool deferred = false);
  // Marks the deferred copies as enqueued (after the graph holding them was launched).
  Result<void> record_deferred(cudaStream_t stream);

 private:
  struct Pending {
    size_t begin, end;
    cudaEvent_t event;
  };
  Result<cudaEvent_t> event();
  size_t capacity_;
  unsigned char* ring_ = nullptr;
  size_t pos_ = 0;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace tern::cuda

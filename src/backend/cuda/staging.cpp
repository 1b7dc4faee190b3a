#include "backend/cuda/staging.h"

#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {

StagingRing::~StagingRing() {
  for (auto& p : pending_) {
    (void)cudaEventSynchronize(p.event);
    (void)cudaEventDestroy(p.event);
  }
  for (auto e : spare_events_) (void)cudaEventDestroy(e);
  if (ring_ != nullptr) (void)cudaFreeHost(ring_);
}

Result<void> StagingRing::init() {
  void* p = nullptr;
  TERN_CUDA_TRY(cudaMallocHost(&p, capacity_));
  ring_ = static_cast<unsigned char*>(p);
  return {};
}

Result<void> StagingRing::upload(const void* host, void* device_dst, size_t bytes,
                                 cudaStream_t stream) {
  if (bytes == 0) return {};
  if (ring_ == nullptr) TERN_TRY(init());
  if (bytes > capacity_ / 4) {
    // Too large for the ring: the driver stages pageable memory itself before returning.
    TERN_CUDA_TRY(cudaMemcpyAsync(device_dst, host, bytes, cudaMemcpyHostToDevice, stream));
    return {};
  }
  const size_t size = (bytes + 255) / 256 * 256;
  if (pos_ + size > capacity_) pos_ = 0;
  const size_t begin = pos_, end = pos_ + size;
  // Retire finished copies (oldest first), then wait for every earlier copy that still reads the
  // region about to be written.
  while (!pending_.empty() && cudaEventQuery(pending_.front().event) == cudaSuccess) {
    spare_events_.push_back(pending_.front().event);
    pending_.pop_front();
  }
  (void)cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not an error
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->begin < end && begin < it->end) {
      TERN_CUDA_TRY(cudaEventSynchronize(it->event));
      spare_events_.push_back(it->event);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  std::memcpy(ring_ + begin, host, bytes);
  TERN_CUDA_TRY(cudaMemcpyAsync(device_dst, ring_ + begin, bytes, cudaMemcpyHostToDevice, stream));
  cudaEvent_t event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else {
    TERN_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  TERN_CUDA_TRY(cudaEventRecord(event, stream));
  pending_.push_back({begin, end, event});
  pos_ = end;
  return {};
}

}  // namespace tern::cuda

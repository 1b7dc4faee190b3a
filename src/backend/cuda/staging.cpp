#include "backend/cuda/staging.h"

#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {

StagingRing::~StagingRing() {
  for (auto& p : pending_) {
    if (p.event == nullptr) continue;
    (void)cudaEventSynchronize(p.event);
    (void)cudaEventDestroy(p.event);
  }
  for (auto e : spare_events_) (void)cudaEventDestroy(e);
  if (ring_ != nullptr) (void)cudaFreeHost(ring_);
}

Result<void> StagingRing::init() {
  if (ring_ != nullptr) return {};
  void* p = nullptr;
  TERN_CUDA_TRY(cudaMallocHost(&p, capacity_));
  ring_ = static_cast<unsigned char*>(p);
  return {};
}

Result<cudaEvent_t> StagingRing::event() {
  cudaEvent_t e = nullptr;
  if (!spare_events_.empty()) {
    e = spare_events_.back();
    spare_events_.pop_back();
  } else {
    TERN_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  return e;
}

Result<void> StagingRing::record_deferred(cudaStream_t stream) {
  for (auto& p : pending_) {
    if (p.event != nullptr) continue;
    auto e = event();
    if (!e) return e.error();
    TERN_CUDA_TRY(cudaEventRecord(*e, stream));
    p.event = *e;
  }
  return {};
}

Result<void> StagingRing::upload(const void* host, void* device_dst, size_t bytes,
                                 cudaStream_t stream, bool deferred) {
  if (bytes == 0) return {};
  if (ring_ == nullptr) TERN_TRY(init());
  if (bytes > capacity_ / 4) {
    if (deferred) return Error{"staging: a captured upload may not exceed a quarter of the ring"};
    // Too large for the ring: the driver stages pageable memory itself before returning.
    TERN_CUDA_TRY(cudaMemcpyAsync(device_dst, host, bytes, cudaMemcpyHostToDevice, stream));
    return {};
  }
  const size_t size = (bytes + 255) / 256 * 256;
  if (pos_ + size > capacity_) pos_ = 0;
  const size_t begin = pos_, end = pos_ + size;
  // Retire finished copies (oldest first), then wait for every earlier copy that still reads the
  // region about to be written.
  while (!pending_.empty() && pending_.front().event != nullptr &&
         cudaEventQuery(pending_.front().event) == cudaSuccess) {
    spare_events_.push_back(pending_.front().event);
    pending_.pop_front();
  }
  (void)cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not an error
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->begin < end && begin < it->end) {
      if (it->event == nullptr) return Error{"staging: one captured step overflowed the ring"};
      TERN_CUDA_TRY(cudaEventSynchronize(it->event));
      spare_events_.push_back(it->event);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  std::memcpy(ring_ + begin, host, bytes);
  TERN_CUDA_TRY(cudaMemcpyAsync(device_dst, ring_ + begin, bytes, cudaMemcpyHostToDevice, stream));
  cudaEvent_t recorded = nullptr;
  if (!deferred) {
    auto e = event();
    if (!e) return e.error();
    recorded = *e;
    TERN_CUDA_TRY(cudaEventRecord(recorded, stream));
  }
  pending_.push_back({begin, end, recorded});
  pos_ = end;
  return {};
}

}  // namespace tern::cuda

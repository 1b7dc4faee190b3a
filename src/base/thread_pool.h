// A fixed set of worker threads for data-parallel loops (CPU kernels). Passed explicitly, never
// global. A decode step issues hundreds of short parallel loops, so workers spin briefly on an
// atomic generation counter before sleeping: waking a sleeping thread costs more than most
// loops take.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tern {

class ThreadPool {
 public:
  // threads == 0 means one per hardware thread.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Splits [0, count) into one contiguous range per thread (the caller runs one of them) and
  // returns when all are done. body(begin, end, thread_index). Not reentrant.
  void parallel_for(size_t count, const std::function<void(size_t, size_t, size_t)>& body);

 private:
  void worker_loop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  const std::function<void(size_t, size_t, size_t)>* body_ = nullptr;
  size_t count_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> pending_{0};
  std::atomic<size_t> sleeping_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace tern

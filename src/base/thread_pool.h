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

  // Runs body(begin, end, thread_index) over [0, count) and returns when all is done. The range
  // is cut into a few chunks per thread; each thread runs its own chunks in order (so that its
  // share stays one sequential stream), then takes chunks left in the others' queues: a thread
  // the OS has descheduled does not hold the others up. A body may be called several times per
  // thread; thread_index is unique among the threads running it at once. Not reentrant.
  void parallel_for(size_t count, const std::function<void(size_t, size_t, size_t)>& body);

 private:
  void worker_loop(size_t index);
  void run_chunks(size_t self);

  struct alignas(64) ChunkQueue {
    std::atomic<size_t> next{0};  // the next chunk to take
    size_t end = 0;               // one past this queue's last chunk
  };

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  const std::function<void(size_t, size_t, size_t)>* body_ = nullptr;
  size_t count_ = 0;
  size_t chunks_ = 0;
  std::vector<ChunkQueue> queues_;  // one per thread, the caller's first
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> closed_{0};  // the last generation whose chunks are all taken
  std::atomic<size_t> active_{0};    // workers inside run_chunks
  std::atomic<size_t> sleeping_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace tern

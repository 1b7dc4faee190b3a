#include "base/thread_pool.h"

#include <immintrin.h>

namespace tern {
namespace {

constexpr int kSpinIterations = 1 << 14;  // ~100 µs of pause instructions before sleeping

void run_share(const std::function<void(size_t, size_t, size_t)>& body, size_t count, size_t index,
               size_t threads) {
  size_t begin = count * index / threads;
  size_t end = count * (index + 1) / threads;
  if (begin < end) body(begin, end, index);
}

}  // namespace

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  { std::lock_guard lock(mutex_); }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::parallel_for(size_t count,
                              const std::function<void(size_t, size_t, size_t)>& body) {
  if (workers_.empty() || count <= 1) {
    if (count > 0) body(0, count, 0);
    return;
  }
  body_ = &body;
  count_ = count;
  pending_.store(workers_.size());
  generation_.fetch_add(1);  // publishes body_ and count_ (seq_cst)
  if (sleeping_.load() > 0) {
    std::lock_guard lock(mutex_);
    work_ready_.notify_all();
  }
  run_share(body, count, 0, size());
  while (pending_.load() != 0) _mm_pause();
  body_ = nullptr;
}

void ThreadPool::worker_loop(size_t index) {
  uint64_t seen = 0;
  while (true) {
    int spins = 0;
    while (generation_.load() == seen && spins < kSpinIterations) {
      _mm_pause();
      ++spins;
    }
    if (generation_.load() == seen) {
      std::unique_lock lock(mutex_);
      sleeping_.fetch_add(1);
      work_ready_.wait(lock, [&] { return generation_.load() != seen; });
      sleeping_.fetch_sub(1);
    }
    seen = generation_.load();
    if (stopping_.load()) return;
    run_share(*body_, count_, index, size());
    pending_.fetch_sub(1);
  }
}

}  // namespace tern

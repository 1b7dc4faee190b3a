#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace tern {
namespace {

constexpr int kSpinIterations = 1 << 14;  // ~100 µs of pause instructions before sleeping
// Chunks per thread: enough that a thread can take over a descheduled thread's work in pieces,
// few enough that each thread's own chunks stay one long sequential stream.
constexpr size_t kChunksPerThread = 4;

}  // namespace

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  queues_ = std::vector<ChunkQueue>(threads);
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  { std::lock_guard lock(mutex_); }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

// Takes chunks from this thread's own queue first, in order, then from the others'.
void ThreadPool::run_chunks(size_t self) {
  const size_t threads = size();
  for (size_t k = 0; k < threads; ++k) {
    ChunkQueue& q = queues_[(self + k) % threads];
    for (size_t c = q.next.fetch_add(1); c < q.end; c = q.next.fetch_add(1)) {
      const size_t begin = count_ * c / chunks_;
      const size_t end = count_ * (c + 1) / chunks_;
      if (begin < end) (*body_)(begin, end, self);
    }
  }
}

void ThreadPool::parallel_for(size_t count,
                              const std::function<void(size_t, size_t, size_t)>& body) {
  if (workers_.empty() || count <= 1) {
    if (count > 0) body(0, count, 0);
    return;
  }
  const size_t threads = size();
  chunks_ = std::min(count, threads * kChunksPerThread);
  for (size_t i = 0; i < threads; ++i) {
    queues_[i].next.store(chunks_ * i / threads, std::memory_order_relaxed);
    queues_[i].end = chunks_ * (i + 1) / threads;
  }
  body_ = &body;
  count_ = count;
  const uint64_t generation = generation_.fetch_add(1) + 1;  // publishes the above (seq_cst)
  if (sleeping_.load() > 0) {
    std::lock_guard lock(mutex_);
    work_ready_.notify_all();
  }
  run_chunks(0);
  // Every chunk is taken. A worker that has not joined yet must not join now (it would read
  // `body_` after this returns), and those inside a chunk are waited for: with `closed_` stored
  // before `active_` is read here, and `active_` raised before `closed_` is read in a worker,
  // one side always sees the other (both seq_cst).
  closed_.store(generation);
  // Spin, then yield: with more runnable threads than cores the worker being waited for may
  // need this very core.
  for (int spins = 0; active_.load() != 0; ++spins) {
    if (spins < kSpinIterations) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
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
    active_.fetch_add(1);
    if (closed_.load() < seen) run_chunks(index);  // else that call has already returned
    active_.fetch_sub(1);
  }
}

}  // namespace tern

#include "base/thread_pool.h"

namespace tern {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

static void run_share(const std::function<void(size_t, size_t, size_t)>& body, size_t count,
                      size_t index, size_t threads) {
  size_t begin = count * index / threads;
  size_t end = count * (index + 1) / threads;
  if (begin < end) body(begin, end, index);
}

void ThreadPool::parallel_for(size_t count,
                              const std::function<void(size_t, size_t, size_t)>& body) {
  if (workers_.empty() || count <= 1) {
    if (count > 0) body(0, count, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    count_ = count;
    pending_ = workers_.size();
    ++generation_;
  }
  work_ready_.notify_all();
  run_share(body, count, 0, size());
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen_generation = 0;
  while (true) {
    const std::function<void(size_t, size_t, size_t)>* body = nullptr;
    size_t count = 0;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      body = body_;
      count = count_;
    }
    run_share(*body, count, index, size());
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) work_done_.notify_one();
    }
  }
}

}  // namespace tern

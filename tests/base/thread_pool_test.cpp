// The thread pool: every index runs exactly once, bodies see thread indices unique among those
// running at once, a thread held up does not hold up the work (the others take its chunks), and
// back-to-back calls never let a late worker run a finished call's body.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tern {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  for (size_t threads : {1u, 2u, 3u, 8u}) {
    ThreadPool pool(threads);
    for (size_t count : {0u, 1u, 2u, 7u, 31u, 1000u}) {
      std::vector<std::atomic<int>> hits(count);
      pool.parallel_for(count, [&](size_t begin, size_t end, size_t thread) {
        ASSERT_LT(begin, end);
        ASSERT_LE(end, count);
        ASSERT_LT(thread, pool.size());
        for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << count;
    }
  }
}

TEST(ThreadPool, ThreadIndicesAreUniqueAmongRunningBodies) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> inside(pool.size());
  std::atomic<bool> clash{false};
  for (int round = 0; round < 200; ++round) {
    pool.parallel_for(64, [&](size_t, size_t, size_t thread) {
      if (inside[thread].fetch_add(1) != 0) clash = true;
      std::this_thread::yield();
      inside[thread].fetch_sub(1);
    });
  }
  EXPECT_FALSE(clash.load());
}

TEST(ThreadPool, OthersTakeTheChunksOfAThreadThatIsHeldUp) {
  ThreadPool pool(2);
  // The worker's first chunk stalls (as when the OS deschedules it); the caller, which waits
  // until the worker is inside that chunk, must meanwhile run everything else, including the
  // rest of what was the worker's own share.
  std::atomic<int> worker_chunks{0}, caller_chunks{0};
  std::atomic<bool> worker_inside{false};
  bool worker_joined = true;
  pool.parallel_for(1000, [&](size_t, size_t, size_t thread) {
    if (thread != 0) {
      if (!worker_inside.exchange(true))
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      worker_chunks.fetch_add(1);
      return;
    }
    if (caller_chunks.fetch_add(1) == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!worker_inside.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      worker_joined = worker_inside.load();
    }
  });
  ASSERT_TRUE(worker_joined) << "the worker never ran";
  EXPECT_EQ(worker_chunks.load() + caller_chunks.load(), 8);  // 4 chunks per thread
  EXPECT_EQ(worker_chunks.load(), 1) << "the stalled worker's share waited for it";
  EXPECT_EQ(caller_chunks.load(), 7);
}

TEST(ThreadPool, BackToBackCallsStayCorrect) {
  // Many short calls with different bodies: a worker that wakes late must never run a body
  // whose call has returned (its captured references would be gone).
  ThreadPool pool(3);
  for (int round = 0; round < 20000; ++round) {
    std::vector<int> cells(static_cast<size_t>(round % 7 + 2), 0);
    pool.parallel_for(cells.size(), [&cells](size_t begin, size_t end, size_t) {
      for (size_t i = begin; i < end; ++i) cells[i] += 1;
    });
    for (int c : cells) ASSERT_EQ(c, 1) << "round " << round;
  }
}

}  // namespace
}  // namespace tern

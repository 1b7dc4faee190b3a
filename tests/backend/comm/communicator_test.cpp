// The Open MPI communicator against a serial reference: every rank derives every other rank's
// input from (rank, index), so each can compute what a collective must give without talking.
// Runs under mpirun with 2 and 4 ranks (CTest: comm_test_np2, comm_test_np4).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "mpi_test_main.h"

namespace tern {
namespace {

using testing::world;

// Rank r's value at index i: distinct per rank and index, not integers (so that the sum is a
// real float reduction), small enough that any summation order agrees to 1e-6 relative.
float input(int rank, size_t i) {
  return std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(rank) * 1.9f) *
         static_cast<float>(1 + rank);
}

TEST(Communicator, RankAndSizeMatchTheLauncher) {
  const LaunchedRanks launched = launched_ranks();
  EXPECT_EQ(world().size(), launched.size);
  EXPECT_EQ(world().rank(), launched.rank);
  EXPECT_GE(world().size(), 2) << "run with mpirun -np 2 or more";
  EXPECT_NE(world().name().find("MPI"), std::string::npos);
}

TEST(Communicator, AllReduceSumsEveryRank) {
  for (size_t count : {size_t{1}, size_t{7}, size_t{4096}, size_t{100003}}) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = input(world().rank(), i);
    ASSERT_TRUE(world().all_reduce_sum(data.data(), count).ok());
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < world().size(); ++r) want += input(r, i);
      ASSERT_NEAR(data[i], want, 1e-5f * (1 + std::fabs(want))) << "count " << count << " i " << i;
    }
  }
}

TEST(Communicator, AllGatherLaysRanksOutInOrder) {
  const size_t count = 513;
  std::vector<float> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = input(world().rank(), i);
  std::vector<float> all(count * static_cast<size_t>(world().size()), -1.0f);
  ASSERT_TRUE(world().all_gather(mine.data(), count, all.data()).ok());
  for (int r = 0; r < world().size(); ++r) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(all[static_cast<size_t>(r) * count + i], input(r, i)) << "rank " << r;
    }
  }
}

TEST(Communicator, ReduceScatterGivesEachRankItsSummedBlock) {
  const size_t count = 1000;
  const auto size = static_cast<size_t>(world().size());
  std::vector<float> in(count * size);
  for (size_t i = 0; i < in.size(); ++i) in[i] = input(world().rank(), i);
  std::vector<float> out(count);
  ASSERT_TRUE(world().reduce_scatter_sum(in.data(), out.data(), count).ok());
  for (size_t i = 0; i < count; ++i) {
    const size_t at = static_cast<size_t>(world().rank()) * count + i;
    float want = 0;
    for (int r = 0; r < world().size(); ++r) want += input(r, at);
    ASSERT_NEAR(out[i], want, 1e-5f * (1 + std::fabs(want))) << i;
  }
}

TEST(Communicator, SendAndReceiveAroundARing) {
  const int size = world().size(), rank = world().rank();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const size_t count = 2049;
  std::vector<float> mine(count), got(count, 0.0f);
  for (size_t i = 0; i < count; ++i) mine[i] = input(rank, i);
  // Even ranks send first, odd ranks receive first: blocking pairs cannot deadlock.
  if (rank % 2 == 0) {
    ASSERT_TRUE(world().send(mine.data(), count, next).ok());
    ASSERT_TRUE(world().recv(got.data(), count, prev).ok());
  } else {
    ASSERT_TRUE(world().recv(got.data(), count, prev).ok());
    ASSERT_TRUE(world().send(mine.data(), count, next).ok());
  }
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], input(prev, i)) << i;
}

TEST(Communicator, BroadcastFromEveryRoot) {
  for (int root = 0; root < world().size(); ++root) {
    std::vector<int64_t> data(37, -1);
    if (world().rank() == root) std::iota(data.begin(), data.end(), int64_t{root} * 1000);
    ASSERT_TRUE(world().broadcast(data.data(), data.size() * sizeof(int64_t), root).ok());
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], int64_t{root} * 1000 + static_cast<int64_t>(i)) << "root " << root;
    }
  }
}

TEST(Communicator, BarrierAndBadPeersAreErrors) {
  EXPECT_TRUE(world().barrier().ok());
  float x = 0;
  auto self = world().send(&x, 1, world().rank());
  ASSERT_FALSE(self.ok());
  EXPECT_NE(self.error().message.find("ranks are 0.."), std::string::npos) << self.error().message;
  EXPECT_FALSE(world().recv(&x, 1, world().size()).ok());
  EXPECT_FALSE(world().broadcast(&x, sizeof(x), -1).ok());
  EXPECT_TRUE(world().barrier().ok());  // the group is still usable
}

TEST(SingleRank, CollectivesAreCopiesAndPeersErrors) {
  auto one = make_single_rank_communicator();
  EXPECT_EQ(one->size(), 1);
  std::vector<float> a = {1, 2, 3}, b(3);
  ASSERT_TRUE(one->all_reduce_sum(a.data(), 3).ok());
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE(one->all_gather(a.data(), 3, b.data()).ok());
  EXPECT_EQ(b, a);
  EXPECT_FALSE(one->send(a.data(), 3, 1).ok());
  EXPECT_FALSE(one->recv(a.data(), 3, 0).ok());
  EXPECT_TRUE(one->barrier().ok());
}

}  // namespace
}  // namespace tern

// The TCP communicator with real processes on loopback: each test forks one process per rank,
// which joins the group at a free port and checks every collective against a serial reference
// (each rank derives every other rank's input from (rank, index), as in communicator_test.cpp).
// Also: a rank killed inside a collective (the others get an error within seconds, no hang),
// rank 0 killed while the others idle in broadcast, an unreachable rendezvous (a clear error
// after the timeout), and a group whose ranks disagree on its size or claim one rank twice.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "backend/comm/communicator.h"

namespace tern {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

float input(int rank, size_t i) {
  return std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(rank) * 1.9f) *
         static_cast<float>(1 + rank);
}

// A port nobody listens on right now (bound to port 0, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string rendezvous() {
  return "127.0.0.1:" + std::to_string(free_port());
}

// Runs body(rank) in one child process per rank; a child exits 0 when its body returns "" (else
// prints the message, naming its rank). A child still running after `limit` is killed. Returns
// each rank's exit code (-signal when it was killed by one, -100 when it had to be killed).
using Body = std::function<std::string(int rank)>;
std::vector<int> run_ranks(int n, const Body& body, std::chrono::seconds limit = 60s) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::string failure = body(r);
      if (!failure.empty()) std::fprintf(stderr, "rank %d: %s\n", r, failure.c_str());
      std::fflush(stderr);
      ::_exit(failure.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(n), -100);
  const auto deadline = Clock::now() + limit;
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        pids[i] = 0;
        --left;
      }
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      for (pid_t& p : pids) {
        if (p <= 0) continue;
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
        p = 0;
      }
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  return codes;
}

std::string why(const Error& e) {
  return e.message;
}

#define CHECK_OK(expr)                                         \
  do {                                                         \
    const auto& _r = (expr);                                   \
    if (!_r) return std::string(#expr ": ") + why(_r.error()); \
  } while (0)
#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) return std::string(#cond " ") + fmt::format(__VA_ARGS__); \
  } while (0)

// Every collective on `size` ranks, against the serial reference.
std::string every_collective(int rank, int size, const std::string& at) {
  auto joined = make_tcp_communicator(at, rank, size, 20s);
  CHECK_OK(joined);
  Communicator& c = **joined;
  CHECK(c.rank() == rank && c.size() == size, "rank {} size {}", c.rank(), c.size());
  CHECK(c.name().find("TCP") != std::string::npos, "{}", c.name());
  CHECK(c.local_size() == size && c.local_rank() == rank, "local {} of {}", c.local_rank(),
        c.local_size());
  CHECK(c.leader_survives(), "");

  // All-reduce: the sum in rank order, bit for bit (rank 0 sums, the others get its result).
  for (size_t count : {size_t{1}, size_t{7}, size_t{4096}, size_t{100003}}) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = input(rank, i);
    CHECK_OK(c.all_reduce_sum(data.data(), count));
    for (size_t i = 0; i < count; ++i) {
      float want = input(0, i);
      for (int r = 1; r < size; ++r) want += input(r, i);
      CHECK(data[i] == want, "all-reduce count {} i {}: {} vs {}", count, i, data[i], want);
    }
  }
  {  // all-gather
    const size_t count = 513;
    std::vector<float> mine(count), all(count * static_cast<size_t>(size), -1.0f);
    for (size_t i = 0; i < count; ++i) mine[i] = input(rank, i);
    CHECK_OK(c.all_gather(mine.data(), count, all.data()));
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < count; ++i) {
        CHECK(all[static_cast<size_t>(r) * count + i] == input(r, i), "all-gather rank {} i {}", r,
              i);
      }
    }
  }
  {  // reduce-scatter
    const size_t count = 1000;
    std::vector<float> in(count * static_cast<size_t>(size)), out(count);
    for (size_t i = 0; i < in.size(); ++i) in[i] = input(rank, i);
    CHECK_OK(c.reduce_scatter_sum(in.data(), out.data(), count));
    for (size_t i = 0; i < count; ++i) {
      const size_t at_i = static_cast<size_t>(rank) * count + i;
      float want = input(0, at_i);
      for (int r = 1; r < size; ++r) want += input(r, at_i);
      CHECK(out[i] == want, "reduce-scatter i {}: {} vs {}", i, out[i], want);
    }
  }
  {  // send/recv around a ring (with 4 ranks, between followers too: 1 -> 2 -> 3)
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const size_t count = 2049;
    std::vector<float> mine(count), got(count, 0.0f);
    for (size_t i = 0; i < count; ++i) mine[i] = input(rank, i);
    if (rank % 2 == 0) {
      CHECK_OK(c.send(mine.data(), count, next));
      CHECK_OK(c.recv(got.data(), count, prev));
    } else {
      CHECK_OK(c.recv(got.data(), count, prev));
      CHECK_OK(c.send(mine.data(), count, next));
    }
    for (size_t i = 0; i < count; ++i) CHECK(got[i] == input(prev, i), "ring i {}", i);
  }
  for (int root = 0; root < size; ++root) {  // broadcast from every root
    std::vector<int64_t> data(37, -1);
    if (rank == root) std::iota(data.begin(), data.end(), int64_t{root} * 1000);
    CHECK_OK(c.broadcast(data.data(), data.size() * sizeof(int64_t), root));
    for (size_t i = 0; i < data.size(); ++i) {
      CHECK(data[i] == int64_t{root} * 1000 + static_cast<int64_t>(i), "broadcast root {}", root);
    }
  }
  CHECK_OK(c.barrier());
  // Bad peers are errors that leave the group usable.
  float x = 0;
  auto self = c.send(&x, 1, rank);
  CHECK(!self.ok() && self.error().message.find("ranks are 0..") != std::string::npos, "self");
  CHECK(!c.recv(&x, 1, size).ok(), "recv from rank {}", size);
  CHECK(!c.broadcast(&x, sizeof(x), -1).ok(), "broadcast from -1");
  CHECK_OK(c.barrier());
  return "";
}

TEST(TcpCommunicator, EveryCollectiveOnTwoRanks) {
  const std::string at = rendezvous();
  EXPECT_EQ(run_ranks(2, [&](int r) { return every_collective(r, 2, at); }),
            (std::vector<int>{0, 0}));
}

TEST(TcpCommunicator, EveryCollectiveOnFourRanks) {
  const std::string at = rendezvous();
  EXPECT_EQ(run_ranks(4, [&](int r) { return every_collective(r, 4, at); }),
            (std::vector<int>{0, 0, 0, 0}));
}

// A peer's frame of another call than this rank's is an error naming both, not a misread.
TEST(TcpCommunicator, OutOfStepRanksAreAnError) {
  const std::string at = rendezvous();
  auto codes = run_ranks(2, [&](int r) -> std::string {
    auto c = make_tcp_communicator(at, r, 2, 20s);
    CHECK_OK(c);
    std::vector<float> v(8, 1.0f);
    if (r == 1) {
      auto gathered = std::vector<float>(16);
      (void)(*c)->all_gather(v.data(), 8, gathered.data());
      return "";
    }
    auto done = (*c)->all_reduce_sum(v.data(), 8);
    CHECK(!done.ok(), "rank 0's all-reduce against an all-gather succeeded");
    CHECK(done.error().message.find("out of step") != std::string::npos, "{}",
          done.error().message);
    return "";
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Rank 3 is killed while the others wait inside an all-reduce: rank 0 names it, ranks 1 and 2
// (waiting on rank 0) get an error too, all within a few seconds.
TEST(TcpCommunicator, APeerKilledMidCollectiveFailsTheOthersQuickly) {
  const std::string at = rendezvous();
  auto codes = run_ranks(
      4,
      [&](int r) -> std::string {
        auto c = make_tcp_communicator(at, r, 4, 20s);
        CHECK_OK(c);
        std::vector<float> v(4096, 1.0f);
        for (int i = 0; i < 20; ++i) CHECK_OK((*c)->all_reduce_sum(v.data(), v.size()));
        if (r == 3) {
          std::this_thread::sleep_for(300ms);  // the others are inside the next all-reduce
          ::raise(SIGKILL);
        }
        const auto start = Clock::now();
        auto done = (*c)->all_reduce_sum(v.data(), v.size());
        const double took = std::chrono::duration<double>(Clock::now() - start).count();
        CHECK(!done.ok(), "an all-reduce without rank 3 succeeded");
        CHECK(took < 5.0, "the error took {:.1f} s: {}", took, done.error().message);
        if (r == 0) {
          CHECK(done.error().message.find("rank 3 is gone") != std::string::npos, "{}",
                done.error().message);
        }
        // The group stays failed: every later call says why at once.
        auto again = (*c)->barrier();
        CHECK(!again.ok() && again.error().message.find("group is gone") != std::string::npos, "{}",
              again.ok() ? "ok" : again.error().message);
        return "";
      },
      30s);
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, -SIGKILL}));
}

// Followers idling in broadcast (as between requests) hear at once that rank 0 is gone.
TEST(TcpCommunicator, FollowersWaitingInBroadcastSeeRank0Die) {
  const std::string at = rendezvous();
  auto codes = run_ranks(
      3,
      [&](int r) -> std::string {
        auto c = make_tcp_communicator(at, r, 3, 20s);
        CHECK_OK(c);
        if (r == 0) {
          std::this_thread::sleep_for(500ms);
          ::raise(SIGKILL);
        }
        int64_t header[2];
        const auto start = Clock::now();
        auto done = (*c)->broadcast(header, sizeof(header), 0);
        const double took = std::chrono::duration<double>(Clock::now() - start).count();
        CHECK(!done.ok(), "a broadcast from a dead rank 0 succeeded");
        CHECK(done.error().message.find("rank 0 is gone") != std::string::npos, "{}",
              done.error().message);
        CHECK(took < 5.0, "took {:.1f} s", took);
        return "";
      },
      30s);
  EXPECT_EQ(codes, (std::vector<int>{-SIGKILL, 0, 0}));
}

TEST(TcpCommunicator, AnUnreachableRendezvousIsAnErrorAfterTheTimeout) {
  const std::string at = rendezvous();  // nobody listens there
  const auto start = Clock::now();
  auto c = make_tcp_communicator(at, 1, 2, 1500ms);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message,
            "rank 1: could not reach rank 0 at " + at + " within 1.5 s: Connection refused");
  EXPECT_GE(took, 1.4);
  EXPECT_LT(took, 5.0);
}

TEST(TcpCommunicator, Rank0AloneTimesOutNamingTheMissingRanks) {
  auto c = make_tcp_communicator(rendezvous(), 0, 3, 500ms);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("only 1 of 3 ranks joined"), std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("missing: rank 1, 2"), std::string::npos) << c.error().message;
}

TEST(TcpCommunicator, BadAddressesAndRanksAreErrors) {
  auto bad_port = make_tcp_communicator("127.0.0.1:http", 0, 2, 100ms);
  ASSERT_FALSE(bad_port.ok());
  EXPECT_NE(bad_port.error().message.find("the port 'http' is not a number"), std::string::npos)
      << bad_port.error().message;
  EXPECT_FALSE(make_tcp_communicator("localhost", 0, 2, 100ms).ok());
  EXPECT_FALSE(make_tcp_communicator("127.0.0.1:70000", 0, 2, 100ms).ok());
  auto out_of_range = make_tcp_communicator("127.0.0.1:1", 2, 2, 100ms);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(out_of_range.error().message.find("ranks 0..1"), std::string::npos);
  auto v6 = parse_rendezvous("[::1]:29500");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 29500);
}

TEST(TcpCommunicator, RanksThatDisagreeOnTheSizeAreRefused) {
  const std::string at = rendezvous();
  auto codes = run_ranks(2, [&](int r) -> std::string {
    auto c = make_tcp_communicator(at, r, r == 0 ? 2 : 3, 10s);
    CHECK(!c.ok(), "a group of mismatched sizes formed");
    const std::string& m = c.error().message;
    CHECK(m.find("rank 1 (at 127.0.0.1) is in a group of 3 ranks, but rank 0's has 2") !=
              std::string::npos,
          "{}", m);
    if (r == 1) CHECK(m.find("refused the group") != std::string::npos, "{}", m);
    return "";
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(TcpCommunicator, TwoProcessesClaimingOneRankAreRefused) {
  const std::string at = rendezvous();
  auto codes = run_ranks(3, [&](int r) -> std::string {
    // Processes 1 and 2 both say they are rank 1 (process 2 a little later).
    if (r == 2) std::this_thread::sleep_for(300ms);
    auto c = make_tcp_communicator(at, r == 0 ? 0 : 1, 3, 10s);
    CHECK(!c.ok(), "a group with rank 1 twice formed");
    const std::string& m = c.error().message;
    CHECK(m.find("two processes say they are rank 1") != std::string::npos, "{}", m);
    return "";
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// A peer speaking another version of the protocol (an older or newer tern): rank 0 says so.
TEST(TcpCommunicator, AnotherProtocolVersionIsRefused) {
  const int port = free_port();
  const std::string at = "127.0.0.1:" + std::to_string(port);
  auto codes = run_ranks(2, [&](int r) -> std::string {
    if (r == 0) {
      auto c = make_tcp_communicator(at, 0, 2, 10s);
      CHECK(!c.ok(), "rank 0 took a peer of another version");
      CHECK(c.error().message.find("version 99 of Tern's rank protocol") != std::string::npos, "{}",
            c.error().message);
      return "";
    }
    // What a version-99 tern's hello header would look like: magic "TERN", op 1, version 99.
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
        const unsigned char header[24] = {'T', 'E', 'R', 'N', 1, 0, 99, 0};
        CHECK(::write(fd, header, sizeof(header)) == 24, "write");
        char reply[512];
        CHECK(::read(fd, reply, sizeof(reply)) > 24, "no rejection");
        ::close(fd);
        return "";
      }
      ::close(fd);
      std::this_thread::sleep_for(20ms);
    }
    return "could not connect";
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace tern

#include "mpi_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace tern::testing {
namespace {

std::unique_ptr<Communicator> g_world;

// Other ranks print only their failures, each line naming the rank.
class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }

 private:
  int rank_;
};

}  // namespace

Communicator& world() {
  return *g_world;
}

}  // namespace tern::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (tern::launched_ranks().size == 0) {
    std::fprintf(stderr, "run this test under mpirun (CTest does: see tests/backend/comm)\n");
    return 2;
  }
  auto comm = tern::make_mpi_communicator();
  if (!comm) {
    std::fprintf(stderr, "%s\n", comm.error().message.c_str());
    return 2;
  }
  tern::testing::g_world = std::move(*comm);
  if (tern::testing::g_world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new tern::testing::FailuresOnly(tern::testing::g_world->rank()));
  }
  const int failed = RUN_ALL_TESTS();
  // Any rank's failure fails every rank's exit status, so mpirun reports it.
  float any = failed != 0 ? 1.0f : 0.0f;
  if (!tern::testing::g_world->all_reduce_sum(&any, 1)) return 3;
  if (any != 0.0f && failed == 0 && tern::testing::g_world->rank() == 0) {
    std::fprintf(stderr, "a test failed on another rank (its lines start with 'rank N:')\n");
  }
  tern::testing::g_world.reset();
  return any != 0.0f ? 1 : 0;
}

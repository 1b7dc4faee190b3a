// The communicator of a process that runs the whole model: every collective over one rank is
// the identity (or a copy), so the TP code paths can run unchanged at size 1.
#include <cstring>

#include "backend/comm/communicator.h"

namespace tern {
namespace {

class SingleRank final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single rank"; }
  Result<void> all_reduce_sum(float*, size_t) override { return {}; }
  Result<void> all_gather(const float* in, size_t count, float* out) override {
    if (in != out) std::memmove(out, in, count * sizeof(float));
    return {};
  }
  Result<void> reduce_scatter_sum(const float* in, float* out, size_t count) override {
    if (in != out) std::memmove(out, in, count * sizeof(float));
    return {};
  }
  Result<void> send(const float*, size_t, int peer) override {
    return make_error("send to rank {}: a single-rank communicator has no peers", peer);
  }
  Result<void> recv(float*, size_t, int peer) override {
    return make_error("receive from rank {}: a single-rank communicator has no peers", peer);
  }
  Result<void> broadcast(void*, size_t, int root) override {
    if (root != 0) return make_error("broadcast from rank {} in a group of one", root);
    return {};
  }
  Result<void> barrier() override { return {}; }
  void abort(int) override {}
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() {
  return std::make_unique<SingleRank>();
}

}  // namespace tern

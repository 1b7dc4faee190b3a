// Tensor parallelism across processes: rank 0 does all the I/O (requests, tokenizing, sampling,
// KV block bookkeeping) and the other ranks follow. Before each forward pass rank 0 broadcasts
// the batch (tokens, cached lengths, block tables, which logits are wanted); every rank then
// runs the same forward on its share of the weights and of the KV heads, meeting in the
// collectives. Block ids are rank 0's, so the followers' caches (same block count) need no
// allocator of their own and the prefix cache keeps working.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "backend/comm/communicator.h"
#include "base/error.h"
#include "models/model.h"

namespace tern {

// Why rank 0's group can no longer run a forward (empty while it can): set once by the leader
// model when a forward fails on a communicator whose rank 0 survives that (TCP), read by the
// engine (requests then fail at once, HTTP 503) and /health.
class GroupStatus {
 public:
  std::string failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }
  void fail(std::string why) {
    std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = std::move(why);
  }

 private:
  mutable std::mutex mutex_;
  std::string failure_;
};

// Rank 0's model: announces every forward to the other ranks, then runs its own share. Its
// destructor tells them to stop. A forward that fails ends every rank (Communicator::abort),
// unless the communicator lets rank 0 survive (TCP): then the group is disbanded (the other
// ranks exit), `status` records why, and this forward and every later one return an error
// (code 503) saying so, with rank 0's process still up.
std::unique_ptr<Model> make_leader_model(std::unique_ptr<Model> share, Communicator& comm,
                                         std::shared_ptr<GroupStatus> status);

// A follower rank's loop: the forward passes rank 0 announces, on this rank's share, until rank
// 0 says stop (ok) or something fails (an error). A forward that fails on a follower ends its
// process (Communicator::abort; under MPI every rank's: the others would wait forever).
Result<void> follow_leader(Model& share, KvCache& cache, Communicator& comm);

// Error::code of an error another rank (rank 0) reports: a follower exits with it unprinted.
inline constexpr int kErrorReportedByRank0 = 70007;

// Every rank's `mine` becomes the group's outcome: ok when all ranks are ok; otherwise rank 0
// gets its own error or one naming the failed rank, a failed follower its own, and the other
// followers an error with code kErrorReportedByRank0. `what`: "load the model".
Result<void> agree(Communicator& comm, Result<void> mine, const char* what);

}  // namespace tern

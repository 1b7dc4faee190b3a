#include "engine/tp_ranks.h"

#include <cstdint>
#include <cstdio>
#include <vector>

namespace tern {
namespace {

// A step message: a header {kind, payload length} then the payload, all int64.
enum : int64_t { kStop = 0, kForward = 1 };

std::vector<int64_t> encode(std::span<const SequenceBatch> batch) {
  std::vector<int64_t> m;
  m.push_back(static_cast<int64_t>(batch.size()));
  for (const auto& s : batch) {
    m.push_back(static_cast<int64_t>(s.tokens.size()));
    m.push_back(s.kv->length);
    m.push_back(static_cast<int64_t>(s.kv->blocks.size()));
    m.push_back((s.logits_for_all ? 1 : 0) | (s.last_logits ? 2 : 0) |
                (s.tree_parents.empty() ? 0 : 4));
    m.insert(m.end(), s.tokens.begin(), s.tokens.end());
    m.insert(m.end(), s.kv->blocks.begin(), s.kv->blocks.end());
    m.insert(m.end(), s.tree_parents.begin(), s.tree_parents.end());  // as many as tokens
  }
  return m;
}

Result<void> send_header(Communicator& comm, int64_t kind, int64_t length) {
  int64_t header[2] = {kind, length};
  return comm.broadcast(header, sizeof(header), 0);
}

// A forward that failed on one rank leaves the others inside a collective it will not join:
// the whole group ends, with the reason on stderr (mpirun then reports the exit status).
void end_group(Communicator& comm, const Error& error) {
  fmt::print(stderr, "error: rank {}: {}; tensor-parallel ranks cannot continue, stopping all {}\n",
             comm.rank(), error.message, comm.size());
  std::fflush(stderr);
  comm.abort(1);
}

class LeaderModel final : public Model {
 public:
  LeaderModel(std::unique_ptr<Model> share, Communicator& comm, std::shared_ptr<GroupStatus> status)
      : share_(std::move(share)), comm_(comm), status_(std::move(status)) {}
  ~LeaderModel() override { (void)send_header(comm_, kStop, 0); }

  const ModelShape& shape() const override { return share_->shape(); }
  Device& device() const override { return share_->device(); }

  // Sends the batch to the other ranks and records this rank's share; every rank's collectives
  // meet when the plans execute.
  Result<Tensor> forward(std::span<SequenceBatch> batch, KvCache& cache, StepPlan& plan) override {
    if (std::string why = status_->failure(); !why.empty()) return Error{why, 503};
    std::vector<int64_t> message = encode(batch);
    Result<void> sent = send_header(comm_, kForward, static_cast<int64_t>(message.size()));
    if (sent) sent = comm_.broadcast(message.data(), message.size() * sizeof(int64_t), 0);
    if (!sent) return stop_group(sent.error());
    auto logits = share_->forward(batch, cache, plan);
    if (!logits) return stop_group(logits.error());
    return logits;
  }

  Result<void> execute(const StepPlan& plan) override {
    auto done = share_->execute(plan);
    if (!done) return stop_group(done.error());
    return done;
  }

 private:
  Error stop_group(const Error& error) {
    if (!comm_.leader_survives()) end_group(comm_, error);
    // TCP: the other ranks are told to go (they may wait in a collective this rank left); this
    // process stays up and says why it can no longer run the model.
    comm_.disband(error.message);
    status_->fail(fmt::format(
        "tensor parallelism over {} ranks stopped: {}; restart the ranks to run the model again",
        comm_.size(), error.message));
    fmt::print(stderr, "error: {}\n", status_->failure());
    std::fflush(stderr);
    return Error{status_->failure(), 503};
  }

  std::unique_ptr<Model> share_;
  Communicator& comm_;
  std::shared_ptr<GroupStatus> status_;
};

// Reads one sequence's entry at `at`; checks every count against what is left of the message.
Result<void> decode(const std::vector<int64_t>& m, std::vector<std::vector<int32_t>>& tokens,
                    std::vector<std::vector<int32_t>>& parents, std::vector<SequenceKv>& kvs,
                    std::vector<SequenceBatch>& batch) {
  size_t at = 0;
  auto next = [&]() -> Result<int64_t> {
    if (at >= m.size()) return Error{"rank 0's batch message is truncated"};
    return m[at++];
  };
  auto n = next();
  if (!n) return n.error();
  const auto sequences = static_cast<size_t>(*n);
  tokens.resize(sequences);
  parents.resize(sequences);
  kvs.resize(sequences);
  batch.resize(sequences);
  for (size_t i = 0; i < sequences; ++i) {
    int64_t f[4];
    for (auto& v : f) {
      auto x = next();
      if (!x) return x.error();
      v = *x;
    }
    if (f[0] < 0 || f[2] < 0 || static_cast<size_t>(f[0] + f[2]) > m.size() - at) {
      return Error{"rank 0's batch message is malformed"};
    }
    tokens[i].assign(m.begin() + static_cast<ptrdiff_t>(at),
                     m.begin() + static_cast<ptrdiff_t>(at + static_cast<size_t>(f[0])));
    at += static_cast<size_t>(f[0]);
    kvs[i].blocks.assign(m.begin() + static_cast<ptrdiff_t>(at),
                         m.begin() + static_cast<ptrdiff_t>(at + static_cast<size_t>(f[2])));
    at += static_cast<size_t>(f[2]);
    kvs[i].length = f[1];
    parents[i].clear();
    if ((f[3] & 4) != 0) {
      if (static_cast<size_t>(f[0]) > m.size() - at)
        return Error{"rank 0's batch message is malformed"};
      parents[i].assign(m.begin() + static_cast<ptrdiff_t>(at),
                        m.begin() + static_cast<ptrdiff_t>(at + static_cast<size_t>(f[0])));
      at += static_cast<size_t>(f[0]);
    }
    batch[i] = SequenceBatch{tokens[i], &kvs[i], (f[3] & 1) != 0, (f[3] & 2) != 0};
    batch[i].tree_parents = parents[i];
  }
  return {};
}

}  // namespace

std::unique_ptr<Model> make_leader_model(std::unique_ptr<Model> share, Communicator& comm,
                                         std::shared_ptr<GroupStatus> status) {
  if (!status) status = std::make_shared<GroupStatus>();
  return std::make_unique<LeaderModel>(std::move(share), comm, std::move(status));
}

Result<void> follow_leader(Model& share, KvCache& cache, Communicator& comm) {
  std::vector<int64_t> message;
  std::vector<std::vector<int32_t>> tokens, parents;
  std::vector<SequenceKv> kvs;
  std::vector<SequenceBatch> batch;
  StepPlan plan;
  for (;;) {
    int64_t header[2] = {0, 0};
    TERN_TRY(comm.broadcast(header, sizeof(header), 0));
    if (header[0] == kStop) return {};
    if (header[0] != kForward || header[1] < 1 || header[1] > (int64_t{1} << 28)) {
      return make_error("rank {}: unexpected message from rank 0 (kind {}, {} values)", comm.rank(),
                        header[0], header[1]);
    }
    message.resize(static_cast<size_t>(header[1]));
    TERN_TRY(comm.broadcast(message.data(), message.size() * sizeof(int64_t), 0));
    TERN_TRY(decode(message, tokens, parents, kvs, batch));
    for (const auto& kv : kvs) {
      for (int32_t b : kv.blocks) {
        if (b < 0 || b >= cache.config().blocks) {
          return make_error("rank {}: KV block {} is outside this rank's {} blocks", comm.rank(), b,
                            cache.config().blocks);
        }
      }
    }
    plan.clear();
    auto logits = share.forward(batch, cache, plan);
    auto done = logits ? share.execute(plan) : Result<void>(logits.error());
    if (!done) {
      end_group(comm, done.error());
      return done;
    }
  }
}

Result<void> agree(Communicator& comm, Result<void> mine, const char* what) {
  std::vector<float> failed(static_cast<size_t>(comm.size()), 0.0f);
  failed[static_cast<size_t>(comm.rank())] = mine.ok() ? 0.0f : 1.0f;
  TERN_TRY(comm.all_reduce_sum(failed.data(), failed.size()));
  if (!mine.ok()) {
    if (comm.rank() == 0) return mine;
    if (failed[0] != 0.0f) return Error{mine.error().message, kErrorReportedByRank0};
    return make_error("rank {}: {}", comm.rank(), mine.error().message);
  }
  for (size_t r = 0; r < failed.size(); ++r) {
    if (failed[r] == 0.0f) continue;
    if (comm.rank() == 0) {
      return make_error("rank {} could not {} (that rank prints why)", r, what);
    }
    return Error{fmt::format("rank {} could not {}", r, what), kErrorReportedByRank0};
  }
  return {};
}

}  // namespace tern

// The CPU communicator over Open MPI, so that the sharding logic runs with several ranks on one
// machine (CI) or across hosts. Each operation is posted non-blocking and waited on by polling:
// a short spin for the microsecond-scale collectives of a forward pass, then sleeps that grow
// to a millisecond, so that a rank idling between requests (or waiting on a slower peer on an
// oversubscribed machine) leaves the CPU to the ranks that compute.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "backend/comm/communicator.h"

namespace tern {
namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

// MPI_Init_thread once per process; MPI_Finalize at exit. Serialized: the engine's loop thread
// runs the forward passes, the main thread sends the final stop, never at the same time.
Result<void> init_mpi_once() {
  static std::once_flag once;
  static Result<void> status;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      status = make_error("MPI_Init_thread failed: {}", mpi_error_text(rc));
      return;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      status = Error{
          "this MPI library cannot be called from more than one thread "
          "(MPI_THREAD_SERIALIZED), which the engine's loop thread needs"};
    }
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  });
  return status;
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return fmt::format("Open MPI, {} ranks", size_); }

  Result<void> all_reduce_sum(float* data, size_t count) override {
    TERN_TRY(check_count(count, "all-reduce"));
    MPI_Request r;
    return finish(
        MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_, &r),
        r, "all-reduce");
  }
  Result<void> all_gather(const float* in, size_t count, float* out) override {
    TERN_TRY(check_count(count * static_cast<size_t>(size_), "all-gather"));
    MPI_Request r;
    return finish(MPI_Iallgather(in, static_cast<int>(count), MPI_FLOAT, out,
                                 static_cast<int>(count), MPI_FLOAT, comm_, &r),
                  r, "all-gather");
  }
  Result<void> reduce_scatter_sum(const float* in, float* out, size_t count) override {
    TERN_TRY(check_count(count * static_cast<size_t>(size_), "reduce-scatter"));
    MPI_Request r;
    return finish(
        MPI_Ireduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_, &r),
        r, "reduce-scatter");
  }
  Result<void> send(const float* data, size_t count, int peer) override {
    TERN_TRY(check_peer(peer, "send to"));
    TERN_TRY(check_count(count, "send"));
    MPI_Request r;
    return finish(MPI_Isend(data, static_cast<int>(count), MPI_FLOAT, peer, kTag, comm_, &r), r,
                  "send");
  }
  Result<void> recv(float* data, size_t count, int peer) override {
    TERN_TRY(check_peer(peer, "receive from"));
    TERN_TRY(check_count(count, "receive"));
    MPI_Request r;
    return finish(MPI_Irecv(data, static_cast<int>(count), MPI_FLOAT, peer, kTag, comm_, &r), r,
                  "receive");
  }
  Result<void> broadcast(void* data, size_t bytes, int root) override {
    TERN_TRY(check_peer(root, "broadcast from", true));
    TERN_TRY(check_count(bytes, "broadcast"));
    MPI_Request r;
    return finish(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &r), r,
                  "broadcast");
  }
  Result<void> barrier() override {
    MPI_Request r;
    return finish(MPI_Ibarrier(comm_, &r), r, "barrier");
  }
  void abort(int exit_code) override { MPI_Abort(comm_, exit_code); }

 private:
  static constexpr int kTag = 7;

  Result<void> check_count(size_t count, const char* what) const {
    if (count > static_cast<size_t>(INT_MAX)) {
      return make_error("{} of {} elements is larger than one MPI message ({})", what, count,
                        INT_MAX);
    }
    return {};
  }
  Result<void> check_peer(int peer, const char* what, bool self_ok = false) const {
    if (peer < 0 || peer >= size_ || (peer == rank_ && !self_ok)) {
      return make_error("{} rank {}: ranks are 0..{} and this is rank {}", what, peer, size_ - 1,
                        rank_);
    }
    return {};
  }

  // Waits for a posted request: spins ~200 us, then sleeps 20 us growing to 1 ms.
  Result<void> finish(int posted, MPI_Request& request, const char* what) const {
    if (posted != MPI_SUCCESS) {
      return make_error("MPI {} failed on rank {}: {}", what, rank_, mpi_error_text(posted));
    }
    const auto start = std::chrono::steady_clock::now();
    auto nap = std::chrono::microseconds(20);
    for (;;) {
      int done = 0;
      const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        return make_error("MPI {} failed on rank {}: {}", what, rank_, mpi_error_text(rc));
      }
      if (done) return {};
      if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) continue;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

bool mpi_available() {
  return true;
}

Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
  TERN_TRY(init_mpi_once());
  MPI_Comm comm;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return make_error("MPI_Comm_dup failed: {}", mpi_error_text(rc));
  // Errors come back as values (the default aborts the whole job).
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(comm));
}

}  // namespace tern

// The collectives that split one model over several processes ("ranks"): tensor parallelism
// sums the partial outputs of row-parallel matmuls (all_reduce_sum) and joins the vocabulary
// slices of the LM head (all_gather). Buffers are F32 in host memory; a GPU implementation
// (NCCL) takes device pointers behind the same interface. Every rank must make the same calls
// in the same order; a call that fails leaves the group unusable (the error says why).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "base/error.h"

namespace tern {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single rank", "Open MPI, 2 ranks", ...
  virtual std::string name() const = 0;

  // data[count] on every rank becomes the element-wise sum over all ranks.
  virtual Result<void> all_reduce_sum(float* data, size_t count) = 0;
  // out[size() * count] = rank 0's in[count], then rank 1's, ...
  virtual Result<void> all_gather(const float* in, size_t count, float* out) = 0;
  // out[count] on rank r = the sum over ranks of in[r * count, (r + 1) * count).
  virtual Result<void> reduce_scatter_sum(const float* in, float* out, size_t count) = 0;
  virtual Result<void> send(const float* data, size_t count, int peer) = 0;
  virtual Result<void> recv(float* data, size_t count, int peer) = 0;
  // data[bytes] on every rank becomes root's (control messages: the batch of the next step).
  // A rank waiting here for long sleeps rather than spins.
  virtual Result<void> broadcast(void* data, size_t bytes, int root) = 0;
  virtual Result<void> barrier() = 0;
  // Ends every rank's process with `exit_code`: after a failure between collectives the ranks
  // can no longer agree on what comes next (one would wait forever for the others). A group of
  // one has nothing to end and returns.
  virtual void abort(int exit_code) = 0;

  // Where this rank runs among the group's ranks on its host (its GPU when there are several,
  // its share of the CPU threads), where the communicator knows it (TCP: from the hostnames the
  // ranks gave at the rendezvous). 0 of 1 otherwise: ask the launcher (launched_ranks()).
  virtual int local_rank() const { return 0; }
  virtual int local_size() const { return 1; }

  // Whether rank 0 can carry on after the group fails (TCP: it disbands the group, whose other
  // ranks see their connection end and exit). False where the ranks must end together (MPI,
  // NCCL: abort()).
  virtual bool leader_survives() const { return false; }
  // Ends the group but not this process: the other ranks' waiting calls return an error naming
  // `reason`, and every later call here returns one. Only where leader_survives().
  virtual void disband(const std::string& reason) { (void)reason; }
};

// One process, no peers: collectives are copies, send/recv have no one to talk to.
std::unique_ptr<Communicator> make_single_rank_communicator();

// Whether this build has the Open MPI implementation.
bool mpi_available();
// The ranks mpirun started (MPI_COMM_WORLD, duplicated). Initialises MPI once per process and
// finalises it at exit. An error when the build has no MPI.
Result<std::unique_ptr<Communicator>> make_mpi_communicator();

// A rendezvous address, HOST:PORT ("10.0.0.1:29500", "[::1]:29500", "node0:29500").
struct RendezvousAddress {
  std::string host;
  int port = 0;
};
// `what` names the setting in the error ("--rendezvous", "TERN_RENDEZVOUS").
Result<RendezvousAddress> parse_rendezvous(const std::string& text,
                                           const std::string& what = "--rendezvous");

// Ranks started without mpirun (by hand, or by any launcher, on one host or several) forming a
// group over TCP: rank 0 listens on `rendezvous` (HOST:PORT, an address of rank 0's host that
// the others can reach) and waits for the other size - 1; every other rank connects to it,
// retrying until `timeout`. The ranks then connect to each other too (send/recv between any
// two). Collectives go through rank 0, which sums in rank order, so every rank gets the same
// bits. A rank that dies or closes its connection makes the others' calls return an error
// naming it; rank 0 survives that (leader_survives()). Usable as make_nccl_communicator's
// bootstrap.
Result<std::unique_ptr<Communicator>> make_tcp_communicator(const std::string& rendezvous, int rank,
                                                            int size,
                                                            std::chrono::milliseconds timeout);

// Whether this build has the NCCL implementation (CUDA builds that found NCCL).
bool nccl_available();
// NCCL over the ranks of `bootstrap` (which carries NCCL's unique id from rank 0 and must outlive
// it), on GPU `cuda_device`. Buffers are host memory, copied through the GPU for now. Keeps
// NVLink multicast off (NCCL_NVLS_ENABLE=0; another value is an error).
Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                             int cuda_device);

// The process count and this process's rank as the launcher (mpirun / Open MPI's PRRTE, or a
// PMI launcher) set them in the environment, without initialising MPI; size 0 when not
// launched that way.
struct LaunchedRanks {
  int size = 0;
  int rank = 0;
  int local_rank = 0;  // this rank among those on this host (its GPU, with several)
  int local_size = 1;  // ranks on this host (CPU threads are shared among them)
};
LaunchedRanks launched_ranks();

}  // namespace tern

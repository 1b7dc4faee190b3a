// The collectives that split one model over several processes ("ranks"): tensor parallelism
// sums the partial outputs of row-parallel matmuls (all_reduce_sum) and joins the vocabulary
// slices of the LM head (all_gather). Buffers are F32 in host memory; a GPU implementation
// (NCCL) takes device pointers behind the same interface. Every rank must make the same calls
// in the same order; a call that fails leaves the group unusable (the error says why).
#pragma once

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
};

// One process, no peers: collectives are copies, send/recv have no one to talk to.
std::unique_ptr<Communicator> make_single_rank_communicator();

// Whether this build has the Open MPI implementation.
bool mpi_available();
// The ranks mpirun started (MPI_COMM_WORLD, duplicated). Initialises MPI once per process and
// finalises it at exit. An error when the build has no MPI.
Result<std::unique_ptr<Communicator>> make_mpi_communicator();

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

// The GPU communicator over NCCL, for tensor parallelism across the GPUs of a host (and, with
// NCCL's socket transport, across hosts). NCCL's unique id travels from rank 0 over a bootstrap
// communicator (Open MPI under mpirun). This first version keeps the Communicator contract of
// host buffers: each call copies through a device buffer on the communicator's own stream and
// waits for it. Passing the device's activation pointers straight to NCCL on the device's stream
// (no copies, no host round trip) is the next step; it needs the Device to expose its stream.
// Compiled in CUDA builds that find NCCL; not yet run on several GPUs.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "backend/comm/communicator.h"

namespace tern {
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, Communicator& bootstrap, int device)
      : comm_(comm), stream_(stream), bootstrap_(bootstrap), device_(device) {}
  ~NcclCommunicator() override {
    if (buffer_ != nullptr) cudaFree(buffer_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  std::string name() const override {
    return fmt::format("NCCL {}.{}, {} ranks (GPU {})", NCCL_MAJOR, NCCL_MINOR, size(), device_);
  }

  Result<void> all_reduce_sum(float* data, size_t count) override {
    TERN_TRY(reserve(count * sizeof(float)));
    TERN_TRY(to_device(data, count * sizeof(float), 0));
    TERN_TRY(nccl(ncclAllReduce(buffer_, buffer_, count, ncclFloat, ncclSum, comm_, stream_),
                  "all-reduce"));
    return to_host(data, count * sizeof(float), 0);
  }
  Result<void> all_gather(const float* in, size_t count, float* out) override {
    const size_t bytes = count * sizeof(float), all = bytes * static_cast<size_t>(size());
    TERN_TRY(reserve(all));
    auto* base = static_cast<char*>(buffer_);
    const size_t mine = bytes * static_cast<size_t>(rank());
    TERN_TRY(to_device(in, bytes, mine));
    TERN_TRY(
        nccl(ncclAllGather(base + mine, base, count, ncclFloat, comm_, stream_), "all-gather"));
    return to_host(out, all, 0);
  }
  Result<void> reduce_scatter_sum(const float* in, float* out, size_t count) override {
    const size_t bytes = count * sizeof(float), all = bytes * static_cast<size_t>(size());
    TERN_TRY(reserve(all + bytes));
    auto* base = static_cast<char*>(buffer_);
    TERN_TRY(to_device(in, all, 0));
    TERN_TRY(nccl(ncclReduceScatter(base, base + all, count, ncclFloat, ncclSum, comm_, stream_),
                  "reduce-scatter"));
    return to_host(out, bytes, all);
  }
  Result<void> send(const float* data, size_t count, int peer) override {
    TERN_TRY(check_peer(peer, false));
    TERN_TRY(reserve(count * sizeof(float)));
    TERN_TRY(to_device(data, count * sizeof(float), 0));
    TERN_TRY(nccl(ncclSend(buffer_, count, ncclFloat, peer, comm_, stream_), "send"));
    return sync("send");
  }
  Result<void> recv(float* data, size_t count, int peer) override {
    TERN_TRY(check_peer(peer, false));
    TERN_TRY(reserve(count * sizeof(float)));
    TERN_TRY(nccl(ncclRecv(buffer_, count, ncclFloat, peer, comm_, stream_), "receive"));
    return to_host(data, count * sizeof(float), 0);
  }
  Result<void> broadcast(void* data, size_t bytes, int root) override {
    // Control messages: the bootstrap's polling wait suits a rank idling between requests.
    return bootstrap_.broadcast(data, bytes, root);
  }
  Result<void> barrier() override {
    float one = 0;
    return all_reduce_sum(&one, 1);
  }
  void abort(int exit_code) override {
    ncclCommAbort(comm_);
    bootstrap_.abort(exit_code);
  }

 private:
  Result<void> check_peer(int peer, bool self_ok) const {
    if (peer < 0 || peer >= size() || (peer == rank() && !self_ok)) {
      return make_error("rank {}: ranks are 0..{} and this is rank {}", peer, size() - 1, rank());
    }
    return {};
  }
  Result<void> cuda(cudaError_t e, const char* what) const {
    if (e == cudaSuccess) return {};
    return make_error("NCCL communicator, rank {}: {}: {}", rank(), what, cudaGetErrorString(e));
  }
  Result<void> nccl(ncclResult_t r, const char* what) const {
    if (r == ncclSuccess) return {};
    return make_error("NCCL {} failed on rank {}: {} ({})", what, rank(), ncclGetErrorString(r),
                      ncclGetLastError(comm_));
  }
  Result<void> reserve(size_t bytes) {
    if (bytes <= capacity_) return {};
    if (buffer_ != nullptr) cudaFree(buffer_);
    buffer_ = nullptr;
    capacity_ = 0;
    TERN_TRY(cuda(cudaMalloc(&buffer_, bytes), "cudaMalloc"));
    capacity_ = bytes;
    return {};
  }
  Result<void> to_device(const void* host, size_t bytes, size_t offset) {
    return cuda(cudaMemcpyAsync(static_cast<char*>(buffer_) + offset, host, bytes,
                                cudaMemcpyHostToDevice, stream_),
                "copy to the GPU");
  }
  Result<void> to_host(void* host, size_t bytes, size_t offset) {
    TERN_TRY(cuda(cudaMemcpyAsync(host, static_cast<char*>(buffer_) + offset, bytes,
                                  cudaMemcpyDeviceToHost, stream_),
                  "copy from the GPU"));
    return sync("copy from the GPU");
  }
  Result<void> sync(const char* what) { return cuda(cudaStreamSynchronize(stream_), what); }

  ncclComm_t comm_;
  cudaStream_t stream_;
  Communicator& bootstrap_;
  int device_;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

bool nccl_available() {
  return true;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                             int cuda_device) {
  // NVLink multicast (NVLS) stays off on these machines, also for the NCCL Tern starts itself;
  // an explicit setting in the environment is kept.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  if (const char* v = std::getenv("NCCL_NVLS_ENABLE"); v != nullptr && std::strcmp(v, "0") != 0) {
    return make_error("NCCL_NVLS_ENABLE={}: NVLink multicast must stay off (set it to 0)", v);
  }
  if (cudaError_t e = cudaSetDevice(cuda_device); e != cudaSuccess) {
    return make_error("rank {}: GPU {}: {}", bootstrap.rank(), cuda_device, cudaGetErrorString(e));
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return make_error("ncclGetUniqueId: {}", ncclGetErrorString(r));
    }
  }
  TERN_TRY(bootstrap.broadcast(&id, sizeof(id), 0));
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return make_error("rank {}: cudaStreamCreate: {}", bootstrap.rank(), cudaGetErrorString(e));
  }
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank());
      r != ncclSuccess) {
    cudaStreamDestroy(stream);
    return make_error("rank {}: ncclCommInitRank over {} ranks: {}", bootstrap.rank(),
                      bootstrap.size(), ncclGetErrorString(r));
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(comm, stream, bootstrap, cuda_device));
}

}  // namespace tern

// The CUDA implementation of Device: weights, activations and the KV cache live in GPU memory,
// every op is enqueued on one CUDA stream, and the host waits only in download(). Scratch memory
// comes from a caching allocator; the small host arrays ops take (ids, positions, slots, block
// tables) go up through a pinned staging ring, and an array equal to one staged recently (the
// positions every layer passes again) is not sent twice.
//
// Plans and CUDA graphs: execute() runs a step plan's ops in order, each queuing its launches
// with a signature (kernel, pointers, sizes, parameters), and ends the plan's graph: a plan
// whose signatures equal an earlier one's replays that plan's executable graph, after one copy
// of its staged host arrays (ids, positions, slots, block tables) into the same device buffer;
// any other plan is captured into a new graph. Launch and capture costs are paid once per shape.
// An op that needs the host in the middle (the experts' routing) ends the graph there. The fused
// ops the model asks for run as fused kernels; a kernel may look at the plan's next op (the norm
// or attention whose output feeds a product writes its 8-bit copy), and no queued launch is
// ever rewritten.
//
// Errors: matmul and get_rows return them; an op without a Result records the first error, and
// every later op returns (or keeps) it, so a forward pass fails at its next matmul.
// This header needs no CUDA headers: the CPU-only parts of Tern can include it.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/device/device.h"

struct CUstream_st;
struct cublasContext;
struct CUgraphExec_st;
struct CUevent_st;

namespace tern {
namespace cuda {
class CachingAllocator;
class StagingRing;
struct AttentionLaunch;
}  // namespace cuda

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  uint64_t free_bytes = 0, total_bytes = 0;
  int driver_version = 0, runtime_version = 0;
};

// How many CUDA GPUs the driver sees (0 when none or no driver), and one GPU's properties.
int cuda_device_count();
Result<CudaDeviceInfo> cuda_device_info(int ordinal);

// Device-to-device copy bandwidth of GPU `ordinal` measured now (bytes read + written per second,
// in GB/s): `bytes` copied once to warm up, then five times between events. The roofline every
// kernel file quotes is against this figure.
Result<double> measure_copy_bandwidth(int ordinal, size_t bytes = size_t{1} << 30);

class CudaDevice final : public Device {
 public:
  // A device on GPU `ordinal`: "no CUDA GPU found" when there is none.
  static Result<std::unique_ptr<CudaDevice>> create(int ordinal = 0);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string name() const override;

  Result<DeviceBuffer> allocate(size_t bytes) override;
  void free(void* data, size_t bytes) override;
  void upload(const void* host, void* device_data, size_t bytes) override;
  void download(const void* device_data, void* host, size_t bytes) override;
  void copy(const void* src, void* dst, size_t bytes) override;
  bool reads_host_memory() const override { return false; }
  std::string stats() const override;

  Result<void> matmul(const Tensor& w, const Tensor& x, Tensor& y) override;
  Result<void> get_rows(const Tensor& table, std::span<const int32_t> ids, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void add_row_vector(Tensor& x, const Tensor& v) override;
  void scale(Tensor& x, float factor) override;
  void argmax_rows(const Tensor& x, int32_t* ids) override;
  void sample_rows(const Tensor& x, std::span<const SampleDraw> draws, int32_t* ids) override;
  void add_weighted_rows(const Tensor& src, std::span<const int32_t> rows,
                         std::span<const float> weights, Tensor& dst) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& params) override;
  void store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                std::span<const int32_t> slots) override;
  void attention(const Tensor& q, const KvLayer& cache,
                 std::span<const AttentionSequence> sequences, const AttentionParams& params,
                 Tensor& out) override;

  Result<void> execute(const StepPlan& plan) override;
  Result<void> add_rms_norm(const op::AddRmsNorm& o) override;
  Result<void> matmuls(const op::MatmulsSharedInput& o) override;
  Result<void> gate_up_activation(const op::GateUpActivation& o) override;
  Result<void> qk_norm_rope_store_kv(const op::QkNormRopeStoreKv& o) override;

  // Waits for the queued work; the first error any op met, if one did.
  Result<void> synchronize();
  const CudaDeviceInfo& info() const { return info_; }
  // Matmul kernel choice for timing and tests: decode products of quantized weights with 8-bit
  // activations and integer dots (default), or with F32 activations.
  void set_int8_gemv(bool on) { int8_gemv_ = on; }
  // Prefill (n > 8) products of quantized weights: the int8 tensor-core GEMM with the decode
  // path's 8-bit activations (the CPU backend's arithmetic), or dequantize to BF16 + cuBLAS.
  // Default: TERN_CUDA_MMQ=1 in the environment picks the int8 GEMM (off until measured).
  void set_int8_prefill(bool on) { int8_prefill_ = on; }
  // Step capture into CUDA graphs (default on; TERN_CUDA_GRAPHS=0 in the environment turns it
  // off). Turning it off ends an open capture first.
  void set_graphs(bool on);
  // 8-bit copies of a product's input written by the op that produced it (a norm, decode
  // attention's combine step) instead of a quantize launch of their own.
  uint64_t producer_quantizations() const { return producer_quantizations_; }
  uint64_t graph_launches() const { return graph_launches_; }
  uint64_t graph_instantiations() const { return graph_instantiations_; }
  uint64_t device_allocations() const;
  // The stream every op is enqueued on (a cudaStream_t), for timing with events.
  CUstream_st* stream() const { return stream_; }

 private:
  CudaDevice() = default;
  bool failed() const { return failed_; }
  // Queues (graphs on) or runs (off) one op's launches. Any op but matmul forgets the cached
  // 8-bit activations, unless it writes them itself (keeps_q8).
  using Launch = std::function<Result<void>()>;
  void enqueue(std::initializer_list<uint64_t> signature, Launch launch, bool keeps_q8 = false);
  void enqueue(std::span<const uint64_t> signature, Launch launch, bool keeps_q8 = false);
  // Where the op being executed should also write the 8-bit copy of its output `x` [rows, k]:
  // when the plan's next op is a product reading x with 8-bit activations (and `fits` says the
  // producing kernel can write that group), the buffer and its group; else xq null.
  struct Q8Target {
    void* xq = nullptr;
    int group = 0;
  };
  Q8Target q8_for_next_product(const float* x, int64_t rows, int64_t k,
                               const std::function<bool(int group)>& fits);
  // One token's products of x by the weights, in one launch of 8-bit products or of float
  // products, when the weights allow it; false: the caller runs them apart.
  bool token_products(const Tensor& x, std::span<const Tensor> weights, std::span<float* const> ys);
  // Runs the queued step: replays a recorded graph or captures a new one.
  Result<void> flush();
  void fail(Error error);
  bool check(int status, const char* what);  // cudaError_t; false (and recorded) on failure
  // Scratch device memory returned to the allocator when the holder goes out of scope.
  struct Temp {
    CudaDevice* device = nullptr;
    void* data = nullptr;
    size_t bytes = 0;
    Temp() = default;
    Temp(CudaDevice* d, void* p, size_t b) : device(d), data(p), bytes(b) {}
    Temp(Temp&& o) noexcept;
    Temp& operator=(Temp&& o) noexcept;
    ~Temp();
  };
  Result<Temp> temp(size_t bytes);
  // A device copy of `values`, shared with earlier calls that staged the same values.
  Result<const int32_t*> stage(std::span<const int32_t> values);
  Result<const float*> inverse_frequencies(const RopeParams& params);
  Result<void> gemm(const Tensor& w, const Tensor& x, Tensor& y);

  CudaDeviceInfo info_;
  CUstream_st* stream_ = nullptr;
  cublasContext* cublas_ = nullptr;
  std::unique_ptr<cuda::CachingAllocator> alloc_;
  std::unique_ptr<cuda::StagingRing> staging_;
  void* cublas_workspace_ = nullptr;
  struct Staged {
    std::vector<int32_t> values;
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Staged> staged_;  // most recent last
  struct Frequencies {
    // What they were computed from (checked first: recomputing 64 powers for each of a step's
    // 72 rope calls cost the host ~0.1 ms a token).
    float theta = 0;
    int64_t rotary_dim = 0;
    std::vector<float> factors;
    std::vector<float> values;
    void* data = nullptr;
  };
  std::vector<Frequencies> frequencies_;
  Result<const void*> quantized_activations(const Tensor& x, int group);
  bool q8_cached(const Tensor& x, int group) const;
  struct Exec {
    std::vector<uint64_t> signature;
    CUgraphExec_st* exec = nullptr;
  };
  std::vector<Exec> execs_;  // most recently used last
  std::vector<Launch> queued_;
  // The plan being executed and the op at hand (for q8_for_next_product).
  const StepPlan* plan_ = nullptr;
  size_t plan_index_ = 0;
  // The caches (k data) store_kv wrote in the queued step: decode attention may read the keys
  // of earlier steps before its PDL wait only where one store (its own pass's) came before.
  std::vector<const void*> step_kv_stores_;
  uint64_t producer_quantizations_ = 0;
  std::vector<uint64_t> signature_;
  std::vector<unsigned char> step_host_;                // this step's staged arrays
  std::vector<std::pair<size_t, size_t>> step_arrays_;  // their offsets and sizes
  void* step_device_ = nullptr;                         // where they are copied, fixed
  bool graphs_ = true;
  uint64_t graph_launches_ = 0, graph_instantiations_ = 0;
  // TERN_CUDA_TIMING=1: per step (graphs on), where the wall time between two downloads goes:
  // host time before the step's flush (the model queuing its ops, the caller sampling), the
  // flush itself (signature match, staged upload, graph launch), the graph's GPU time and the
  // download's, from events. stats() prints the medians over the most common step shape.
  struct StepTiming {
    size_t ops = 0;
    double queue_us = 0, flush_us = 0, gpu_us = 0, download_us = 0, wall_us = 0;
  };
  bool timing_ = false;
  CUevent_st* timing_events_[3] = {nullptr, nullptr, nullptr};
  bool timing_pending_ = false;  // events 0 and 1 recorded around the last graph launch
  StepTiming step_timing_;
  double last_download_end_ = 0;  // host clock, us
  std::vector<StepTiming> timings_;
  bool int8_gemv_ = true;
  bool int8_prefill_ = false;
  // The 8-bit activations of the last product's input, reused by the next products of the same
  // input until any other op runs or a product writes over that input.
  Temp q8_;
  Temp sample_workspace_;  // sample_rows: the sorted row and CUB's scratch
  // Pinned host memory that downloads of up to kPinnedDownload bytes (a step's logits) land in
  // before the copy to the caller's memory: a pageable destination made the driver stage the
  // copy itself, ~110-130 us for 600 KB of logits (2026-12-04).
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  const float* q8_x_ = nullptr;
  int64_t q8_n_ = 0, q8_k_ = 0;
  int q8_group_ = 32;
  bool q8_valid_ = false;
  bool failed_ = false;
  Error error_;
};

}  // namespace tern

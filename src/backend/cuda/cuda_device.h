// The CUDA implementation of Device: weights, activations and the KV cache live in GPU memory,
// every op is enqueued on one CUDA stream, and the host waits only in download(). Scratch memory
// comes from a caching allocator; the small host arrays ops take (ids, positions, slots, block
// tables) go up through a pinned staging ring, and an array equal to one staged recently (the
// positions every layer passes again) is not sent twice.
//
// CUDA graphs: the ops between two host synchronisations (download, synchronize) - a whole
// forward pass, since lm_head gathers its rows with copy() - form a step. Each op is queued with
// a signature (kernel, pointers, sizes, parameters); at the step's end, a step whose signatures
// equal an earlier one's replays that step's executable graph, after one copy of this step's
// staged host arrays (ids, positions, slots, block tables) into the same device buffer; any
// other step is captured into a new graph. Launch and capture costs are paid once per shape.
//
// Errors: matmul and get_rows return them; an op without a Result records the first error, and
// every later op returns (or keeps) it, so a forward pass fails at its next matmul.
// This header needs no CUDA headers: the CPU-only parts of Tern can include it.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
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
  // The models draw temperature samples with sample.cu unless TERN_CUDA_SAMPLE=0 (sample_rows
  // itself always runs it: cuda_device_test checks it against pick_token).
  bool samples_rows() const override { return sample_kernel_; }
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
  // Fusion of queued decode ops (needs graphs; default on, TERN_CUDA_FUSE=0 turns it off).
  void set_fusion(bool on) { fuse_ = on; }
  // The gate/up launch writing the 8-bit copy of its output for the down product, and decode
  // attention's for the o projection (no quantize launches of their own; kernels.h, Q8Output).
  // Default: off (slower, cuda_device.cpp); TERN_CUDA_Q8_OUTPUT=1 in the environment turns both on,
  // TERN_CUDA_Q8_OUTPUT=attention the attention's alone.
  void set_output_quantize(bool on) { output_quantize_ = attention_output_quantize_ = on; }
  uint64_t fused_ops() const { return fused_ops_; }
  // Decode attention launches that took a q/k norm + RoPE launch over (fold_rope_into_attention).
  uint64_t rope_folds() const { return rope_folds_; }
  uint64_t graph_launches() const { return graph_launches_; }
  uint64_t graph_instantiations() const { return graph_instantiations_; }
  uint64_t device_allocations() const;
  // The stream every op is enqueued on (a cudaStream_t), for timing with events.
  CUstream_st* stream() const { return stream_; }

 private:
  CudaDevice() = default;
  bool failed() const { return failed_; }
  // Queues (graphs on) or runs (off) one op's launches. Any op but matmul forgets the cached
  // 8-bit activations.
  using Launch = std::function<Result<void>()>;
  // What the fusion peepholes need to know of a queued op (graphs on; TERN_CUDA_FUSE=1 turns
  // fusion on). kAdd: out = a + b, n elements. kNorm: out [rows, cols] = the rms_norm of a (or
  // of sum = a + b, when b is set, the residual add fused in), with its 8-bit copy at xq when
  // set. kGemv: one token's (n = 1) products of mats[0..count) with the 8-bit x at xq, which
  // the op quantizes from x first when `quantize`.
  struct OpInfo;
  void enqueue(std::initializer_list<uint64_t> signature, Launch launch, bool keeps_q8 = false);
  void enqueue(std::initializer_list<uint64_t> signature, Launch launch, const OpInfo& info,
               bool keeps_q8 = false);
  // Replaces queued op `index` by a fused launch doing its work and the current op's (whose
  // signature is appended, so equal signatures still mean equal launches).
  void fuse_into(size_t index, std::initializer_list<uint64_t> signature, Launch launch,
                 const OpInfo& info);
  // The queued op `back` places from the end, when fusion is on and it exists.
  OpInfo* queued_info(size_t back = 0);
  Launch norm_launch(const OpInfo& info);
  Launch norm_rope_launch(const OpInfo& info);
  bool fuse_rope(float* xd, int64_t head_dim, int64_t heads, int64_t n, const int32_t* pd,
                 const float* fd, int64_t rd, bool neox, float ps,
                 std::initializer_list<uint64_t> sig);
  // Removes the last queued op, whose work a fusion into an earlier one takes over (its signature
  // stays: the fusion that follows is decided by the same signatures).
  void drop_last_queued();
  Launch gemv_launch(const OpInfo& info);
  bool fuse_glu(const float* g, const float* up, float* out, int64_t n, bool gelu,
                std::initializer_list<uint64_t> signature);
  bool quantize_in_norm(const float* xd, void* xqd, int64_t rows, int64_t k, int group);
  Launch glu_launch(const OpInfo& info);
  bool quantize_in_glu(const float* xd, void* xqd, int64_t k, int group);
  Launch attention_launch(const cuda::AttentionLaunch& a);
  bool quantize_in_attention(const float* xd, void* xqd, int64_t k, int group);
  bool fold_rope_into_attention(cuda::AttentionLaunch& a);
  void token_gemv(const Tensor& w, const float* xd, void* xqd, bool fresh, int64_t k, int group,
                  float* yd);
  void float_token_gemv(const Tensor& w, const float* xd, float* yd);
  Launch float_gemv_launch(const OpInfo& info);
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
  std::vector<OpInfo> infos_;  // one per queued op
  // The caches (k data) store_kv wrote in the queued step: decode attention may read the keys
  // of earlier steps before its PDL wait only where one store (its own pass's) came before.
  std::vector<const void*> step_kv_stores_;
  bool fuse_ = false;
  uint64_t fused_ops_ = 0, rope_folds_ = 0;
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
  bool sample_kernel_ = true;
  bool output_quantize_ = false;            // the gate/up launch's (two 8-bit buffers in turn)
  bool attention_output_quantize_ = false;  // decode attention's combine step's
  uint32_t* q8_counters_ = nullptr;         // cuda::kQ8OutputGroups words, zero between launches
  // The 8-bit activations of the last matmul, reused by the next matmuls of the same input (q, k
  // and v; gate and up) until any other op runs or a matmul writes over that input.
  Temp q8_[2];  // taken in turn (quantized_activations)
  int q8_current_ = 0;
  Temp sample_workspace_;  // sample_rows: the sorted row and CUB's scratch
  // q and k as the q/k/v product writes them when decode attention takes the norm + RoPE over
  // (fold_rope_into_attention); one buffer for every layer, grown when a shape needs more. A
  // buffer grown out of is kept until the step that may still use it is launched.
  Temp fold_scratch_;
  std::vector<Temp> retired_temps_;
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

// The CPU implementation of Device: weights are used in place from the mmap'd file (or packed into
// interleaved rows for the AVX-512 kernels), activations
// live in host memory, and every op splits its rows over the thread pool.
#pragma once

#include "backend/device/device.h"
#include "base/thread_pool.h"

namespace tern {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(size_t threads = 0);
  std::string name() const override;

  Result<DeviceBuffer> allocate(size_t bytes) override;
  void free(void* data, size_t bytes) override;
  void upload(const void* host, void* device_data, size_t bytes) override;
  void download(const void* device_data, void* host, size_t bytes) override;
  void copy(const void* src, void* dst, size_t bytes) override;
  bool reads_host_memory() const override { return true; }

  // Q8_0/Q5_0/Q4_K/Q6_K weights with rows % 16 == 0 are packed (backend/cpu/packed.h) on AVX-512
  // VNNI CPUs, unless TERN_PACKED_WEIGHTS=0.
  Result<Tensor> prepare_matmul_weight(const Tensor& w, std::vector<DeviceBuffer>& owned) override;
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

  ThreadPool& pool() { return pool_; }

 private:
  ThreadPool pool_;
};

}  // namespace tern

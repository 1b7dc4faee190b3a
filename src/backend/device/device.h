// The interface every backend implements (CPU, CUDA). A backend executes step plans
// (ops/step_plan.h: the step contract); models record plans through ops/ and never call a
// device or branch on one. Activations are F32, row-major, contiguous; weights keep their GGUF
// type. Memory is owned by a DeviceBuffer or by the model file.
//
// execute() visits the plan's ops in order and calls the kernel methods below. The fused ops'
// methods default to their unfused composition (device.cpp: the reference every fused kernel is
// tested against); a backend overrides the ones it has a kernel for. The kernel methods are
// public for the op tests (tests/backend), which check every backend against the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/device/sample_pick.h"
#include "base/error.h"
#include "base/tensor_type.h"
#include "ops/step_plan.h"

namespace tern {

class Device;

// Device memory with an owner: freed by the device that allocated it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* device, void* data, size_t bytes)
      : device_(device), data_(data), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void release();
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;

  virtual Result<DeviceBuffer> allocate(size_t bytes) = 0;
  virtual void free(void* data, size_t bytes) = 0;
  // In order with the executed plans: an upload comes after the ops before it, a download waits
  // for them.
  virtual void upload(const void* host, void* device_data, size_t bytes) = 0;
  virtual void download(const void* device_data, void* host, size_t bytes) = 0;
  // Counters worth a line in a benchmark report (CUDA: graphs launched and captured, device
  // allocations); empty when the device keeps none.
  virtual std::string stats() const { return {}; }
  // Whether weights in host memory (the mmap'd file) can be used in place.
  virtual bool reads_host_memory() const = 0;

  // A weight used as matmul's W (get_rows must still read it), possibly rearranged into a faster
  // layout (buffers it allocates go to `owned`). The default uses it as it is.
  virtual Result<Tensor> prepare_matmul_weight(const Tensor& w, std::vector<DeviceBuffer>& owned) {
    (void)owned;
    return w;
  }

  // Runs the plan's ops in order (a failed plan is not run: its recording error comes back).
  virtual Result<void> execute(const StepPlan& plan);

  // Kernels (op arguments as in ops/step_plan.h).
  virtual Result<void> matmul(const Tensor& w, const Tensor& x, Tensor& y) = 0;
  virtual Result<void> get_rows(const Tensor& table, std::span<const int32_t> ids, Tensor& out) = 0;
  virtual void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void add_row_vector(Tensor& x, const Tensor& v) = 0;
  virtual void scale(Tensor& x, float factor) = 0;
  virtual void copy(const void* src, void* dst, size_t bytes) = 0;
  // dst row rows[i] += weights[i] * src row i, for each row i of src (the rows distinct): how a
  // mixture-of-experts layer adds one expert's outputs into its tokens' rows.
  virtual void add_weighted_rows(const Tensor& src, std::span<const int32_t> rows,
                                 std::span<const float> weights, Tensor& dst) = 0;
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& params) = 0;
  virtual void store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                        std::span<const int32_t> slots) = 0;
  virtual void argmax_rows(const Tensor& x, int32_t* ids) = 0;
  // pick_token's arithmetic (sample_pick.h), where the logits are.
  virtual void sample_rows(const Tensor& x, std::span<const SampleDraw> draws, int32_t* ids) = 0;
  virtual void attention(const Tensor& q, const KvLayer& cache,
                         std::span<const AttentionSequence> sequences,
                         const AttentionParams& params, Tensor& out) = 0;

  // Fused ops and the ops that cross the host; the defaults compose the kernels above.
  virtual Result<void> add_rms_norm(const op::AddRmsNorm& o);
  virtual Result<void> matmuls(const op::MatmulsSharedInput& o);
  virtual Result<void> gate_up_activation(const op::GateUpActivation& o);
  virtual Result<void> qk_norm_rope_store_kv(const op::QkNormRopeStoreKv& o);
  virtual Result<void> moe_experts(const op::MoeExperts& o);
  virtual Result<void> all_reduce_sum(const op::AllReduceSum& o);
  virtual Result<void> gather_vocab(const op::GatherVocab& o);
  // Logit processors: the defaults bring the row to the host and back (where the device does
  // not read host memory).
  virtual Result<void> add_to_logits(const op::AddToLogits& o);
  virtual Result<void> repetition_penalty(const op::RepetitionPenalty& o);
  virtual Result<void> mask_logits(const op::MaskLogits& o);
  virtual Result<void> copy_kv_blocks(const op::CopyKvBlocks& o);
  virtual Result<void> move_kv_slots(const op::MoveKvSlots& o);

 protected:
  // Runs ops()[index] (execute's loop body, for backends that look at the ops around it).
  Result<void> run(const StepPlan& plan, size_t index);
};

}  // namespace tern

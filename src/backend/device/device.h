// The op interface every backend implements (CPU now, CUDA next). Models call these through
// ops/ and never branch on the device. Activations are F32, row-major, contiguous; weights keep
// their GGUF type. A Tensor is a view; memory is owned by a DeviceBuffer or by the model file.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/device/sample_pick.h"
#include "base/error.h"
#include "base/tensor_type.h"

namespace tern {

// How a weight matrix's blocks are laid out: GGUF row-major, or rearranged by the device for its
// kernels (CPU: groups of 16 interleaved rows, backend/cpu/packed.h). Only the device that made
// a non-Rows layout reads it.
enum class WeightLayout : uint8_t { Rows, DevicePacked };

struct Tensor {
  void* data = nullptr;
  TensorType type = TensorType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is contiguous (row length), as in GGUF
  WeightLayout layout = WeightLayout::Rows;

  int64_t elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  float* f32() const { return static_cast<float*>(data); }
  // The same memory seen as [rows, cols] with rows * cols == elements (F32 only).
  Tensor as_matrix(int64_t rows, int64_t cols) const;
  // Rows [begin, begin + count) of a [rows, ne0] F32 view.
  Tensor row_slice(int64_t begin, int64_t count) const;
};

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

// Rotary position embedding of the first `rotary_dim` values of each head.
struct RopeParams {
  int64_t rotary_dim = 0;
  float theta = 10000.0f;
  bool neox = false;            // pairs (i, i + rotary_dim/2) instead of (2i, 2i + 1)
  float position_scale = 1.0f;  // linear scaling: positions are multiplied by this
  std::vector<float> inverse_frequency_factors;  // per pair (rotary_dim/2): divides the frequency
};

// One attention layer's paged KV storage: [blocks, block_size, kv_heads, head_dim] for K and V.
struct KvLayer {
  Tensor k;
  Tensor v;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// Which new tokens belong to which sequence, and where that sequence's cached tokens live.
struct AttentionSequence {
  int64_t first_token = 0;     // row of the batch where this sequence's new tokens start
  int64_t token_count = 0;     // new tokens of this sequence in the batch
  int64_t first_position = 0;  // position of the first new token (= tokens already cached)
  std::span<const int32_t>
      block_table;  // pool block ids covering positions [0, first_position + token_count)
  // A token tree (speculative decoding's verify pass; empty: causal). One mask per new token, at
  // most kMaxTreeTokens of them: new token i attends to every cached position (< first_position)
  // and to new token j when bit j of ancestors[i] is set (its ancestors and itself). The new
  // tokens' keys sit in cache slots first_position + j in token order; a sliding window counts
  // slots.
  std::span<const uint64_t> ancestors;
};
inline constexpr int64_t kMaxTreeTokens = 64;

struct AttentionParams {
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: attend to every earlier position
  float softcap = 0.0f;        // 0: no soft-capping of scores
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;

  virtual Result<DeviceBuffer> allocate(size_t bytes) = 0;
  virtual void free(void* data, size_t bytes) = 0;
  virtual void upload(const void* host, void* device_data, size_t bytes) = 0;
  virtual void download(const void* device_data, void* host, size_t bytes) = 0;
  // Copies bytes between two places in this device's memory, in order with the ops.
  virtual void copy(const void* src, void* dst, size_t bytes) = 0;
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

  // y[n, m] = x[n, k] . W^T for W [m rows, k cols] of any supported type.
  virtual Result<void> matmul(const Tensor& w, const Tensor& x, Tensor& y) = 0;
  // out[i] = the dequantized row ids[i] of table.
  virtual Result<void> get_rows(const Tensor& table, std::span<const int32_t> ids, Tensor& out) = 0;
  // Each row of x normalised by its RMS, times weight (F32 [ne0]) when given.
  virtual void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // Adds the F32 vector v [ne0] to every row of x.
  virtual void add_row_vector(Tensor& x, const Tensor& v) = 0;
  virtual void scale(Tensor& x, float factor) = 0;
  // dst row rows[i] += weights[i] * src row i, for each row i of src (the rows distinct): how a
  // mixture-of-experts layer adds one expert's outputs into its tokens' rows.
  virtual void add_weighted_rows(const Tensor& src, std::span<const int32_t> rows,
                                 std::span<const float> weights, Tensor& dst) = 0;
  // out = act(gate) * up, act = SiLU or GELU (tanh approximation).
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // x [n, heads, head_dim] rotated in place; positions[n].
  virtual void rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& params) = 0;
  // Writes k, v [n, kv_heads, head_dim] into the cache at slots[n] (block * block_size + offset).
  virtual void store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                        std::span<const int32_t> slots) = 0;
  // ids (device memory, int32 [rows]) = the first index of each row's maximum of x [rows, n]:
  // greedy sampling where the logits are, so only the token ids travel back.
  virtual void argmax_rows(const Tensor& x, int32_t* ids) = 0;
  // ids (device memory, int32 [rows]) = the token row r of x [rows, n] picks with draws[r]
  // (pick_token's arithmetic): temperature sampling where the logits are.
  virtual void sample_rows(const Tensor& x, std::span<const SampleDraw> draws, int32_t* ids) = 0;
  // Whether callers should use sample_rows (else they bring the row back and call pick_token).
  virtual bool samples_rows() const { return true; }
  // out [n, heads, head_dim]: causal attention of q over each sequence's cached keys/values.
  virtual void attention(const Tensor& q, const KvLayer& cache,
                         std::span<const AttentionSequence> sequences,
                         const AttentionParams& params, Tensor& out) = 0;
};

}  // namespace tern

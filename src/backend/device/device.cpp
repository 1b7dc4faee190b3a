#include "backend/device/device.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "backend/comm/communicator.h"
#include "backend/device/moe_routing.h"

namespace tern {

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

void DeviceBuffer::release() {
  if (device_ != nullptr && data_ != nullptr) device_->free(data_, bytes_);
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

Result<void> Device::execute(const StepPlan& plan) {
  TERN_TRY(plan.status());
  for (size_t i = 0; i < plan.size(); ++i) TERN_TRY(run(plan, i));
  return {};
}

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

Result<void> Device::run(const StepPlan& plan, size_t index) {
  return std::visit(Overloaded{
                        [&](const op::Matmul& o) -> Result<void> {
                          Tensor y = o.y;
                          return matmul(o.w, o.x, y);
                        },
                        [&](const op::MatmulsSharedInput& o) { return matmuls(o); },
                        [&](const op::GetRows& o) -> Result<void> {
                          Tensor out = o.out;
                          return get_rows(o.table, o.ids, out);
                        },
                        [&](const op::RmsNorm& o) -> Result<void> {
                          Tensor out = o.out;
                          rms_norm(o.x, o.weight.data != nullptr ? &o.weight : nullptr, o.eps, out);
                          return {};
                        },
                        [&](const op::AddRmsNorm& o) { return add_rms_norm(o); },
                        [&](const op::Add& o) -> Result<void> {
                          Tensor out = o.out;
                          add(o.a, o.b, out);
                          return {};
                        },
                        [&](const op::AddRowVector& o) -> Result<void> {
                          Tensor x = o.x;
                          add_row_vector(x, o.v);
                          return {};
                        },
                        [&](const op::Scale& o) -> Result<void> {
                          Tensor x = o.x;
                          scale(x, o.factor);
                          return {};
                        },
                        [&](const op::Copy& o) -> Result<void> {
                          copy(o.src, o.dst, o.bytes);
                          return {};
                        },
                        [&](const op::GatedActivation& o) -> Result<void> {
                          Tensor out = o.out;
                          if (o.act == Activation::Silu) {
                            silu_mul(o.gate, o.up, out);
                          } else {
                            gelu_tanh_mul(o.gate, o.up, out);
                          }
                          return {};
                        },
                        [&](const op::GateUpActivation& o) { return gate_up_activation(o); },
                        [&](const op::Rope& o) -> Result<void> {
                          Tensor x = o.x;
                          rope(x, o.positions, *o.params);
                          return {};
                        },
                        [&](const op::StoreKv& o) -> Result<void> {
                          store_kv(*o.cache, o.k, o.v, o.slots);
                          return {};
                        },
                        [&](const op::QkNormRopeStoreKv& o) { return qk_norm_rope_store_kv(o); },
                        [&](const op::Attention& o) -> Result<void> {
                          Tensor out = o.out;
                          attention(o.q, *o.cache, o.sequences, o.params, out);
                          return {};
                        },
                        [&](const op::MoeExperts& o) { return moe_experts(o); },
                        [&](const op::AllReduceSum& o) { return all_reduce_sum(o); },
                        [&](const op::GatherVocab& o) { return gather_vocab(o); },
                        [&](const op::ArgmaxRows& o) -> Result<void> {
                          argmax_rows(o.logits, o.ids);
                          return {};
                        },
                        [&](const op::SampleRows& o) -> Result<void> {
                          sample_rows(o.logits, o.draws, o.ids);
                          return {};
                        },
                        [&](const op::AddToLogits& o) { return add_to_logits(o); },
                        [&](const op::RepetitionPenalty& o) { return repetition_penalty(o); },
                        [&](const op::MaskLogits& o) { return mask_logits(o); },
                        [&](const op::CopyKvBlocks& o) { return copy_kv_blocks(o); },
                        [&](const op::MoveKvSlots& o) { return move_kv_slots(o); },
                    },
                    plan.ops()[index]);
}

Result<void> Device::add_rms_norm(const op::AddRmsNorm& o) {
  Tensor residual = o.residual, out = o.out;
  add(o.residual, o.add, residual);
  rms_norm(residual, &o.weight, o.eps, out);
  return {};
}

Result<void> Device::matmuls(const op::MatmulsSharedInput& o) {
  for (int i = 0; i < o.count; ++i) {
    Tensor y = o.y[static_cast<size_t>(i)];
    TERN_TRY(matmul(o.w[static_cast<size_t>(i)], o.x, y));
  }
  return {};
}

Result<void> Device::gate_up_activation(const op::GateUpActivation& o) {
  Tensor gate = o.gate, up = o.up, out = o.out;
  TERN_TRY(matmul(o.gate_w, o.x, gate));
  TERN_TRY(matmul(o.up_w, o.x, up));
  if (o.act == Activation::Silu) {
    silu_mul(gate, up, out);
  } else {
    gelu_tanh_mul(gate, up, out);
  }
  return {};
}

Result<void> Device::qk_norm_rope_store_kv(const op::QkNormRopeStoreKv& o) {
  Tensor q = o.q, k = o.k;
  if (o.q_norm.data != nullptr) rms_norm(q, &o.q_norm, o.eps, q);
  if (o.k_norm.data != nullptr) rms_norm(k, &o.k_norm, o.eps, k);
  rope(q, o.positions, *o.rope);
  rope(k, o.positions, *o.rope);
  store_kv(*o.cache, k, o.v, o.slots);
  return {};
}

Result<void> Device::moe_experts(const op::MoeExperts& o) {
  const int64_t tokens = o.x.rows(), hidden = o.x.ne[0], experts = o.routing.experts;
  // The router's logits come to the host (for a GPU: the end of a graph): the experts a step
  // runs decide which weights it reads.
  std::vector<float> host(static_cast<size_t>(tokens * experts));
  download(o.router_logits.data, host.data(), host.size() * sizeof(float));
  const Routing routing = route_tokens(host, tokens, o.routing);
  // Each local expert's tokens (in token order) and weights, laid end to end in the scratch.
  const auto local = o.experts.size();
  std::vector<std::vector<int32_t>> rows(local);
  std::vector<std::vector<float>> weights(local);
  const auto used = static_cast<size_t>(o.routing.used);
  for (size_t i = 0; i < routing.expert.size(); ++i) {
    const int64_t e = routing.expert[i] - o.routing.first_local;
    if (e < 0 || e >= static_cast<int64_t>(local)) continue;
    rows[static_cast<size_t>(e)].push_back(static_cast<int32_t>(i / used));
    weights[static_cast<size_t>(e)].push_back(routing.weight[i]);
  }
  const std::vector<float> zeros(static_cast<size_t>(tokens * hidden), 0.0f);
  upload(zeros.data(), o.out.data, zeros.size() * sizeof(float));
  Tensor out = o.out;
  int64_t at = 0;
  for (size_t e = 0; e < local; ++e) {
    const auto n = static_cast<int64_t>(rows[e].size());
    if (n == 0) continue;
    Tensor xe = o.xs.row_slice(at, n), ge = o.gate.row_slice(at, n), ue = o.up.row_slice(at, n),
           ye = o.ys.row_slice(at, n);
    const ExpertMlp& mlp = o.experts[e];
    TERN_TRY(get_rows(o.x, rows[e], xe));
    TERN_TRY(matmul(mlp.gate, xe, ge));
    TERN_TRY(matmul(mlp.up, xe, ue));
    silu_mul(ge, ue, ge);
    TERN_TRY(matmul(mlp.down, ge, ye));
    add_weighted_rows(ye, rows[e], weights[e], out);
    at += n;
  }
  return {};
}

Result<void> Device::all_reduce_sum(const op::AllReduceSum& o) {
  const auto n = static_cast<size_t>(o.x.elements());
  if (reads_host_memory()) return o.comm->all_reduce_sum(o.x.f32(), n);
  std::vector<float> host(n);
  download(o.x.data, host.data(), n * sizeof(float));
  TERN_TRY(o.comm->all_reduce_sum(host.data(), n));
  upload(host.data(), o.x.data, n * sizeof(float));
  return {};
}

Result<void> Device::gather_vocab(const op::GatherVocab& o) {
  // Every rank sends [rows, chunk] (the last rank's share padded), then each row's slices are
  // laid side by side in rank order.
  const int64_t rows = o.local.rows(), local_vocab = o.local.ne[0];
  const int ranks = o.comm->size();
  const int64_t chunk = (o.vocab + ranks - 1) / ranks;
  std::vector<float> local(static_cast<size_t>(rows * local_vocab));
  download(o.local.data, local.data(), local.size() * sizeof(float));
  std::vector<float> mine(static_cast<size_t>(rows * chunk), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(local.data() + r * local_vocab, local_vocab, mine.data() + r * chunk);
  }
  std::vector<float> all(mine.size() * static_cast<size_t>(ranks));
  TERN_TRY(o.comm->all_gather(mine.data(), mine.size(), all.data()));
  std::vector<float> gathered(static_cast<size_t>(rows * o.vocab));
  for (int p = 0; p < ranks; ++p) {
    const int64_t begin = chunk * p, count = std::min(chunk, o.vocab - begin);
    if (count <= 0) continue;
    const float* from = all.data() + static_cast<int64_t>(p) * rows * chunk;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(from + r * chunk, count, gathered.data() + r * o.vocab + begin);
    }
  }
  upload(gathered.data(), o.out.data, gathered.size() * sizeof(float));
  return {};
}

namespace {

// A row of logits on the host: the row itself where the device reads host memory, else a copy
// that goes back when the edit is done.
class HostRow {
 public:
  HostRow(Device& device, const Tensor& row) : device_(device), row_(row) {
    if (device.reads_host_memory()) {
      data_ = row.f32();
    } else {
      copy_.resize(static_cast<size_t>(row.ne[0]));
      device.download(row.data, copy_.data(), copy_.size() * sizeof(float));
      data_ = copy_.data();
    }
  }
  ~HostRow() {
    if (!copy_.empty()) device_.upload(copy_.data(), row_.data, copy_.size() * sizeof(float));
  }
  HostRow(const HostRow&) = delete;
  HostRow& operator=(const HostRow&) = delete;
  float* data() { return data_; }

 private:
  Device& device_;
  Tensor row_;
  std::vector<float> copy_;
  float* data_ = nullptr;
};

}  // namespace

Result<void> Device::add_to_logits(const op::AddToLogits& o) {
  HostRow row(*this, o.row);
  for (size_t i = 0; i < o.tokens.size(); ++i) row.data()[o.tokens[i]] += o.values[i];
  return {};
}

Result<void> Device::repetition_penalty(const op::RepetitionPenalty& o) {
  HostRow row(*this, o.row);
  for (int32_t t : o.tokens) {
    float& l = row.data()[t];
    l = l > 0 ? l / o.penalty : l * o.penalty;
  }
  return {};
}

Result<void> Device::mask_logits(const op::MaskLogits& o) {
  HostRow row(*this, o.row);
  for (int64_t t = 0; t < o.row.ne[0]; ++t) {
    if ((o.allowed[static_cast<size_t>(t / 32)] >> (t % 32) & 1u) == 0)
      row.data()[t] = -std::numeric_limits<float>::infinity();
  }
  return {};
}

namespace {

size_t slot_bytes(const Tensor& cache, int64_t kv_heads, int64_t head_dim) {
  return *tensor_bytes(cache.type, static_cast<uint64_t>(kv_heads * head_dim));
}

}  // namespace

Result<void> Device::copy_kv_blocks(const op::CopyKvBlocks& o) {
  for (const KvLayer& layer : o.layers) {
    const size_t block =
        slot_bytes(layer.k, layer.kv_heads, layer.head_dim) * static_cast<size_t>(layer.block_size);
    for (size_t i = 0; i < o.from.size(); ++i) {
      for (const Tensor* t : {&layer.k, &layer.v}) {
        auto* base = static_cast<char*>(t->data);
        copy(base + static_cast<size_t>(o.from[i]) * block,
             base + static_cast<size_t>(o.to[i]) * block, block);
      }
    }
  }
  return {};
}

Result<void> Device::move_kv_slots(const op::MoveKvSlots& o) {
  for (const KvLayer& layer : o.layers) {
    const size_t slot = slot_bytes(layer.k, layer.kv_heads, layer.head_dim);
    for (size_t i = 0; i < o.from.size(); ++i) {
      if (o.from[i] == o.to[i]) continue;
      for (const Tensor* t : {&layer.k, &layer.v}) {
        auto* base = static_cast<char*>(t->data);
        copy(base + static_cast<size_t>(o.from[i]) * slot,
             base + static_cast<size_t>(o.to[i]) * slot, slot);
      }
    }
  }
  return {};
}

}  // namespace tern

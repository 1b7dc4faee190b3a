// The step contract: one engine step is a value, a StepPlan, not a series of side effects.
//
//   sched/   builds a batch: sequences, positions, block tables, token-tree parents, recurrent
//            state slots (models/model.h, SequenceBatch)
//   models/  forward(batch) records typed ops into the plan (ops/ops.h is the front end models
//            call) and returns where the logit rows will be, on the device
//   sample/  appends its ops to the same plan: argmax, the seeded draw, logit processors
//   backend  executes the plan: the CPU op by op; CUDA captures it into a graph keyed by the
//            plan's shape (the ops' kinds and arguments) and replays it for equal shapes
//   sched/   downloads the token ids (and logit rows only where asked), updates the sequences
//
// An op is a kind with typed arguments (below): no integer ids, no callbacks. A fused op (add +
// RMSNorm, q/k norm + RoPE + KV store, gate/up + activation, several products of one input,
// expert routing) is one the model asks for by name; a backend with a kernel for it runs that
// kernel, and Device's default runs its unfused composition (backend/device/device.cpp), so
// every fused op has a reference. No backend rewrites work it has already queued; a backend
// may choose a kernel by looking at the ops of the plan (an explicit check, e.g. the norm that
// feeds a product also writes its 8-bit copy), never by patching a launch after the fact.
//
// The plan also carries what comes next: copying KV blocks (a shared prefix's partly matching
// last block), moving a token tree's accepted path into consecutive KV slots (speculation's
// rollback), and per-sequence recurrent-state slots (SequenceBatch::state_slot, hybrid models).
//
// Host arrays an op reads (positions, slots, ids, draws, block tables) are kept by the plan
// (keep()), so a plan stays valid until it is executed; scratch memory too (keep_alive()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/error.h"
#include "ops/op_params.h"

namespace tern {

class Communicator;

namespace op {

// y [n, m] = x [n, k] . W^T for W [m rows, k cols] of any supported type.
struct Matmul {
  Tensor w, x, y;
};
// Up to four products of the same input (a layer's q, k and v): y[i] = x . w[i]^T.
struct MatmulsSharedInput {
  static constexpr int kMax = 4;
  Tensor x;
  std::array<Tensor, kMax> w, y;
  int count = 0;
};
// out[i] = the dequantized row ids[i] of table.
struct GetRows {
  Tensor table;
  std::span<const int32_t> ids;
  Tensor out;
};
// Each row of x normalised by its RMS, times weight (F32 [ne0]) when weight.data is set.
struct RmsNorm {
  Tensor x, weight;
  float eps = 0;
  Tensor out;
};
// residual += add, then out = rms_norm(residual) * weight: a pre-norm block's residual step.
struct AddRmsNorm {
  Tensor residual, add, weight;
  float eps = 0;
  Tensor out;
};
struct Add {
  Tensor a, b, out;
};
// Adds the F32 vector v [ne0] to every row of x.
struct AddRowVector {
  Tensor x, v;
};
struct Scale {
  Tensor x;
  float factor = 1;
};
// bytes from src to dst, both in this device's memory.
struct Copy {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};
// out = act(gate) * up.
struct GatedActivation {
  Activation act = Activation::Silu;
  Tensor gate, up, out;
};
// out = act(x . gate_w^T) * (x . up_w^T); gate and up are scratch [n, ffn] the unfused path uses.
struct GateUpActivation {
  Activation act = Activation::Silu;
  Tensor x, gate_w, up_w, gate, up, out;
};
// x [n, heads, head_dim] rotated in place; positions[n].
struct Rope {
  Tensor x;
  std::span<const int32_t> positions;
  const RopeParams* params = nullptr;
};
// Writes k, v [n, kv_heads, head_dim] into the cache at slots[n] (block * block_size + offset).
struct StoreKv {
  KvLayer* cache = nullptr;
  Tensor k, v;
  std::span<const int32_t> slots;
};
// A layer's q [n, heads, head_dim] and k [n, kv_heads, head_dim]: per-head RMSNorm (when the
// norm weights are set), RoPE, and k and v stored into the cache.
struct QkNormRopeStoreKv {
  Tensor q, k, v, q_norm, k_norm;
  float eps = 0;
  std::span<const int32_t> positions;
  const RopeParams* rope = nullptr;
  KvLayer* cache = nullptr;
  std::span<const int32_t> slots;
};
// out [n, heads, head_dim]: attention of q over each sequence's cached keys and values (causal,
// or a token tree's ancestors).
struct Attention {
  Tensor q;
  const KvLayer* cache = nullptr;
  std::span<const AttentionSequence> sequences;
  AttentionParams params;
  Tensor out;
};
// A mixture-of-experts MLP: route x's tokens by router_logits [n, experts], run each local
// expert's gated MLP on its tokens and add the weighted outputs into out [n, hidden] (zeroed
// first). xs, gate, up, ys are scratch of n * used rows.
struct MoeExperts {
  Tensor x, router_logits;
  std::span<const ExpertMlp> experts;  // the local ones, routing.first_local first
  MoeRouting routing;
  Tensor out, xs, gate, up, ys;
};
// x becomes the element-wise sum of x over every rank (tensor parallelism).
struct AllReduceSum {
  Tensor x;
  Communicator* comm = nullptr;
};
// out [rows, vocab] = every rank's local [rows, vocab / ranks (the last padded)] side by side.
struct GatherVocab {
  Tensor local, out;
  int64_t vocab = 0;
  Communicator* comm = nullptr;
};
// ids (device memory, int32 [rows]) = the first index of each row's maximum.
struct ArgmaxRows {
  Tensor logits;
  int32_t* ids = nullptr;
};
// ids (device memory, int32 [rows]) = the token row r picks with draws[r].
struct SampleRows {
  Tensor logits;
  std::span<const SampleDraw> draws;
  int32_t* ids = nullptr;
};
// Adds values[i] to logit tokens[i] of one row (logit bias, presence and frequency penalties).
struct AddToLogits {
  Tensor row;
  std::span<const int32_t> tokens;
  std::span<const float> values;
};
// Divides the positive and multiplies the negative logits of `tokens` by penalty.
struct RepetitionPenalty {
  Tensor row;
  std::span<const int32_t> tokens;
  float penalty = 1;
};
// Sets every logit of one row whose bit is clear in allowed (bit t of word t / 32) to -inf.
struct MaskLogits {
  Tensor row;
  std::span<const uint32_t> allowed;
};
// Every layer's KV block from[i] copied to block to[i] (a shared prefix's partly matching block).
struct CopyKvBlocks {
  std::span<KvLayer> layers;
  std::span<const int32_t> from, to;
};
// Every layer's KV slot from[i] moved to slot to[i], in order (a token tree's accepted path
// into consecutive slots; the other branches' slots are dropped by the caller's length).
struct MoveKvSlots {
  std::span<KvLayer> layers;
  std::span<const int32_t> from, to;
};

}  // namespace op

// The kinds, in the order of the variant's alternatives.
enum class OpKind : uint8_t {
  Matmul,
  MatmulsSharedInput,
  GetRows,
  RmsNorm,
  AddRmsNorm,
  Add,
  AddRowVector,
  Scale,
  Copy,
  GatedActivation,
  GateUpActivation,
  Rope,
  StoreKv,
  QkNormRopeStoreKv,
  Attention,
  MoeExperts,
  AllReduceSum,
  GatherVocab,
  ArgmaxRows,
  SampleRows,
  AddToLogits,
  RepetitionPenalty,
  MaskLogits,
  CopyKvBlocks,
  MoveKvSlots,
};

using Op = std::variant<op::Matmul, op::MatmulsSharedInput, op::GetRows, op::RmsNorm,
                        op::AddRmsNorm, op::Add, op::AddRowVector, op::Scale, op::Copy,
                        op::GatedActivation, op::GateUpActivation, op::Rope, op::StoreKv,
                        op::QkNormRopeStoreKv, op::Attention, op::MoeExperts, op::AllReduceSum,
                        op::GatherVocab, op::ArgmaxRows, op::SampleRows, op::AddToLogits,
                        op::RepetitionPenalty, op::MaskLogits, op::CopyKvBlocks, op::MoveKvSlots>;

inline OpKind kind_of(const Op& o) {
  return static_cast<OpKind>(o.index());
}
const char* op_name(OpKind kind);

class StepPlan {
 public:
  const std::vector<Op>& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }
  void add(Op o) { ops_.push_back(std::move(o)); }

  // A host array the plan's ops read, kept until the plan is cleared.
  template <class T>
  std::span<const T> keep(std::vector<T> values) {
    auto held = std::make_shared<std::vector<T>>(std::move(values));
    std::span<const T> view(*held);
    held_.push_back(std::move(held));
    return view;
  }
  // Memory (scratch buffers) the plan's ops use, released when the plan is cleared.
  void keep_alive(std::shared_ptr<void> owner) { held_.push_back(std::move(owner)); }

  // The first error recording met (a shape that does not fit, out of memory): the ops after it
  // are not recorded and the step fails with it.
  bool failed() const { return failed_; }
  const Error& error() const { return error_; }
  void fail(Error e);
  Result<void> status() const { return failed_ ? Result<void>(error_) : Result<void>(); }

  // One line per op: its kind and operand shapes (no addresses): what the plan-shape tests
  // compare across devices.
  std::string describe() const;
  void clear();

 private:
  std::vector<Op> ops_;
  std::vector<std::shared_ptr<void>> held_;
  bool failed_ = false;
  Error error_;
};

}  // namespace tern

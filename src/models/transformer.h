// The pieces decoder-only transformers share: the per-batch state (positions, KV slots,
// attention metadata, scratch), grouped-query self-attention over the paged cache, the gated
// MLP and the LM head. Architecture files compose these; the device does the arithmetic.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <vector>

#include "backend/device/device.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "models/tensor_parallel.h"
#include "ops/ops.h"

namespace tern {

// One step's recording state: the batch's ids, positions, KV slots and attention metadata
// (kept by the plan), the ops front end, and scratch memory that lives as long as the plan.
class ForwardState {
 public:
  ForwardState(Device& device, KvCache& cache, std::span<SequenceBatch> batch, StepPlan& plan);

  Ops ops;
  KvCache& cache;
  int64_t tokens = 0;                  // new tokens in the batch
  std::span<const int32_t> ids;        // [tokens]
  std::span<const int32_t> positions;  // [tokens]
  std::span<const int32_t> slots;      // [tokens] KV slot of each new token
  std::span<const AttentionSequence> sequences;
  std::vector<int64_t> logit_rows;  // batch rows whose logits are wanted

  // A fresh F32 buffer [rows, cols] that lives as long as the plan.
  Result<Tensor> scratch(int64_t rows, int64_t cols);
  // An F32 buffer [rows, cols] for one use inside a layer, the same memory for every layer
  // (ops run in order, so the next layer's writes come after this one's reads): without it a
  // long prefill holds every layer's intermediates at once (Qwen3-30B-A3B, 512 tokens: 4.4 GB).
  enum class Slot {
    kQ,
    kK,
    kV,
    kAttention,
    kGate,
    kUp,
    kRouter,
    kExpertIn,
    kExpertGate,
    kExpertUp,
    kExpertOut,
    kCount
  };
  Result<Tensor> layer_scratch(Slot slot, int64_t rows, int64_t cols);
  // Marks every sequence's new tokens as cached.
  void commit();

 private:
  Result<Tensor> hold(size_t bytes, int64_t rows, int64_t cols);
  Device& device_;
  std::span<SequenceBatch> batch_;
  struct Reused {
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::array<Reused, static_cast<size_t>(Slot::kCount)> reused_{};
};

struct AttentionWeights {
  Tensor q, k, v, o;
  std::optional<Tensor> q_bias, k_bias, v_bias;  // qwen2
  std::optional<Tensor> q_norm, k_norm;          // per-head RMSNorm (qwen3, gemma3)
  Communicator* reduce = nullptr;  // tensor parallelism: o's output is this rank's partial sum
};

struct AttentionConfig {
  int64_t heads = 0;     // heads this rank computes (all of them without tensor parallelism)
  int64_t kv_heads = 0;  // KV heads this rank caches
  int64_t head_dim = 0;
  float norm_eps = 1e-6f;
  RopeParams rope;
  AttentionParams params;
  // Where this rank's heads start among the model's (file_heads, file_kv_heads): set by
  // split_heads; zero totals mean the config is not split.
  int64_t file_heads = 0, file_kv_heads = 0;
  int64_t first_head = 0, first_kv_head = 0;
};

// Narrows `cfg` (the whole model's heads) to this rank's share: heads / ranks query heads, and
// kv_heads / ranks KV heads, or one replicated KV head per rank when there are fewer KV heads
// than ranks (each rank's query heads must then share one KV head). Errors name what does not
// divide.
Result<void> split_heads(AttentionConfig& cfg, const TensorParallel& tp);

// out [tokens, hidden] = o_proj(attention(rope(q), rope(k), v)) for the normalised input x.
Result<void> self_attention(ForwardState& st, const AttentionWeights& w, const AttentionConfig& cfg,
                            KvLayer& cache, const Tensor& x, Tensor& out);

struct MlpWeights {
  Tensor gate, up, down;
  Communicator* reduce = nullptr;  // tensor parallelism: down's output is a partial sum
};

// out = down(act(gate(x)) * up(x)).
Result<void> gated_mlp(ForwardState& st, const MlpWeights& w, Activation act, const Tensor& x,
                       Tensor& out);

// A table with one row per vocabulary token: the token embedding or the LM head. Under tensor
// parallelism each rank holds rows [part.begin, +count) of the `vocab`.
struct VocabTable {
  Tensor rows;
  int64_t vocab = 0;
  Slice part;
  Communicator* comm = nullptr;  // null: the whole vocabulary is here
};

// out [tokens, hidden] = the embedding rows of st.ids (each rank adds the rows it holds).
Result<void> embed(ForwardState& st, const VocabTable& table, Tensor& out);

// Final norm and output projection of the rows in st.logit_rows: the logits [rows, vocab] where
// the device keeps them (every rank gets the whole vocabulary's); no data when no row is wanted.
// Sampling them is sample/'s (the LM head only produces logits).
Result<Tensor> lm_head(ForwardState& st, const Tensor& hidden, const Tensor& norm, float eps,
                       const VocabTable& output);

// The vocabulary table `name` [vocab x hidden]: this rank's rows under tensor parallelism.
// `matmul`: used as a matmul weight (the LM head, tied or not), so the device may repack it.
class WeightLoader;
Result<VocabTable> load_vocab_table(WeightLoader& w, const std::string& name, int64_t hidden,
                                    bool matmul);

// Loads q/k/v/o (+ optional biases and q/k norms) of one layer: this rank's heads when `cfg` was
// split (split_heads), with o's input columns to match.
Result<AttentionWeights> load_attention(WeightLoader& w, int64_t layer, int64_t hidden,
                                        const AttentionConfig& cfg, bool biases, bool qk_norm,
                                        float norm_add = 0.0f);
// Gate/up/down of one layer; under tensor parallelism this rank's ffn / ranks rows of gate and
// up and the same columns of down.
Result<MlpWeights> load_mlp(WeightLoader& w, int64_t layer, int64_t hidden, int64_t ffn);

}  // namespace tern

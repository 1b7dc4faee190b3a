// A loaded model: forward over a batch of sequences, each bringing new tokens on top of what its
// paged KV already holds. One implementation per architecture family (llama.cpp, qwen2.cpp,
// qwen3.cpp, qwen3moe.cpp, gemma3.cpp); load_model() picks it from general.architecture.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/device/device.h"
#include "base/error.h"
#include "io/gguf_file.h"
#include "kv/kv_cache.h"
#include "models/tensor_parallel.h"
#include "ops/step_plan.h"

namespace tern {

struct SequenceBatch {
  std::span<const int32_t> tokens;  // new tokens, at positions kv->length, kv->length + 1, ...
  SequenceKv* kv = nullptr;         // must have room reserved for every new position
  bool logits_for_all = false;      // logits for every new token, else only for the last one
  bool last_logits = true;          // logits for the last new token (a prefill chunk that does
                                    // not reach the end of the prompt needs none)
  // A token tree (speculative decoding's verify pass; empty: the tokens follow each other): each
  // new token's parent among them, earlier in the list (-1: the last cached token), at most
  // kMaxTreeTokens. Token i then sits at position kv->length + its depth and attends to the
  // cached tokens, its ancestors and itself. Its KV still goes to slot kv->length + i and
  // kv->length advances by every new token: keeping only an accepted branch is the verifier's.
  std::span<const int32_t> tree_parents = {};
  // The sequence's recurrent-state slot (hybrid models' gated delta-net / Mamba-2 layers keep
  // one state per sequence instead of KV); -1: none. Attention-only models ignore it.
  int32_t state_slot = -1;
};

// Whether every token tree of the batch is well formed (errors name the sequence and token).
Result<void> check_token_trees(std::span<const SequenceBatch> batch);

struct ModelShape {
  std::string architecture;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  int64_t context_length = 0;
  // Tensor parallelism: the ranks the model is split over, and the KV heads this rank caches
  // (kv_heads / ranks, or 1 when ranks share replicated KV heads).
  int ranks = 1;
  int64_t rank_kv_heads = 0;  // 0: kv_heads

  int64_t cached_kv_heads() const { return rank_kv_heads > 0 ? rank_kv_heads : kv_heads; }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelShape& shape() const = 0;
  // The device the weights live on: the one that executes this model's plans.
  virtual Device& device() const = 0;
  // Runs a plan this model recorded (a decorator, such as tensor parallelism's leader, may
  // watch it fail).
  virtual Result<void> execute(const StepPlan& plan) { return device().execute(plan); }
  // Records the batch's forward into `plan` (nothing runs until a device executes it) and
  // advances each kv->length by its new tokens. Returns the logits [rows, vocab] the plan will
  // write where the device keeps them: one row per requested token, in sequence order and token
  // order (no data when no row is requested).
  virtual Result<Tensor> forward(std::span<SequenceBatch> batch, KvCache& cache,
                                 StepPlan& plan) = 0;

  KvCacheConfig kv_config(int64_t context_tokens, TensorType type, int64_t block_size = 16) const;
};

// Records one forward, executes it and appends its logit rows to `logits` (tests and tools that
// want logits; the engine's steps go through sched/step.h, which samples where they are).
Result<void> forward_logits(Model& model, std::span<SequenceBatch> batch, KvCache& cache,
                            std::vector<float>& logits);

// The model in `file`, with its weights made usable on `device` (in place on the CPU). The file
// must outlive the model. With `tp` over several ranks, this rank's share of it
// (models/tensor_parallel.h); every rank then calls forward with the same batches.
Result<std::unique_ptr<Model>> load_model(const GgufFile& file, Device& device,
                                          const TensorParallel& tp = {});

}  // namespace tern

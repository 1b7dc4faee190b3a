// The token-budget scheduler. There are no separate prefill and decode phases: every step brings
// each running sequence's computed tokens (its KV length) closer to its known tokens (prompt and
// sampled so far), within a per-step token budget, in one batched forward. A sequence whose
// computed tokens reach its known tokens gets logits, and the sampler adds one known token.
//
// Finished sequences stay cached (their tokens and KV blocks) so that a later request sharing a
// prefix — the next turn of a conversation, an agent resending its history — starts from there.
// Cached sequences are evicted least recently used when the KV pool runs out.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "base/error.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "sample/sampler.h"
#include "sample/token_constraint.h"

namespace tern {

struct SchedulerOptions {
  int64_t max_running = 4;    // sequences decoded together
  int64_t step_tokens = 512;  // token budget of one forward
  int64_t context = 8192;     // most tokens one sequence may hold
  bool prefix_cache = true;   // keep finished sequences for reuse by later requests
};

enum class SequenceEnd { Finished, ContextFull, Cancelled };

// What the scheduler reports about a sequence; the engine turns it into text and events.
struct SequenceHooks {
  // Admitted to the running batch; `reused` prompt tokens were found in the prefix cache.
  std::function<void(int64_t reused)> on_admitted;
  // A token was sampled; `logits` is its distribution row (before sampling transforms; empty
  // when the request said it needs none). Return false to finish the sequence (stop string, end
  // of generation, cancelled).
  std::function<bool(int32_t token, std::span<const float> logits)> on_token;
  // The sequence ended: normally, by the context limit, cancelled, or with an error.
  std::function<void(SequenceEnd end, const Error* error)> on_finish;
  // Polled every step; true ends the sequence (client gone).
  std::function<bool()> cancelled;
  // Scoring (SequenceRequest::score_prompt): the logits of a step's chunk of prompt tokens, one
  // row of the vocabulary a token, in order.
  std::function<void(std::span<const float> rows)> on_prompt_logits;
};

struct SequenceRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 512;
  SequenceHooks hooks;
  std::shared_ptr<TokenConstraint> constraint;  // masks the logits before sampling, or none
  // False when on_token ignores its logits (no logprobs asked for): only the token id comes
  // back from the device.
  bool needs_logits = true;
  // Scoring (teacher forcing, as vLLM's prompt_logprobs): every prompt token's logits go to
  // hooks.on_prompt_logits, and the sequence ends once its prompt is computed, with nothing
  // sampled. It adopts no cached prefix: every position's row is computed.
  bool score_prompt = false;
};

class Scheduler {
 public:
  Scheduler(Model& model, KvCache& cache, SchedulerOptions options);
  ~Scheduler();

  // Queues a request; returns its id.
  uint64_t add(SequenceRequest request);
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  // One forward over the batch the budget allows; errors end the affected sequences.
  void step();
  // Ends every waiting and running sequence as cancelled (shutdown).
  void cancel_all();
  int64_t cached_sequences() const { return static_cast<int64_t>(cached_.size()); }

 private:
  struct Sequence {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // known: prompt, then sampled
    int64_t prompt_tokens = 0;
    int64_t reused = 0;
    SequenceKv kv;  // kv.length: computed
    std::unique_ptr<Sampler> sampler;
    std::shared_ptr<TokenConstraint> constraint;
    bool needs_logits = true;
    int64_t max_tokens = 0;
    SequenceHooks hooks;
    bool score_prompt = false;
  };
  struct Cached {
    std::vector<int32_t> tokens;
    SequenceKv kv;
  };

  void admit();
  void adopt_cached_prefix(Sequence& seq);
  bool reserve(SequenceKv& kv, int64_t positions);
  void finish(std::list<Sequence>::iterator it, SequenceEnd end, const Error* error);

  Model& model_;
  KvCache& cache_;
  SchedulerOptions options_;
  uint64_t next_id_ = 1;
  std::deque<Sequence> waiting_;
  std::list<Sequence> running_;
  std::list<Cached> cached_;  // most recently used first
};

}  // namespace tern

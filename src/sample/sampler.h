// Turns a row of logits into the next token: penalties and logit bias first, then greedy or
// temperature sampling restricted by top-k, top-p and min-p. Seeded: the same seed and the same
// logits give the same tokens.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "backend/device/sample_pick.h"
#include "sample/row_sampling.h"
#include "sample/token_constraint.h"
#include "base/error.h"

namespace tern {

struct SamplingParams {
  float temperature = 0.0f;             // 0: greedy
  int32_t top_k = 0;                    // 0: off
  float top_p = 1.0f;                   // 1: off
  float min_p = 0.0f;                   // 0: off
  float repetition_penalty = 1.0f;      // 1: off; divides positive / multiplies negative logits
  float presence_penalty = 0.0f;        // subtracted once from every token already seen
  float frequency_penalty = 0.0f;       // subtracted per occurrence
  int32_t penalty_window = 256;         // how many recent tokens the penalties look at (0: all)
  std::map<int32_t, float> logit_bias;  // added to the logits of these ids
  std::optional<uint64_t> seed;         // none: nondeterministic

  Result<void> validate(int64_t vocab) const;
};

// The constraint's mask over a vocabulary of `vocab` tokens (bit t of word t / 32: allowed).
std::vector<uint32_t> allowed_tokens(TokenConstraint& constraint, int64_t vocab);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  const SamplingParams& params() const { return params_; }
  // Greedy with nothing that changes the logits first (no penalties, no bias): the token is the
  // argmax of the raw logits, which the model can take where they are (the GPU).
  bool plain_greedy() const;
  // Whether penalties or a logit bias change the logits before the choice.
  bool changes_logits() const;
  // Picks a token from `logits` given the tokens so far (prompt and generated, for penalties).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // Temperature sampling with nothing that changes the logits: Device::sample_rows can pick the
  // token where the logits are, given draw() (which consumes the draw sample() would have).
  bool device_sampling() const { return params_.temperature > 0.0f && !changes_logits(); }
  SampleDraw draw();
  // The next token's row state for a step plan, given the tokens so far (for the penalties):
  // the same processors and pick as sample(), consuming the same draw.
  RowSampling next_row(std::span<const int32_t> history);
  // The probability the sampler gave to each candidate after the last call (for logprobs).
  // Log-softmax of the processed logits (before truncation), one per vocabulary entry.
  static std::vector<float> log_softmax(std::span<const float> logits);

 private:
  void apply_penalties(std::vector<float>& logits, std::span<const int32_t> history) const;
  double next_uniform();
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace tern

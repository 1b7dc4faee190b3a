// Single-sequence generation for the CLI (run, chat, bench): chunked prefill, decode, sampling,
// stop strings and tokens, and reuse of the cached prefix from the previous call (multi-turn).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/loaded_model.h"
#include "sample/sampler.h"

namespace tern {

struct GenerateOptions {
  int64_t max_tokens = 512;
  SamplingParams sampling;
  std::vector<std::string> stop;     // stop strings (not part of the output)
  std::vector<int32_t> stop_tokens;  // besides the model's end-of-generation tokens
  bool ignore_eos = false;           // benchmarks: generate exactly max_tokens
  int64_t prefill_chunk = 0;         // tokens a forward takes of the prompt; 0: the model's choice
};

enum class FinishReason { Stop, Length, Cancelled };

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;  // generated ids
  FinishReason finish = FinishReason::Stop;
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;   // prompt tokens served from the cache
  double prefill_seconds = 0;  // until the first token's logits
  double decode_seconds = 0;   // from the first generated token to the last
};

class Generator {
 public:
  explicit Generator(LoadedModel& model);
  ~Generator();

  // Streams text pieces to `on_text` (return false to cancel).
  Result<GenerateResult> generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                  const std::function<bool(const std::string&)>& on_text = {});
  // The next-token logits after feeding `tokens` (teacher forcing: one row per token).
  Result<std::vector<float>> logits_for(std::span<const int32_t> tokens);
  void reset();

 private:
  // Feeds tokens in chunks: every token's logits go to `logits` with all_logits; with `pick`,
  // the last token's row is sampled that way and the token goes to *picked.
  Result<void> feed(std::span<const int32_t> tokens, int64_t chunk, bool all_logits,
                    std::vector<float>& logits, const RowSampling* pick = nullptr,
                    int32_t* picked = nullptr);
  LoadedModel& m_;
  SequenceKv seq_;
  std::vector<int32_t> cached_;      // tokens whose KV is in seq_
};

}  // namespace tern

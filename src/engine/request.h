// What a generation asks for and what it gives back: the options of one request, why it ended,
// its timing, and the whole result of a blocking Engine::generate (the CLI's `run`, `chat`,
// `bench`, the comparison tools).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sample/sampler.h"

namespace tern {

struct GenerateOptions {
  int64_t max_tokens = 512;
  SamplingParams sampling;
  std::vector<std::string> stop;     // stop strings (not part of the output)
  std::vector<int32_t> stop_tokens;  // besides the model's end-of-generation tokens
  bool ignore_eos = false;           // benchmarks: generate exactly max_tokens
};

enum class FinishReason { Stop, Length, Cancelled };

// When a request reached each stage, on the engine's loop thread (steady clock). A request that
// never sampled a token keeps first_token and last_token at the epoch.
struct Timing {
  using Clock = std::chrono::steady_clock;
  Clock::time_point submitted;    // Engine::submit queued it
  Clock::time_point admitted;     // it joined the running batch (its prefill starts)
  Clock::time_point first_token;  // its first sampled token (the end of its prefill)
  Clock::time_point last_token;   // its last sampled token, the one that ended it included
  // Prefill: admission to the first token's logits. Decode: the first sampled token to the last.
  double prefill_seconds() const;
  double decode_seconds() const;
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;  // generated ids
  FinishReason finish = FinishReason::Stop;
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;   // prompt tokens served from the prefix cache
  double prefill_seconds = 0;  // until the first token's logits
  double decode_seconds = 0;   // from the first generated token to the last
};

}  // namespace tern

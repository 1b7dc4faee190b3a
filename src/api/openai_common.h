// Pieces the OpenAI-style endpoints share: sampling fields, stop lists, finish reasons, usage.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "api/chat_request.h"
#include "base/error.h"
#include "engine/engine.h"

namespace tern::api {

// Reads temperature, top_p, top_k, min_p, seed, presence/frequency/repetition penalties,
// logit_bias, stop, max_tokens / max_completion_tokens / max_output_tokens, as set. A max_tokens
// over max_tokens_limit (when positive: the context) is an error rather than silently cut.
Result<SamplingRequest> read_sampling(const nlohmann::json& body, int64_t max_tokens_limit = 0);

std::string openai_finish_reason(FinishReason reason);
nlohmann::json openai_usage(const Usage& usage);
std::string random_id(const std::string& prefix);
int64_t unix_time();

}  // namespace tern::api

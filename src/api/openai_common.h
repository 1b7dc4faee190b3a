// Pieces the OpenAI-style endpoints share: sampling fields, stop lists, finish reasons, usage.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "engine/engine.h"

namespace tern::api {

// Reads temperature, top_p, top_k, min_p, seed, presence/frequency/repetition penalties,
// logit_bias, stop, max_tokens / max_completion_tokens into `request.options`. A max_tokens over
// max_tokens_limit (when positive: the context) is an error rather than silently cut.
Result<void> read_sampling(const nlohmann::json& body, Request& request, int64_t default_max_tokens,
                           int64_t max_tokens_limit = 0);

std::string openai_finish_reason(FinishReason reason);
nlohmann::json openai_usage(const Usage& usage);
std::string random_id(const std::string& prefix);
int64_t unix_time();

}  // namespace tern::api

#include "api/openai_common.h"

#include <chrono>
#include <random>

namespace tern::api {

Result<SamplingRequest> read_sampling(const nlohmann::json& body, int64_t max_tokens_limit) {
  SamplingRequest o;
  auto number = [&](const char* key, float& out) -> Result<void> {
    if (!body.contains(key) || body[key].is_null()) return {};
    if (!body[key].is_number()) return make_error("'{}' must be a number", key);
    out = body[key].get<float>();
    return {};
  };
  float temperature = 0;
  TERN_TRY(number("temperature", temperature));
  if (body.contains("temperature") && !body["temperature"].is_null()) o.temperature = temperature;
  TERN_TRY(number("top_p", o.params.top_p));
  TERN_TRY(number("min_p", o.params.min_p));
  TERN_TRY(number("presence_penalty", o.params.presence_penalty));
  TERN_TRY(number("frequency_penalty", o.params.frequency_penalty));
  TERN_TRY(number("repetition_penalty", o.params.repetition_penalty));
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    if (!body["top_k"].is_number_integer()) return Error{"'top_k' must be an integer"};
    o.params.top_k = body["top_k"].get<int32_t>();
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) return Error{"'seed' must be an integer"};
    o.params.seed = static_cast<uint64_t>(body["seed"].get<int64_t>());
  }
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
    if (!body["logit_bias"].is_object())
      return Error{"'logit_bias' must be an object of token id to bias"};
    for (const auto& [key, value] : body["logit_bias"].items()) {
      char* end = nullptr;
      long id = std::strtol(key.c_str(), &end, 10);
      if (end == key.c_str() || *end != '\0' || !value.is_number()) {
        return make_error("logit_bias key '{}' must be a token id with a numeric bias", key);
      }
      o.params.logit_bias[static_cast<int32_t>(id)] = value.get<float>();
    }
  }
  for (const char* key : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    if (body.contains(key) && !body[key].is_null()) {
      if (!body[key].is_number_integer() || body[key].get<int64_t>() < 1) {
        return make_error("'{}' must be a positive integer", key);
      }
      o.max_tokens = body[key].get<int64_t>();
      if (max_tokens_limit > 0 && *o.max_tokens > max_tokens_limit) {
        return make_error("'{}' is {}, more than the {} tokens of context this server holds", key,
                          *o.max_tokens, max_tokens_limit);
      }
    }
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const auto& stop = body["stop"];
    if (stop.is_string()) {
      o.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const auto& s : stop) {
        if (!s.is_string()) return Error{"'stop' must be a string or an array of strings"};
        o.stop.push_back(s.get<std::string>());
      }
    } else {
      return Error{"'stop' must be a string or an array of strings"};
    }
  }
  return o;
}

std::string openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "stop";
    case FinishReason::Stop:
      return "stop";
  }
  return "stop";
}

nlohmann::json openai_usage(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

std::string random_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kChars[rng() % 62];
  return id;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace tern::api

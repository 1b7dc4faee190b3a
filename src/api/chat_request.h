// A chat request as every API means it, free of any wire format: the OpenAI, Responses and
// Anthropic endpoints read their JSON into it, and prepare_chat (api/chat_preparation.h) turns it
// into the engine's Request and the output parser. Messages and tools are in the Hugging Face
// chat-template format, since that is what the model's template reads.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/output_constraint.h"
#include "sample/sampler.h"

namespace tern::api {

// Whether and which tool the model must call. Required and Named are enforced by constrained
// decoding: the call is written in the model family's format from the first token.
struct ToolChoice {
  enum class Mode { None, Auto, Required, Named };
  Mode mode = Mode::Auto;
  std::string name;  // Named: one of the tools

  bool forces_call() const { return mode == Mode::Required || mode == Mode::Named; }
};

// The sampling fields as the client set them; what it left unset takes the server's defaults.
struct SamplingRequest {
  std::optional<float> temperature;   // unset: the server's --temp, else 1 (the APIs' default)
  SamplingParams params;              // everything else; its temperature is not read
  std::vector<std::string> stop;      // stop strings
  std::optional<int64_t> max_tokens;  // unset: what the context leaves after the prompt
};

struct ChatRequest {
  // [{"role", "content", "tool_calls", "tool_call_id", "reasoning_content", ...}]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // [{"type": "function", "function": {"name", "description", "parameters"}}]
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice tool_choice;
  // Read, not yet enforced on free output (a forced call is always exactly one call).
  bool parallel_tool_calls = true;
  std::optional<bool> thinking;  // unset: the template's default (templates that read it)
  nlohmann::ordered_json template_variables;  // further variables for the template (may be null)
  SamplingRequest sampling;
  int32_t top_logprobs = -1;         // -1: no logprobs; 0: the chosen token's; n: also the n best
  OutputConstraint response_format;  // None, JsonObject or JsonSchema (tool calls: tool_choice)
};

}  // namespace tern::api

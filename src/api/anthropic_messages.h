// POST /v1/messages and /v1/messages/count_tokens: Anthropic Messages API requests -> the
// model's chat template -> engine, and the engine's events -> Anthropic message objects or
// server-sent events (message_start, content_block_*, message_delta, message_stop, ping).
#pragma once

#include <nlohmann/json.hpp>

#include "api/http_types.h"
#include "base/error.h"

namespace tern::api {

class Service;

// `system` (a string or text blocks) and `messages` (text, tool_use, tool_result and thinking
// blocks) in the Hugging Face chat-template format: tool_use -> tool_calls, tool_result -> role
// "tool" messages with tool_call_id, thinking -> reasoning_content. Errors name the field.
Result<nlohmann::ordered_json> anthropic_messages_to_template(const nlohmann::json& body);

// `tools` ({name, description, input_schema}) after `tool_choice`: none drops them, tool keeps
// the named one. Server tools (a `type` and no input_schema) are left out.
Result<nlohmann::ordered_json> anthropic_tools_to_template(const nlohmann::json& body);

HttpResponse anthropic_messages(Service& service, const HttpRequest& request);
HttpResponse anthropic_count_tokens(Service& service, const HttpRequest& request);

}  // namespace tern::api

// POST /v1/messages and /v1/messages/count_tokens: Anthropic Messages API requests -> a
// ChatRequest (anthropic_convert.cpp) -> prepare_chat -> engine, and the engine's events ->
// Anthropic message objects or server-sent events (message_start, content_block_*,
// message_delta, message_stop, ping).
#pragma once

#include <nlohmann/json.hpp>

#include "api/chat_request.h"
#include "api/http_types.h"
#include "base/error.h"

namespace tern::api {

class Service;

// `system` (a string or text blocks) and `messages` (text, tool_use, tool_result and thinking
// blocks) in the Hugging Face chat-template format: tool_use -> tool_calls, tool_result -> role
// "tool" messages with tool_call_id, thinking -> reasoning_content. Errors name the field.
Result<nlohmann::ordered_json> anthropic_messages_to_template(const nlohmann::json& body);

// `tools` ({name, description, input_schema}) in the template format. Server tools (a `type`
// and no input_schema) are left out.
Result<nlohmann::ordered_json> anthropic_tools_to_template(const nlohmann::json& tools);

// What the prompt is made of: system, messages, tools, tool_choice (`any` and `tool` force a call
// as OpenAI's "required" and named choice do) and thinking. What count_tokens renders.
Result<ChatRequest> anthropic_conversation(const nlohmann::json& body);
// The conversation with max_tokens (required), temperature, top_p, top_k and stop_sequences.
Result<ChatRequest> anthropic_chat_request(const nlohmann::json& body);

HttpResponse anthropic_messages(Service& service, const HttpRequest& request);
HttpResponse anthropic_count_tokens(Service& service, const HttpRequest& request);

}  // namespace tern::api

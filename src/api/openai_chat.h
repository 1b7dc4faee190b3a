// POST /v1/chat/completions: the request body -> a ChatRequest (openai_chat_convert.cpp) ->
// prepare_chat -> engine, and the engine's events -> chat.completion / chat.completion.chunk
// objects.
#pragma once

#include <nlohmann/json.hpp>

#include "api/chat_request.h"
#include "api/errors.h"
#include "api/http_types.h"
#include "base/error.h"

namespace tern::api {

class Service;

// OpenAI messages (system/developer/user/assistant/tool, string or content parts, tool_calls
// with JSON-string arguments) in the Hugging Face chat-template format.
Result<nlohmann::ordered_json> openai_messages_to_template(const nlohmann::json& messages);
// OpenAI `tools` (function tools) in the template format; errors name the bad entry.
Result<nlohmann::ordered_json> openai_tools_to_template(const nlohmann::json& tools);

// The whole body as a ChatRequest: messages, tools, tool_choice, parallel_tool_calls,
// response_format, chat_template_kwargs, reasoning_effort, the sampling fields (max_tokens over
// `context` is an error) and logprobs / top_logprobs. Errors name the field.
RequestResult<ChatRequest> openai_chat_request(const nlohmann::json& body, int64_t context);

HttpResponse chat_completions(Service& service, const HttpRequest& request);

}  // namespace tern::api

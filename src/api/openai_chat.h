// POST /v1/chat/completions: OpenAI chat messages -> the model's chat template -> engine, and
// the engine's events -> chat.completion / chat.completion.chunk objects.
#pragma once

#include <nlohmann/json.hpp>

#include "api/http_types.h"
#include "base/error.h"

namespace tern::api {

class Service;

// OpenAI messages (system/developer/user/assistant/tool, string or content parts, tool_calls
// with JSON-string arguments) in the Hugging Face chat-template format.
Result<nlohmann::ordered_json> openai_messages_to_template(const nlohmann::json& messages);
// OpenAI `tools` (function tools) in the template format; errors name the bad entry.
Result<nlohmann::ordered_json> openai_tools_to_template(const nlohmann::json& tools);

HttpResponse chat_completions(Service& service, const HttpRequest& request);

}  // namespace tern::api

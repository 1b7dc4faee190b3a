// POST /v1/responses (the OpenAI Responses API as Codex CLI uses it): input items -> a
// ChatRequest (responses_convert.cpp) -> prepare_chat -> engine, and the engine's events -> a
// response object or its stream of response.* events. Responses are kept in memory (bounded,
// least recently used dropped first) so that `previous_response_id` can continue a
// conversation; GET /v1/responses/{id} reads one.
#pragma once

#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "api/chat_request.h"
#include "api/errors.h"
#include "api/http_types.h"
#include "base/error.h"

namespace tern::api {

class Service;

// Stored responses: the conversation's items up to and including the response's output, and
// the response object itself. Thread-safe.
class ResponsesStore {
 public:
  struct Entry {
    nlohmann::ordered_json items;     // input items (previous ones included) + output items
    nlohmann::ordered_json response;  // the final response object
  };
  explicit ResponsesStore(size_t capacity = 256) : capacity_(capacity) {}
  void put(const std::string& id, Entry entry);
  // Marks the entry as recently used.
  std::optional<Entry> get(const std::string& id);
  size_t size();

 private:
  using List = std::list<std::pair<std::string, Entry>>;
  size_t capacity_;
  std::mutex mutex_;
  List order_;  // most recently used first
  std::unordered_map<std::string, List::iterator> index_;
};

// `input` (a string or a list of items) as a list of items: a string becomes one user message.
Result<nlohmann::json> responses_input_items(const nlohmann::json& input);

// Items (message, function_call, function_call_output, reasoning; others are skipped) in the
// Hugging Face chat-template format, after `instructions` as the system message. Leading
// system/developer messages join it; later ones become user turns.
Result<nlohmann::ordered_json> responses_items_to_template(const nlohmann::json& items,
                                                           const std::string& instructions);

// Function tools ({type: "function", name, description, parameters}) after `tool_choice`;
// other tool types (web_search, ...) are left out.
Result<nlohmann::ordered_json> responses_tools_to_template(const nlohmann::json& body);

// The request as a ChatRequest over the conversation's `items` (stored ones included):
// instructions, tools, tool_choice, parallel_tool_calls, reasoning.effort, temperature, top_p,
// max_output_tokens (over `context` is an error). Errors name the field.
RequestResult<ChatRequest> responses_chat_request(const nlohmann::json& body,
                                                  const nlohmann::json& items, int64_t context);

HttpResponse responses_create(Service& service, ResponsesStore& store, const HttpRequest& request);
HttpResponse responses_get(ResponsesStore& store, const HttpRequest& request);

}  // namespace tern::api

#include "api/responses.h"

#include <fmt/format.h>

#include "api/anthropic_blocks.h"
#include "api/chat_preparation.h"
#include "api/errors.h"
#include "api/openai_common.h"
#include "api/responses_assembler.h"
#include "api/service.h"

namespace tern::api {

using nlohmann::ordered_json;
using Body = nlohmann::json;
// Output is built in insertion order ("id", "type" first, as the API writes them).
using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

HttpResponse bad_request(const std::string& message, const std::string& param = "") {
  return error_response(ErrorFlavor::OpenAI, 400, message, param);
}

json usage_json(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}, {"cache_write_tokens", 0}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// What the response object echoes from the request.
struct Echo {
  std::string id;
  int64_t created = 0;
  std::string model;
  json instructions;
  json max_output_tokens;
  json previous_response_id;
  json reasoning;
  json temperature;
  json top_p;
  json text;
  json tool_choice;
  json tools;
  json metadata;
  bool store = true;
  bool parallel_tool_calls = true;
};

json response_object(const Echo& e, const std::string& status, const json& output,
                     const json& usage, const json& incomplete) {
  return {{"id", e.id},
          {"object", "response"},
          {"created_at", e.created},
          {"status", status},
          {"background", false},
          {"error", nullptr},
          {"incomplete_details", incomplete},
          {"instructions", e.instructions},
          {"max_output_tokens", e.max_output_tokens},
          {"model", e.model},
          {"output", output},
          {"parallel_tool_calls", e.parallel_tool_calls},
          {"previous_response_id", e.previous_response_id},
          {"reasoning", e.reasoning},
          {"store", e.store},
          {"temperature", e.temperature},
          {"text", e.text},
          {"tool_choice", e.tool_choice},
          {"tools", e.tools},
          {"top_p", e.top_p},
          {"truncation", "disabled"},
          {"usage", usage},
          {"metadata", e.metadata}};
}

json echo_or(const Body& body, const char* key, json fallback) {
  if (body.contains(key) && !body[key].is_null()) return json(body[key]);
  return fallback;
}

}  // namespace

HttpResponse responses_get(ResponsesStore& store, const HttpRequest& http) {
  const std::string prefix = "/responses/";
  const size_t at = http.path.rfind(prefix);
  const std::string id = at == std::string::npos ? "" : http.path.substr(at + prefix.size());
  auto entry = store.get(id);
  if (!entry) {
    return error_response(ErrorFlavor::OpenAI, 404,
                          fmt::format("no response with id '{}' is stored on this server", id));
  }
  HttpResponse r;
  r.body = dump(entry->response);
  return r;
}

namespace {

// The conversation so far into `items`: the stored items of `previous_response_id`, then
// `input`. Otherwise the 400 or 404 the fields earn.
std::optional<HttpResponse> read_conversation(const Body& body, ResponsesStore& store, json& items,
                                              json& previous_id) {
  if (!body.contains("input")) return bad_request("'input' is required", "input");
  auto input = responses_input_items(body["input"]);
  if (!input) return bad_request(input.error().message, "input");
  items = json::array();
  previous_id = nullptr;
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null()) {
    if (!body["previous_response_id"].is_string())
      return bad_request("'previous_response_id' must be a string", "previous_response_id");
    const std::string prev = body["previous_response_id"].get<std::string>();
    auto entry = store.get(prev);
    if (!entry) {
      return error_response(
          ErrorFlavor::OpenAI, 404,
          fmt::format("Previous response with id '{}' not found (responses are kept in memory; "
                      "the server may have restarted or dropped it)",
                      prev),
          "previous_response_id");
    }
    items = entry->items;
    previous_id = prev;
  }
  for (const auto& item : *input) items.push_back(json(item));
  return std::nullopt;
}

Echo echo_of(const Body& body, const ServiceInfo& info, const json& previous_id) {
  Echo echo;
  echo.id = random_id("resp_");
  echo.created = unix_time();
  echo.model = body.contains("model") && body["model"].is_string()
                   ? body["model"].get<std::string>()
                   : info.model_name;
  const bool instructed = body.contains("instructions") && body["instructions"].is_string() &&
                          !body["instructions"].get<std::string>().empty();
  echo.instructions = instructed ? json(body["instructions"]) : json(nullptr);
  echo.max_output_tokens = echo_or(body, "max_output_tokens", nullptr);
  echo.previous_response_id = previous_id;
  echo.reasoning = echo_or(body, "reasoning", json{{"effort", nullptr}, {"summary", nullptr}});
  echo.temperature = echo_or(body, "temperature", 1.0);
  echo.top_p = echo_or(body, "top_p", 1.0);
  echo.text = echo_or(body, "text", json{{"format", {{"type", "text"}}}});
  echo.tool_choice = echo_or(body, "tool_choice", "auto");
  echo.tools = echo_or(body, "tools", json::array());
  echo.metadata = echo_or(body, "metadata", json::object());
  echo.store = body.value("store", true);
  echo.parallel_tool_calls = body.value("parallel_tool_calls", true);
  return echo;
}

// Ends the response: the final object, stored (with the conversation) unless store is false.
json complete(ResponsesStore& store, const Echo& echo, const json& items, OutputSplitter& splitter,
              ResponseItemAssembler& assembler, const Event& done) {
  for (const auto& piece : splitter.finish()) assembler.add(piece);
  const bool cut = done.finish == FinishReason::Length;
  assembler.finish(cut ? "incomplete" : "completed");
  json incomplete = cut ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  json response = response_object(echo, cut ? "incomplete" : "completed", assembler.output(),
                                  usage_json(done.usage), incomplete);
  if (echo.store) {
    json all = items;
    for (const auto& item : assembler.output()) all.push_back(item);
    store.put(echo.id, {std::move(all), response});
  }
  return response;
}

// The whole response as one object (a 500 when the engine failed).
HttpResponse whole_response(EventStream& events, OutputSplitter& splitter, ResponsesStore& store,
                            const Echo& echo, const json& items) {
  ResponseItemAssembler assembler([](const json&) {});
  Event done;
  while (auto e = events.next()) {
    if (e->type == Event::Type::Text) {
      for (const auto& piece : splitter.feed(e->text)) assembler.add(piece);
    } else {
      done = *e;
    }
  }
  if (done.type == Event::Type::Error) return error_response(ErrorFlavor::OpenAI, 500, done.error);
  HttpResponse r;
  r.body = dump(complete(store, echo, items, splitter, assembler, done));
  return r;
}

// The response as response.* events while it is generated (numbered from 0). A client that goes
// away cancels the generation.
void stream_response(EventStream& events, OutputSplitter& splitter, ResponsesStore& store,
                     const Echo& echo, const json& items, const StreamWriter& write) {
  int64_t sequence = 0;
  bool alive = true;
  auto emit = [&](json event) {
    event["sequence_number"] = sequence++;
    const std::string name = event["type"].get<std::string>();
    if (alive) alive = write(sse_event(dump(event), name));
    if (!alive) events.cancel();
  };
  const json pending = response_object(echo, "in_progress", json::array(), nullptr, nullptr);
  emit({{"type", "response.created"}, {"response", pending}});
  emit({{"type", "response.in_progress"}, {"response", pending}});
  ResponseItemAssembler assembler(emit);
  while (auto e = events.next()) {
    if (e->type == Event::Type::Text) {
      for (const auto& piece : splitter.feed(e->text)) assembler.add(piece);
    } else if (e->type == Event::Type::Error) {
      assembler.finish("incomplete");
      json failed = response_object(echo, "failed", assembler.output(), nullptr, nullptr);
      failed["error"] = {{"code", "server_error"}, {"message", e->error}};
      emit({{"type", "response.failed"}, {"response", failed}});
    } else {
      json response = complete(store, echo, items, splitter, assembler, *e);
      const bool cut = response["status"] == "incomplete";
      emit({{"type", cut ? "response.incomplete" : "response.completed"},
            {"response", std::move(response)}});
    }
  }
}

}  // namespace

HttpResponse responses_create(Service& service, ResponsesStore& store, const HttpRequest& http) {
  Body body = Body::parse(http.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return bad_request("the request body is not a JSON object");
  if (auto rejected = service.reject_model(body)) return *rejected;
  json items;
  json previous_id;
  if (auto rejected = read_conversation(body, store, items, previous_id)) return *rejected;
  const LoadedModel& model = service.engine().model();
  auto chat = responses_chat_request(body, Body(items), model.context);
  if (!chat) return error_response(ErrorFlavor::OpenAI, chat.error());
  auto prepared = prepare_chat(model, *chat, service.info().default_temperature);
  if (!prepared) return error_response(ErrorFlavor::OpenAI, prepared.error());
  const Echo echo = echo_of(body, service.info(), previous_id);
  const bool stream = body.value("stream", false);
  auto splitter = std::make_shared<OutputSplitter>(std::move(prepared->parser));
  auto submitted = service.engine().submit(std::move(prepared->request));
  if (!submitted) {
    return error_response(ErrorFlavor::OpenAI, status_for(submitted.error()),
                          submitted.error().message);
  }
  auto events = *submitted;
  if (!stream) return whole_response(*events, *splitter, store, echo, items);
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = [=, &store](const StreamWriter& write) {
    stream_response(*events, *splitter, store, echo, items, write);
  };
  return r;
}

}  // namespace tern::api

#include "api/openai_chat.h"

#include <fmt/format.h>

#include "api/chat_preparation.h"
#include "api/errors.h"
#include "api/openai_common.h"
#include "api/output_parser.h"
#include "api/service.h"

namespace tern::api {

using nlohmann::json;

namespace {

json logprobs_json(const std::vector<TokenInfo>& tokens) {
  json content = json::array();
  for (const auto& t : tokens) {
    auto entry = [](const TokenLogprob& lp) {
      json bytes = json::array();
      for (unsigned char c : lp.text) bytes.push_back(static_cast<int>(c));
      return json{{"token", lp.text}, {"logprob", lp.logprob}, {"bytes", bytes}};
    };
    json e = entry(t.chosen);
    e["top_logprobs"] = json::array();
    for (const auto& alt : t.top) e["top_logprobs"].push_back(entry(alt));
    content.push_back(e);
  }
  return json{{"content", content}};
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One parser delta as a chat.completion.chunk delta (OpenAI's shapes); null for none.
json chunk_delta(const OutputDelta& d) {
  switch (d.kind) {
    case OutputDelta::Kind::Content:
      return {{"content", d.text}};
    case OutputDelta::Kind::Reasoning:
      return {{"reasoning_content", d.text}};
    case OutputDelta::Kind::ToolCallBegin:
      return {{"tool_calls", json::array({{{"index", d.index},
                                           {"id", d.id},
                                           {"type", "function"},
                                           {"function", {{"name", d.name}, {"arguments", ""}}}}})}};
    case OutputDelta::Kind::ToolCallArguments:
      return {{"tool_calls",
               json::array({{{"index", d.index}, {"function", {{"arguments", d.text}}}}})}};
    case OutputDelta::Kind::ToolCallEnd:
      break;
  }
  return nullptr;
}

// What every object of one completion repeats.
struct CompletionIds {
  std::string id;
  int64_t created = 0;
  std::string model;
};

json chunk(const CompletionIds& ids, const json& delta, const json& finish, const json& logprobs) {
  return json{
      {"id", ids.id},
      {"object", "chat.completion.chunk"},
      {"created", ids.created},
      {"model", ids.model},
      {"choices",
       json::array(
           {{{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}}})}};
}

// A call that ended the output normally is reported as the reason it ended.
std::string finish_reason(bool called, FinishReason finish) {
  return called && finish == FinishReason::Stop ? "tool_calls" : openai_finish_reason(finish);
}

// The whole output as one chat.completion object (a 500 when the engine failed).
HttpResponse completion(EventStream& events, OutputParser& parser, const CompletionIds& ids,
                        bool want_logprobs) {
  ParsedOutput parsed;
  std::vector<TokenInfo> tokens;
  Event done;
  while (auto e = events.next()) {
    if (e->type == Event::Type::Text) {
      parsed.add(parser.push(e->text));
      if (want_logprobs) tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
    } else {
      done = *e;
    }
  }
  if (done.type == Event::Type::Error) return error_response(ErrorFlavor::OpenAI, 500, done.error);
  parsed.add(parser.finish());
  json message = {{"role", "assistant"}};
  message["content"] =
      parsed.content.empty() && !parsed.tool_calls.empty() ? json(nullptr) : json(parsed.content);
  if (!parsed.reasoning.empty()) message["reasoning_content"] = parsed.reasoning;
  if (!parsed.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : parsed.tool_calls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    message["tool_calls"] = calls;
  }
  json choice = {{"index", 0},
                 {"message", message},
                 {"logprobs", want_logprobs ? logprobs_json(tokens) : json(nullptr)},
                 {"finish_reason", finish_reason(!parsed.tool_calls.empty(), done.finish)}};
  json out = {{"id", ids.id},
              {"object", "chat.completion"},
              {"created", ids.created},
              {"model", ids.model},
              {"choices", json::array({choice})},
              {"usage", openai_usage(done.usage)}};
  HttpResponse r;
  r.body = dump(out);
  return r;
}

// The output as chat.completion.chunk events while it is generated, then [DONE]. A client that
// goes away cancels the generation.
void stream_chunks(EventStream& events, OutputParser& parser, const CompletionIds& ids,
                   bool want_logprobs, bool include_usage, const StreamWriter& write) {
  bool alive = write(
      sse_event(dump(chunk(ids, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))));
  bool called = false;
  // Writes the deltas; the event's logprobs ride on the first chunk (or an empty one).
  auto send = [&](const std::vector<OutputDelta>& deltas, const std::vector<TokenInfo>* tokens) {
    json logprobs = tokens != nullptr ? logprobs_json(*tokens) : json(nullptr);
    bool sent = false;
    for (const auto& d : deltas) {
      if (d.kind == OutputDelta::Kind::ToolCallBegin) called = true;
      json delta = chunk_delta(d);
      if (delta.is_null() || !alive) continue;
      alive = write(sse_event(dump(chunk(ids, delta, nullptr, sent ? json(nullptr) : logprobs))));
      sent = true;
    }
    if (!sent && tokens != nullptr && alive)
      alive = write(sse_event(dump(chunk(ids, {{"content", ""}}, nullptr, logprobs))));
  };
  while (auto e = events.next()) {
    if (e->type == Event::Type::Text) {
      send(parser.push(e->text), want_logprobs ? &e->tokens : nullptr);
      if (!alive) events.cancel();
    } else if (e->type == Event::Type::Error) {
      write(sse_event(error_json(ErrorFlavor::OpenAI, 500, e->error)));
    } else {
      send(parser.finish(), nullptr);
      write(sse_event(dump(chunk(ids, json::object(), finish_reason(called, e->finish), nullptr))));
      if (include_usage) {
        json u = chunk(ids, nullptr, nullptr, nullptr);
        u["choices"] = json::array();
        u["usage"] = openai_usage(e->usage);
        write(sse_event(dump(u)));
      }
    }
  }
  write(sse_event("[DONE]"));
}

}  // namespace

HttpResponse chat_completions(Service& service, const HttpRequest& http) {
  json body = json::parse(http.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return error_response(ErrorFlavor::OpenAI, 400, "the request body is not a JSON object");
  }
  if (auto rejected = service.reject_model(body)) return *rejected;
  const LoadedModel& model = service.engine().model();
  auto chat = openai_chat_request(body, model.context);
  if (!chat) return error_response(ErrorFlavor::OpenAI, chat.error());
  auto prepared = prepare_chat(model, *chat, service.info().default_temperature);
  if (!prepared) return error_response(ErrorFlavor::OpenAI, prepared.error());
  const bool want_logprobs = chat->top_logprobs >= 0;
  const bool stream = body.value("stream", false);
  const bool include_usage = body.contains("stream_options") &&
                             body["stream_options"].is_object() &&
                             body["stream_options"].value("include_usage", false);
  std::shared_ptr<OutputParser> parser = std::move(prepared->parser);
  auto submitted = service.engine().submit(std::move(prepared->request));
  if (!submitted) {
    return error_response(ErrorFlavor::OpenAI, status_for(submitted.error()),
                          submitted.error().message);
  }
  auto events = *submitted;
  const CompletionIds ids{random_id("chatcmpl-"), unix_time(), service.info().model_name};
  if (!stream) return completion(*events, *parser, ids, want_logprobs);
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = [=](const StreamWriter& write) {
    stream_chunks(*events, *parser, ids, want_logprobs, include_usage, write);
  };
  return r;
}

}  // namespace tern::api

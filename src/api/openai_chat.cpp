#include "api/openai_chat.h"

#include <fmt/format.h>

#include "api/errors.h"
#include "api/openai_common.h"
#include "api/service.h"
#include "engine/chat_prompt.h"

namespace tern::api {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Text of a content field: a string, or the text parts of an array.
Result<std::string> content_text(const json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    return make_error("{}.content must be a string or an array of parts", where);
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object()) return make_error("{}.content parts must be objects", where);
    const std::string type = part.value("type", "");
    if (type == "text" || type == "input_text" || type == "output_text") {
      if (!part.contains("text") || !part["text"].is_string())
        return make_error("{}.content text part has no text", where);
      text += part["text"].get<std::string>();
    } else {
      return make_error("{}.content part type '{}' is not supported (text only)", where, type);
    }
  }
  return text;
}

}  // namespace

Result<ordered_json> openai_messages_to_template(const json& messages) {
  if (!messages.is_array() || messages.empty())
    return Error{"'messages' must be a non-empty array"};
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return make_error("{} must be an object with a string 'role'", where);
    }
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return make_error("{}.role '{}' is not one of system, developer, user, assistant, tool",
                        where, role);
    }
    auto text = content_text(m.contains("content") ? m["content"] : json(), where);
    if (!text) return text.error();
    ordered_json msg = ordered_json::object();
    msg["role"] = role;
    msg["content"] = *text;
    if (role == "assistant") {
      for (const char* key : {"reasoning_content", "reasoning"}) {
        if (m.contains(key) && m[key].is_string()) msg["reasoning_content"] = m[key];
      }
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (!m["tool_calls"].is_array()) return make_error("{}.tool_calls must be an array", where);
        ordered_json calls = ordered_json::array();
        for (size_t c = 0; c < m["tool_calls"].size(); ++c) {
          const json& call = m["tool_calls"][c];
          const std::string cw = fmt::format("{}.tool_calls[{}]", where, c);
          if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
            return make_error("{} must have a 'function' object", cw);
          }
          const json& fn = call["function"];
          if (!fn.contains("name") || !fn["name"].is_string())
            return make_error("{}.function.name must be a string", cw);
          ordered_json arguments = ordered_json::object();
          if (fn.contains("arguments")) {
            if (fn["arguments"].is_string()) {
              // Templates expect a mapping they can iterate or dump; keep the client's key order.
              arguments = ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
              if (arguments.is_discarded()) {
                return make_error("{}.function.arguments is not valid JSON", cw);
              }
            } else {
              arguments = ordered_json(fn["arguments"]);
            }
          }
          calls.push_back({{"id", call.value("id", fmt::format("call_{}", c))},
                           {"type", "function"},
                           {"function", {{"name", fn["name"]}, {"arguments", arguments}}}});
        }
        msg["tool_calls"] = calls;
      }
    }
    if (role == "tool") {
      if (m.contains("tool_call_id") && m["tool_call_id"].is_string())
        msg["tool_call_id"] = m["tool_call_id"];
      if (m.contains("name") && m["name"].is_string()) msg["name"] = m["name"];
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Result<ordered_json> openai_tools_to_template(const json& tools) {
  ordered_json out = ordered_json::array();
  if (tools.is_null()) return out;
  if (!tools.is_array()) return Error{"'tools' must be an array"};
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object() || t.value("type", "function") != "function" || !t.contains("function") ||
        !t["function"].is_object() || !t["function"].contains("name")) {
      return make_error(
          "tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i);
    }
    out.push_back(ordered_json{{"type", "function"}, {"function", ordered_json(t["function"])}});
  }
  return out;
}

HttpResponse chat_completions(Service& service, const HttpRequest& http) {
  json body = json::parse(http.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return error_response(ErrorFlavor::OpenAI, 400, "the request body is not a JSON object");
  }
  if (!body.contains("messages"))
    return error_response(ErrorFlavor::OpenAI, 400, "'messages' is required", "messages");
  auto messages = openai_messages_to_template(body["messages"]);
  if (!messages)
    return error_response(ErrorFlavor::OpenAI, 400, messages.error().message, "messages");
  ordered_json tools = ordered_json::array();
  const std::string tool_choice = body.contains("tool_choice") && body["tool_choice"].is_string()
                                      ? body["tool_choice"].get<std::string>()
                                      : "auto";
  if (body.contains("tools") && tool_choice != "none") {
    auto t = openai_tools_to_template(body["tools"]);
    if (!t) return error_response(ErrorFlavor::OpenAI, 400, t.error().message, "tools");
    tools = std::move(*t);
  }
  Engine& engine = service.engine();
  auto formatter = ChatFormatter::create(engine.model());
  if (!formatter) return error_response(ErrorFlavor::OpenAI, 400, formatter.error().message);
  ChatPromptOptions po;
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
    po.extra = ordered_json(body["chat_template_kwargs"]);
    if (po.extra.contains("enable_thinking") && po.extra["enable_thinking"].is_boolean()) {
      po.enable_thinking = po.extra["enable_thinking"].get<bool>();
    }
  }
  if (body.contains("reasoning_effort") && body["reasoning_effort"].is_string()) {
    po.enable_thinking = body["reasoning_effort"].get<std::string>() != "none";
  }
  auto prompt = formatter->tokens(*messages, tools, po);
  if (!prompt) return error_response(ErrorFlavor::OpenAI, 400, prompt.error().message);

  Request request;
  request.prompt = std::move(*prompt);
  if (auto ok = read_sampling(body, request, engine.model().context); !ok) {
    return error_response(ErrorFlavor::OpenAI, 400, ok.error().message);
  }
  request.options.max_tokens =
      std::min<int64_t>(request.options.max_tokens,
                        engine.model().context - static_cast<int64_t>(request.prompt.size()));
  const bool want_logprobs = body.value("logprobs", false);
  if (want_logprobs) {
    request.top_logprobs = body.contains("top_logprobs") && body["top_logprobs"].is_number_integer()
                               ? std::clamp(body["top_logprobs"].get<int32_t>(), 0, 20)
                               : 0;
  }
  const bool stream = body.value("stream", false);
  const bool include_usage = body.contains("stream_options") &&
                             body["stream_options"].is_object() &&
                             body["stream_options"].value("include_usage", false);
  auto submitted = engine.submit(std::move(request));
  if (!submitted) return error_response(ErrorFlavor::OpenAI, 400, submitted.error().message);
  auto events = *submitted;

  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_time();
  const std::string model = service.info().model_name;
  auto logprobs_json = [](const std::vector<TokenInfo>& tokens) {
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
  };
  auto dump = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };

  if (!stream) {
    std::string text;
    std::vector<TokenInfo> tokens;
    Event done;
    while (auto e = events->next()) {
      if (e->type == Event::Type::Text) {
        text += e->text;
        if (want_logprobs) tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
      } else {
        done = *e;
      }
    }
    if (done.type == Event::Type::Error)
      return error_response(ErrorFlavor::OpenAI, 500, done.error);
    json choice = {{"index", 0},
                   {"message", {{"role", "assistant"}, {"content", text}}},
                   {"logprobs", want_logprobs ? logprobs_json(tokens) : json(nullptr)},
                   {"finish_reason", openai_finish_reason(done.finish)}};
    json out = {
        {"id", id},       {"object", "chat.completion"},      {"created", created},
        {"model", model}, {"choices", json::array({choice})}, {"usage", openai_usage(done.usage)}};
    HttpResponse r;
    r.body = dump(out);
    return r;
  }
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = [=](const StreamWriter& write) {
    auto chunk = [&](const json& delta, const json& finish, const json& logprobs) {
      return json{{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({{{"index", 0},
                                            {"delta", delta},
                                            {"logprobs", logprobs},
                                            {"finish_reason", finish}}})}};
    };
    bool alive =
        write(sse_event(dump(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))));
    while (auto e = events->next()) {
      if (e->type == Event::Type::Text) {
        if (e->text.empty() && !want_logprobs) continue;
        if (alive) {
          alive = write(
              sse_event(dump(chunk({{"content", e->text}}, nullptr,
                                   want_logprobs ? logprobs_json(e->tokens) : json(nullptr)))));
        }
        if (!alive) events->cancel();
      } else if (e->type == Event::Type::Error) {
        write(sse_event(error_json(ErrorFlavor::OpenAI, 500, e->error)));
      } else {
        write(sse_event(dump(chunk(json::object(), openai_finish_reason(e->finish), nullptr))));
        if (include_usage) {
          json u = {{"id", id},
                    {"object", "chat.completion.chunk"},
                    {"created", created},
                    {"model", model},
                    {"choices", json::array()},
                    {"usage", openai_usage(e->usage)}};
          write(sse_event(dump(u)));
        }
      }
    }
    write(sse_event("[DONE]"));
  };
  return r;
}

}  // namespace tern::api

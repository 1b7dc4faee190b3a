#include "api/openai_chat.h"

#include <fmt/format.h>

#include "api/errors.h"
#include "api/openai_common.h"
#include "api/output_constraint.h"
#include "api/output_parser.h"
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

namespace {

struct ToolChoice {
  enum class Mode { None, Auto, Required, Named };
  Mode mode = Mode::Auto;
  std::string name;  // Named
};

// "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}
Result<ToolChoice> read_tool_choice(const json& body, const ordered_json& tools) {
  ToolChoice c;
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return c;
  const json& t = body["tool_choice"];
  if (t.is_string()) {
    const std::string s = t.get<std::string>();
    if (s == "none") {
      c.mode = ToolChoice::Mode::None;
    } else if (s == "auto") {
      c.mode = ToolChoice::Mode::Auto;
    } else if (s == "required") {
      c.mode = ToolChoice::Mode::Required;
    } else {
      return make_error("'tool_choice' '{}' is not one of none, auto, required", s);
    }
  } else if (t.is_object() && t.contains("function") && t["function"].is_object() &&
             t["function"].contains("name") && t["function"]["name"].is_string()) {
    c.mode = ToolChoice::Mode::Named;
    c.name = t["function"]["name"].get<std::string>();
    bool known = false;
    for (const auto& info : tool_infos(tools)) known = known || info.name == c.name;
    if (!known) return make_error("'tool_choice' names '{}', which is not in 'tools'", c.name);
  } else {
    return Error{
        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
        "\"function\": {\"name\": ...}}"};
  }
  if ((c.mode == ToolChoice::Mode::Required || c.mode == ToolChoice::Mode::Named) &&
      tools.empty()) {
    return Error{"'tool_choice' requires a tool call but 'tools' is empty"};
  }
  return c;
}

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

}  // namespace

HttpResponse chat_completions(Service& service, const HttpRequest& http) {
  json body = json::parse(http.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return error_response(ErrorFlavor::OpenAI, 400, "the request body is not a JSON object");
  }
  if (auto rejected = service.reject_model(body)) return *rejected;
  if (!body.contains("messages"))
    return error_response(ErrorFlavor::OpenAI, 400, "'messages' is required", "messages");
  auto messages = openai_messages_to_template(body["messages"]);
  if (!messages)
    return error_response(ErrorFlavor::OpenAI, 400, messages.error().message, "messages");
  ordered_json tools = ordered_json::array();
  if (body.contains("tools")) {
    auto t = openai_tools_to_template(body["tools"]);
    if (!t) return error_response(ErrorFlavor::OpenAI, 400, t.error().message, "tools");
    tools = std::move(*t);
  }
  auto choice = read_tool_choice(body, tools);
  if (!choice)
    return error_response(ErrorFlavor::OpenAI, 400, choice.error().message, "tool_choice");
  if (choice->mode == ToolChoice::Mode::None) tools = ordered_json::array();  // none: no tools
  auto output_constraint = read_response_format(body);
  if (!output_constraint)
    return error_response(ErrorFlavor::OpenAI, 400, output_constraint.error().message,
                          "response_format");

  Engine& engine = service.engine();
  auto formatter = ChatFormatter::create(engine.model());
  if (!formatter) return error_response(ErrorFlavor::OpenAI, 400, formatter.error().message);
  OutputFormat format = detect_output_format(formatter->source());
  // A template without a call format of its own: calls are read (and forced) as Hermes calls.
  if (format.tools == ToolCallFormat::None && !tools.empty()) format.tools = ToolCallFormat::Hermes;
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
  // A forced call or format is forced from the first token: no reasoning before it.
  const bool forced_call =
      choice->mode == ToolChoice::Mode::Required || choice->mode == ToolChoice::Mode::Named;
  if (forced_call || output_constraint->kind != OutputConstraint::Kind::None) {
    po.enable_thinking = false;
  }
  auto rendered = formatter->render(*messages, tools, po);
  if (!rendered) return error_response(ErrorFlavor::OpenAI, 400, rendered.error().message);

  Request request;
  request.prompt = engine.model().tokenizer->encode(*rendered, false, true);
  if ((!body.contains("temperature") || body["temperature"].is_null()) &&
      service.info().default_temperature)
    body["temperature"] = *service.info().default_temperature;
  if (auto ok = read_sampling(body, request, engine.model().context, engine.model().context); !ok) {
    return error_response(ErrorFlavor::OpenAI, 400, ok.error().message);
  }
  request.options.max_tokens =
      std::min<int64_t>(request.options.max_tokens,
                        engine.model().context - static_cast<int64_t>(request.prompt.size()));
  if (forced_call) {
    output_constraint->kind = OutputConstraint::Kind::ToolCall;
    for (auto& t : tool_infos(tools)) {
      if (choice->mode == ToolChoice::Mode::Required || t.name == choice->name)
        output_constraint->tools.push_back(std::move(t));
    }
  }
  if (output_constraint->kind != OutputConstraint::Kind::None) {
    auto c = make_output_constraint(*engine.model().tokenizer, format, *output_constraint);
    if (!c) return error_response(ErrorFlavor::OpenAI, 400, c.error().message, "response_format");
    request.constraint = std::move(*c);
  }
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
  ParserOptions parser_options;
  parser_options.tools = tool_infos(tools);
  parser_options.in_reasoning = prompt_opens_reasoning(format, *rendered);
  std::shared_ptr<OutputParser> parser = make_output_parser(format, std::move(parser_options));

  auto submitted = engine.submit(std::move(request));
  if (!submitted) {
    return error_response(ErrorFlavor::OpenAI, status_for(submitted.error()),
                          submitted.error().message);
  }
  auto events = *submitted;

  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_time();
  const std::string model = service.info().model_name;

  if (!stream) {
    ParsedOutput parsed;
    std::vector<TokenInfo> tokens;
    Event done;
    while (auto e = events->next()) {
      if (e->type == Event::Type::Text) {
        parsed.add(parser->push(e->text));
        if (want_logprobs) tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
      } else {
        done = *e;
      }
    }
    if (done.type == Event::Type::Error)
      return error_response(ErrorFlavor::OpenAI, 500, done.error);
    parsed.add(parser->finish());
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
    const std::string finish = !parsed.tool_calls.empty() && done.finish == FinishReason::Stop
                                   ? "tool_calls"
                                   : openai_finish_reason(done.finish);
    json choice_json = {{"index", 0},
                        {"message", message},
                        {"logprobs", want_logprobs ? logprobs_json(tokens) : json(nullptr)},
                        {"finish_reason", finish}};
    json out = {{"id", id},
                {"object", "chat.completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array({choice_json})},
                {"usage", openai_usage(done.usage)}};
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
    bool called = false;
    // Writes the deltas; the event's logprobs ride on the first chunk (or an empty one).
    auto send = [&](const std::vector<OutputDelta>& deltas, const std::vector<TokenInfo>* tokens) {
      json logprobs = tokens != nullptr ? logprobs_json(*tokens) : json(nullptr);
      bool sent = false;
      for (const auto& d : deltas) {
        if (d.kind == OutputDelta::Kind::ToolCallBegin) called = true;
        json delta = chunk_delta(d);
        if (delta.is_null() || !alive) continue;
        alive = write(sse_event(dump(chunk(delta, nullptr, sent ? json(nullptr) : logprobs))));
        sent = true;
      }
      if (!sent && tokens != nullptr && alive)
        alive = write(sse_event(dump(chunk({{"content", ""}}, nullptr, logprobs))));
    };
    while (auto e = events->next()) {
      if (e->type == Event::Type::Text) {
        send(parser->push(e->text), want_logprobs ? &e->tokens : nullptr);
        if (!alive) events->cancel();
      } else if (e->type == Event::Type::Error) {
        write(sse_event(error_json(ErrorFlavor::OpenAI, 500, e->error)));
      } else {
        send(parser->finish(), nullptr);
        const std::string finish = called && e->finish == FinishReason::Stop
                                       ? "tool_calls"
                                       : openai_finish_reason(e->finish);
        write(sse_event(dump(chunk(json::object(), finish, nullptr))));
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

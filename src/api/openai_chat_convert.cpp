// OpenAI chat completion request bodies -> the neutral ChatRequest (messages and tools in the
// Hugging Face chat-template format).
#include <fmt/format.h>

#include <algorithm>

#include "api/openai_chat.h"
#include "api/openai_common.h"
#include "api/output_constraint.h"

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

}  // namespace

RequestResult<ChatRequest> openai_chat_request(const json& body, int64_t context) {
  ChatRequest chat;
  if (!body.contains("messages")) return RequestError{"'messages' is required", "messages"};
  auto messages = openai_messages_to_template(body["messages"]);
  if (!messages) return {messages.error(), "messages"};
  chat.messages = std::move(*messages);
  if (body.contains("tools")) {
    auto tools = openai_tools_to_template(body["tools"]);
    if (!tools) return {tools.error(), "tools"};
    chat.tools = std::move(*tools);
  }
  auto choice = read_tool_choice(body, chat.tools);
  if (!choice) return {choice.error(), "tool_choice"};
  chat.tool_choice = std::move(*choice);
  if (body.contains("parallel_tool_calls") && body["parallel_tool_calls"].is_boolean())
    chat.parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  auto format = read_response_format(body);
  if (!format) return {format.error(), "response_format"};
  chat.response_format = std::move(*format);
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
    chat.template_variables = ordered_json(body["chat_template_kwargs"]);
    const ordered_json& vars = chat.template_variables;
    if (vars.contains("enable_thinking") && vars["enable_thinking"].is_boolean())
      chat.thinking = vars["enable_thinking"].get<bool>();
  }
  if (body.contains("reasoning_effort") && body["reasoning_effort"].is_string())
    chat.thinking = body["reasoning_effort"].get<std::string>() != "none";
  auto sampling = read_sampling(body, context);
  if (!sampling) return sampling.error();
  chat.sampling = std::move(*sampling);
  if (body.value("logprobs", false)) {
    chat.top_logprobs = body.contains("top_logprobs") && body["top_logprobs"].is_number_integer()
                            ? std::clamp(body["top_logprobs"].get<int32_t>(), 0, 20)
                            : 0;
  }
  return chat;
}

}  // namespace tern::api

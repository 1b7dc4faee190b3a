// Anthropic request bodies -> the neutral ChatRequest (messages and tools in the Hugging Face
// chat-template format).
#include <algorithm>

#include <fmt/format.h>

#include "api/anthropic_messages.h"
#include "api/openai_common.h"
#include "api/output_parser.h"

namespace tern::api {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr const char* kClientAttributionPrefix = "x-anthropic-billing-header:";

// Text of a content field that may be a string or a list of blocks; only text blocks count.
Result<std::string> blocks_text(const json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    return make_error("{} must be a string or an array of content blocks", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return make_error("{}[{}] must be an object with a string 'type'", where, i);
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        return make_error("{}[{}].text must be a string", where, i);
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "image" || type == "document") {
      return make_error("{}[{}]: '{}' blocks are not supported by this server (text only)", where,
                        i, type);
    }
    // Other block types (search results, citations' sources...) carry no text we can use.
  }
  return text;
}

// Appends `msg` to `out`, merging it into the previous message when both are plain user turns or
// both are assistant turns (the Messages API allows consecutive turns; many templates do not).
void append_message(ordered_json& out, ordered_json msg) {
  if (!out.empty()) {
    ordered_json& last = out.back();
    const std::string role = msg["role"].get<std::string>();
    if (last["role"] == role && (role == "user" || role == "assistant")) {
      std::string a = last["content"].get<std::string>();
      const std::string b = msg["content"].get<std::string>();
      if (!a.empty() && !b.empty()) a += "\n\n";
      last["content"] = a + b;
      if (msg.contains("tool_calls")) {
        if (!last.contains("tool_calls")) last["tool_calls"] = ordered_json::array();
        for (auto& c : msg["tool_calls"]) last["tool_calls"].push_back(c);
      }
      if (msg.contains("reasoning_content")) {
        std::string r = last.value("reasoning_content", "");
        last["reasoning_content"] = r + msg["reasoning_content"].get<std::string>();
      }
      return;
    }
  }
  out.push_back(std::move(msg));
}

Result<void> convert_user(const json& content, const std::string& where, ordered_json& out) {
  if (content.is_string()) {
    append_message(out, ordered_json{{"role", "user"}, {"content", content.get<std::string>()}});
    return {};
  }
  if (!content.is_array()) return make_error("{}.content must be a string or an array", where);
  std::string text;
  auto flush_text = [&] {
    if (text.empty()) return;
    append_message(out, ordered_json{{"role", "user"}, {"content", text}});
    text.clear();
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string bw = fmt::format("{}.content[{}]", where, i);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return make_error("{} must be an object with a string 'type'", bw);
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        return make_error("{}.text must be a string", bw);
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "tool_result") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return make_error("{}.tool_use_id must be a string", bw);
      auto result = blocks_text(b.contains("content") ? b["content"] : json(), bw + ".content");
      if (!result) return result.error();
      std::string body = std::move(*result);
      if (b.value("is_error", false)) body = "Error: " + body;
      flush_text();
      out.push_back(
          ordered_json{{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", body}});
    } else if (type == "image" || type == "document") {
      return make_error("{}: '{}' blocks are not supported by this server (text only)", bw, type);
    } else {
      // search_result, container_upload, ...: nothing a text model can use.
    }
  }
  flush_text();
  return {};
}

Result<void> convert_assistant(const json& content, const std::string& where, ordered_json& out) {
  ordered_json msg = {{"role", "assistant"}, {"content", ""}};
  if (content.is_string()) {
    msg["content"] = content.get<std::string>();
    append_message(out, std::move(msg));
    return {};
  }
  if (!content.is_array()) return make_error("{}.content must be a string or an array", where);
  std::string text;
  std::string reasoning;
  ordered_json calls = ordered_json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string bw = fmt::format("{}.content[{}]", where, i);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return make_error("{} must be an object with a string 'type'", bw);
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        return make_error("{}.text must be a string", bw);
      text += b["text"].get<std::string>();
    } else if (type == "thinking") {
      if (b.contains("thinking") && b["thinking"].is_string())
        reasoning += b["thinking"].get<std::string>();
    } else if (type == "tool_use") {
      if (!b.contains("name") || !b["name"].is_string())
        return make_error("{}.name must be a string", bw);
      if (!b.contains("id") || !b["id"].is_string())
        return make_error("{}.id must be a string", bw);
      ordered_json input = ordered_json::object();
      if (b.contains("input") && !b["input"].is_null()) {
        if (!b["input"].is_object()) return make_error("{}.input must be an object", bw);
        input = ordered_json(b["input"]);
      }
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input}}}});
    }
    // redacted_thinking, server_tool_use, web_search_tool_result, ...: nothing to replay.
  }
  msg["content"] = text;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = calls;
  append_message(out, std::move(msg));
  return {};
}

// Claude Code sends "system" messages among the turns (its environment block, with the working
// directory and today's date, after the first user message). Until the first assistant turn they
// join the system prompt: the user's question then stays the last thing before the reply (a small
// model otherwise answers the environment block instead), and since such a block sits before the
// first reply in every later request of the session, the prompt's first tokens stay the same from
// turn to turn. Later ones become user text in place, since many chat templates allow a system
// message only first, and moving one to the front would change the first tokens of a long
// conversation (and so defeat prefix reuse).
Result<void> convert_system_message(const json& content, const std::string& where,
                                    ordered_json& out) {
  auto text = blocks_text(content, where + ".content");
  if (!text) return text.error();
  if (text->empty()) return {};
  const bool before_replies = std::none_of(
      out.begin(), out.end(), [](const ordered_json& m) { return m["role"] == "assistant"; });
  if (!before_replies) {
    append_message(out, ordered_json{{"role", "user"}, {"content", *text}});
  } else if (out.empty() || out[0]["role"] != "system") {
    out.insert(out.begin(), ordered_json{{"role", "system"}, {"content", *text}});
  } else {
    out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + *text;
  }
  return {};
}

// Claude Code puts a billing line ("x-anthropic-billing-header: cc_version=...; cch=...;") at the
// head of its system prompt, with a hash that changes on every request. It is metadata for the
// hosted service, not an instruction, and left in it would change the first tokens of every
// prompt, so that no turn could reuse the previous turn's KV. It is dropped.
bool is_client_attribution(const std::string& text) {
  return text.rfind(kClientAttributionPrefix, 0) == 0;
}

json without_client_attribution(const json& system) {
  if (system.is_string()) {
    const std::string text = system.get<std::string>();
    if (!is_client_attribution(text)) return system;
    const size_t end = text.find('\n');
    return end == std::string::npos ? std::string() : text.substr(end + 1);
  }
  if (!system.is_array()) return system;
  json kept = json::array();
  for (const auto& b : system) {
    const bool attribution = b.is_object() && b.value("type", "") == "text" && b.contains("text") &&
                             b["text"].is_string() &&
                             is_client_attribution(b["text"].get<std::string>());
    if (!attribution) kept.push_back(b);
  }
  return kept;
}

}  // namespace

Result<ordered_json> anthropic_messages_to_template(const json& body) {
  ordered_json out = ordered_json::array();
  if (body.contains("system") && !body["system"].is_null()) {
    auto system = blocks_text(without_client_attribution(body["system"]), "system");
    if (!system) return system.error();
    if (!system->empty()) out.push_back({{"role", "system"}, {"content", *system}});
  }
  if (!body.contains("messages")) return Error{"messages: field required"};
  const json& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) return Error{"messages: must be a non-empty array"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = fmt::format("messages.{}", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return make_error("{}: must be an object with a string 'role'", where);
    if (!m.contains("content")) return make_error("{}.content: field required", where);
    const std::string role = m["role"].get<std::string>();
    if (role == "user") {
      TERN_TRY(convert_user(m["content"], where, out));
    } else if (role == "assistant") {
      TERN_TRY(convert_assistant(m["content"], where, out));
    } else if (role == "system") {
      TERN_TRY(convert_system_message(m["content"], where, out));
    } else {
      return make_error("{}.role: '{}' is not one of 'user', 'assistant', 'system'", where, role);
    }
  }
  return out;
}

namespace {

// {"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}; `any` and
// `tool` are OpenAI's "required" and named choice.
Result<ToolChoice> read_tool_choice(const json& body, bool& parallel_tool_calls) {
  ToolChoice c;
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return c;
  const json& tc = body["tool_choice"];
  if (!tc.is_object() || !tc.contains("type") || !tc["type"].is_string())
    return Error{"tool_choice: must be an object with a 'type' (auto, any, tool, none)"};
  const std::string type = tc["type"].get<std::string>();
  if (type == "none") {
    c.mode = ToolChoice::Mode::None;
  } else if (type == "any") {
    c.mode = ToolChoice::Mode::Required;
  } else if (type == "tool") {
    if (!tc.contains("name") || !tc["name"].is_string())
      return Error{"tool_choice.name: required when tool_choice.type is 'tool'"};
    c.mode = ToolChoice::Mode::Named;
    c.name = tc["name"].get<std::string>();
  } else if (type != "auto") {
    return make_error("tool_choice.type: '{}' is not one of auto, any, tool, none", type);
  }
  if (tc.contains("disable_parallel_tool_use") && tc["disable_parallel_tool_use"].is_boolean())
    parallel_tool_calls = !tc["disable_parallel_tool_use"].get<bool>();
  return c;
}

// `thinking`: {"type": "enabled" | "adaptive" | "disabled", ...}; without it no thinking (the
// Messages API thinks only when asked).
Result<bool> read_thinking(const json& body) {
  if (!body.contains("thinking") || body["thinking"].is_null()) return false;
  const json& t = body["thinking"];
  if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
    return Error{"thinking: must be an object with a 'type' (enabled, disabled)"};
  const std::string type = t["type"].get<std::string>();
  if (type == "enabled" || type == "adaptive") return true;
  if (type != "disabled")
    return make_error("thinking.type: '{}' is not one of enabled, disabled", type);
  return false;
}

}  // namespace

Result<ordered_json> anthropic_tools_to_template(const json& tools) {
  ordered_json out = ordered_json::array();
  if (!tools.is_array()) return Error{"tools: must be an array"};
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      return make_error("tools.{}.name: field required", i);
    const std::string type =
        t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "custom";
    if (!t.contains("input_schema")) {
      if (type != "custom") continue;  // a server tool (web_search_..., bash_...): not ours to run
      return make_error("tools.{}.input_schema: field required", i);
    }
    if (!t["input_schema"].is_object())
      return make_error("tools.{}.input_schema: must be a JSON schema object", i);
    ordered_json fn = {{"name", t["name"]}};
    if (t.contains("description") && t["description"].is_string())
      fn["description"] = t["description"];
    fn["parameters"] = ordered_json(t["input_schema"]);
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

Result<ChatRequest> anthropic_conversation(const json& body) {
  ChatRequest chat;
  auto messages = anthropic_messages_to_template(body);
  if (!messages) return messages.error();
  chat.messages = std::move(*messages);
  auto choice = read_tool_choice(body, chat.parallel_tool_calls);
  if (!choice) return choice.error();
  chat.tool_choice = std::move(*choice);
  const std::string& forced = chat.tool_choice.name;
  const bool has_tools = body.contains("tools") && !body["tools"].is_null();
  if (!has_tools && !forced.empty())
    return make_error("tool_choice.name: no tool named '{}' in tools", forced);
  if (has_tools && !body["tools"].is_array()) return Error{"tools: must be an array"};
  // tool_choice none: the tools are not offered, so not read either.
  if (has_tools && chat.tool_choice.mode != ToolChoice::Mode::None) {
    auto tools = anthropic_tools_to_template(body["tools"]);
    if (!tools) return tools.error();
    chat.tools = std::move(*tools);
  }
  if (!forced.empty()) {
    const auto infos = tool_infos(chat.tools);
    if (std::none_of(infos.begin(), infos.end(),
                     [&](const ToolInfo& t) { return t.name == forced; }))
      return make_error("tool_choice.name: no tool named '{}' in tools", forced);
  }
  // `any` with nothing to call (only server tools, or none): nothing to force.
  if (chat.tool_choice.mode == ToolChoice::Mode::Required && chat.tools.empty())
    chat.tool_choice.mode = ToolChoice::Mode::Auto;
  auto thinking = read_thinking(body);
  if (!thinking) return thinking.error();
  chat.thinking = *thinking;
  return chat;
}

Result<ChatRequest> anthropic_chat_request(const json& body) {
  if (!body.contains("max_tokens")) return Error{"max_tokens: field required"};
  if (!body["max_tokens"].is_number_integer() || body["max_tokens"].get<int64_t>() < 1)
    return Error{"max_tokens: must be a positive integer"};
  auto chat = anthropic_conversation(body);
  if (!chat) return chat.error();
  // Only the sampling fields the Messages API has; its stop list is `stop_sequences`.
  json sampling = {{"max_tokens", body["max_tokens"]}};
  for (const char* key : {"temperature", "top_p", "top_k"}) {
    if (body.contains(key)) sampling[key] = body[key];
  }
  auto read = read_sampling(sampling);
  if (!read) return read.error();
  chat->sampling = std::move(*read);
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
    const json& stops = body["stop_sequences"];
    if (!stops.is_array()) return Error{"stop_sequences: must be an array of strings"};
    for (const auto& s : stops) {
      if (!s.is_string()) return Error{"stop_sequences: must be an array of strings"};
      if (!s.get<std::string>().empty()) chat->sampling.stop.push_back(s.get<std::string>());
    }
  }
  return chat;
}

}  // namespace tern::api

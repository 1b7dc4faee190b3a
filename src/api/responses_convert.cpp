// Responses API input items and tools -> the neutral ChatRequest (messages and tools in the
// Hugging Face chat-template format); the store.
#include <fmt/format.h>

#include "api/openai_common.h"
#include "api/responses.h"

namespace tern::api {

using nlohmann::json;
using nlohmann::ordered_json;

void ResponsesStore::put(const std::string& id, Entry entry) {
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(id); it != index_.end()) {
    order_.erase(it->second);
    index_.erase(it);
  }
  order_.emplace_front(id, std::move(entry));
  index_[id] = order_.begin();
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

std::optional<ResponsesStore::Entry> ResponsesStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->second;
}

size_t ResponsesStore::size() {
  std::lock_guard lock(mutex_);
  return order_.size();
}

namespace {

// Text of a message's content: a string or parts (input_text, output_text, refusal).
Result<std::string> parts_text(const json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return make_error("{} must be a string or an array of parts", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    if (!part.is_object()) return make_error("{}[{}] must be an object", where, i);
    const std::string type = part.value("type", "");
    if (type == "input_text" || type == "output_text" || type == "text" ||
        type == "reasoning_text" || type == "summary_text") {
      if (!part.contains("text") || !part["text"].is_string())
        return make_error("{}[{}].text must be a string", where, i);
      text += part["text"].get<std::string>();
    } else if (type == "refusal") {
      if (part.contains("refusal") && part["refusal"].is_string())
        text += part["refusal"].get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      return make_error("{}[{}]: '{}' is not supported by this server (text only)", where, i, type);
    } else {
      return make_error("{}[{}].type '{}' is not a known content part", where, i, type);
    }
  }
  return text;
}

// The assistant message that a function call or reasoning attaches to: the last message when it
// is an assistant turn, else a new empty one.
ordered_json& assistant_turn(ordered_json& out) {
  if (out.empty() || out.back()["role"] != "assistant")
    out.push_back({{"role", "assistant"}, {"content", ""}});
  return out.back();
}

}  // namespace

Result<json> responses_input_items(const json& input) {
  if (input.is_string()) {
    return json::array({{{"type", "message"},
                         {"role", "user"},
                         {"content", json::array({{{"type", "input_text"},
                                                   {"text", input.get<std::string>()}}})}}});
  }
  if (!input.is_array()) return Error{"'input' must be a string or an array of items"};
  for (size_t i = 0; i < input.size(); ++i) {
    if (!input[i].is_object()) return make_error("input[{}] must be an object", i);
  }
  return input;
}

Result<ordered_json> responses_items_to_template(const json& items,
                                                 const std::string& instructions) {
  ordered_json out = ordered_json::array();
  std::string system = instructions;
  bool leading = true;    // no user/assistant/tool turn yet
  std::string reasoning;  // from reasoning items, for the next assistant turn
  auto take_reasoning = [&](ordered_json& msg) {
    if (reasoning.empty()) return;
    msg["reasoning_content"] = msg.value("reasoning_content", "") + reasoning;
    reasoning.clear();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const json& item = items[i];
    const std::string where = fmt::format("input[{}]", i);
    std::string type = item.contains("type") && item["type"].is_string()
                           ? item["type"].get<std::string>()
                           : (item.contains("role") ? "message" : "");
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string())
        return make_error("{}.role must be a string", where);
      std::string role = item["role"].get<std::string>();
      auto text =
          parts_text(item.contains("content") ? item["content"] : json(), where + ".content");
      if (!text) return text.error();
      if (role == "system" || role == "developer") {
        if (leading) {
          if (!system.empty() && !text->empty()) system += "\n\n";
          system += *text;
          continue;
        }
        role = "user";
      } else if (role != "user" && role != "assistant") {
        return make_error("{}.role '{}' is not one of user, assistant, system, developer", where,
                          role);
      }
      leading = false;
      if (role == "assistant") {
        ordered_json& msg = assistant_turn(out);
        if (msg.contains("tool_calls")) {
          out.push_back({{"role", "assistant"}, {"content", *text}});
        } else {
          msg["content"] = msg["content"].get<std::string>() + *text;
        }
        take_reasoning(out.back());
      } else {
        out.push_back({{"role", "user"}, {"content", *text}});
      }
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"}) {
        if (!item.contains(key) || !item[key].is_string())
          return make_error("{}.{} must be a string", where, key);
      }
      ordered_json arguments =
          ordered_json::parse(item["arguments"].get<std::string>(), nullptr, false);
      if (arguments.is_discarded()) arguments = ordered_json::object();
      leading = false;
      ordered_json& msg = assistant_turn(out);
      take_reasoning(msg);
      if (!msg.contains("tool_calls")) msg["tool_calls"] = ordered_json::array();
      msg["tool_calls"].push_back(
          {{"id", item["call_id"]},
           {"type", "function"},
           {"function", {{"name", item["name"]}, {"arguments", arguments}}}});
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        return make_error("{}.call_id must be a string", where);
      auto text = parts_text(item.contains("output") ? item["output"] : json(), where + ".output");
      if (!text) return text.error();
      leading = false;
      out.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", *text}});
    } else if (type == "reasoning") {
      for (const char* key : {"content", "summary"}) {
        if (!item.contains(key) || !item[key].is_array() || item[key].empty()) continue;
        auto text = parts_text(item[key], fmt::format("{}.{}", where, key));
        if (!text) return text.error();
        reasoning += *text;
        break;  // the full text when present, else the summary
      }
    } else if (type.empty()) {
      return make_error("{} has no 'type'", where);
    }
    // item_reference, web_search_call, custom_tool_call, ...: nothing this server produced.
  }
  if (out.empty()) return Error{"'input' holds no message, function call or call output"};
  if (!system.empty())
    out.insert(out.begin(), ordered_json{{"role", "system"}, {"content", system}});
  return out;
}

Result<ordered_json> responses_tools_to_template(const json& body) {
  ordered_json out = ordered_json::array();
  if (!body.contains("tools") || body["tools"].is_null()) return out;
  if (!body["tools"].is_array()) return Error{"'tools' must be an array"};
  std::string forced;
  if (body.contains("tool_choice")) {
    const json& tc = body["tool_choice"];
    if (tc.is_string()) {
      const std::string choice = tc.get<std::string>();
      if (choice == "none") return out;
      if (choice != "auto" && choice != "required")
        return make_error("tool_choice '{}' is not one of none, auto, required", choice);
    } else if (tc.is_object() && tc.value("type", "") == "function") {
      if (!tc.contains("name") || !tc["name"].is_string())
        return Error{"tool_choice.name must be a string"};
      forced = tc["name"].get<std::string>();
    }
  }
  const json& tools = body["tools"];
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object()) return make_error("tools[{}] must be an object", i);
    if (t.value("type", "") != "function") continue;  // web_search, file_search, custom, ...
    if (!t.contains("name") || !t["name"].is_string())
      return make_error("tools[{}].name must be a string", i);
    const std::string name = t["name"].get<std::string>();
    if (!forced.empty() && name != forced) continue;
    ordered_json fn = {{"name", name}};
    if (t.contains("description") && t["description"].is_string())
      fn["description"] = t["description"];
    fn["parameters"] =
        t.contains("parameters") && t["parameters"].is_object()
            ? ordered_json(t["parameters"])
            : ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  if (!forced.empty() && out.empty())
    return make_error("tool_choice names '{}', which is not a function in tools", forced);
  return out;
}

RequestResult<ChatRequest> responses_chat_request(const json& body, const json& items,
                                                  int64_t context) {
  ChatRequest chat;
  std::string instructions;
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string())
      return RequestError{"'instructions' must be a string", "instructions"};
    instructions = body["instructions"].get<std::string>();
  }
  auto messages = responses_items_to_template(items, instructions);
  if (!messages) return {messages.error(), "input"};
  chat.messages = std::move(*messages);
  // tool_choice narrows the tools offered (none, a named function) but forces no call.
  auto tools = responses_tools_to_template(body);
  if (!tools) return {tools.error(), "tools"};
  chat.tools = std::move(*tools);
  if (body.contains("parallel_tool_calls") && body["parallel_tool_calls"].is_boolean())
    chat.parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  if (body.contains("reasoning") && body["reasoning"].is_object() &&
      body["reasoning"].contains("effort") && body["reasoning"]["effort"].is_string()) {
    chat.thinking = body["reasoning"]["effort"].get<std::string>() != "none";
  }
  // Only the sampling fields the Responses API has.
  json sampling = json::object();
  for (const char* key : {"temperature", "top_p", "max_output_tokens"}) {
    if (body.contains(key)) sampling[key] = body[key];
  }
  auto read = read_sampling(sampling, context);
  if (!read) return read.error();
  chat.sampling = std::move(*read);
  return chat;
}

}  // namespace tern::api

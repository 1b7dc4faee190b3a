// Hermes / Qwen2.5 / Qwen3 calls: <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>,
// and Llama 3.x's {"name": NAME, "parameters": {...}} (the whole output).
#include "api/parsers/parsers.h"

namespace tern::api::parsers {

using nlohmann::ordered_json;

namespace {

// {"name": ..., "arguments"|"parameters": {...}} -> a call.
std::optional<Call> call_from_object(const ordered_json& obj) {
  if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string()) return std::nullopt;
  Call c;
  c.name = obj["name"].get<std::string>();
  if (c.name.empty()) return std::nullopt;
  ordered_json args;
  if (obj.contains("arguments")) {
    args = obj["arguments"];
  } else if (obj.contains("parameters")) {
    args = obj["parameters"];
  }
  auto a = arguments_object(args);
  if (!a) return std::nullopt;
  c.arguments = std::move(*a);
  return c;
}

}  // namespace

std::optional<std::vector<Call>> parse_hermes_body(std::string_view body) {
  auto obj = ordered_json::parse(body, nullptr, false);
  if (obj.is_discarded()) return std::nullopt;
  auto c = call_from_object(obj);
  if (!c) return std::nullopt;
  return std::vector<Call>{std::move(*c)};
}

std::optional<std::vector<Call>> parse_llama3_output(std::string_view text,
                                                     const std::vector<ToolInfo>& tools) {
  std::vector<Call> calls;
  size_t i = 0;
  while (true) {
    while (i < text.size() && (is_space(text[i]) || text[i] == ';')) ++i;
    if (i == text.size()) break;
    if (text[i] != '{') return std::nullopt;
    // The extent of one object: braces outside strings.
    int depth = 0;
    bool in_string = false, escaped = false;
    size_t end = i;
    for (; end < text.size(); ++end) {
      const char ch = text[end];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (ch == '\\') {
          escaped = true;
        } else if (ch == '"') {
          in_string = false;
        }
      } else if (ch == '"') {
        in_string = true;
      } else if (ch == '{') {
        ++depth;
      } else if (ch == '}' && --depth == 0) {
        break;
      }
    }
    if (end == text.size()) return std::nullopt;
    auto obj = ordered_json::parse(text.substr(i, end + 1 - i), nullptr, false);
    if (obj.is_discarded()) return std::nullopt;
    auto c = call_from_object(obj);
    // No markers: only objects naming an offered tool are calls (else it is JSON content).
    bool known = false;
    for (const auto& t : tools) known = known || (c && t.name == c->name);
    if (!c || !known) return std::nullopt;
    calls.push_back(std::move(*c));
    i = end + 1;
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace tern::api::parsers

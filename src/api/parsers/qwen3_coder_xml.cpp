// Qwen3-Coder calls:
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// Values are text; they are typed by the tool's JSON schema: a parameter declared string (or
// unknown) stays a string, others (number, integer, boolean, object, array, null) are parsed as
// JSON and kept as text when they do not parse.
#include "api/parsers/parsers.h"

namespace tern::api::parsers {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool declared_string(const json* schema, const std::string& param) {
  if (schema == nullptr || !schema->contains("properties") || !(*schema)["properties"].is_object())
    return true;
  const json& props = (*schema)["properties"];
  if (!props.contains(param) || !props[param].is_object()) return true;
  const json& p = props[param];
  if (!p.contains("type")) {
    if (p.contains("enum") && p["enum"].is_array()) {
      for (const auto& v : p["enum"]) {
        if (!v.is_string()) return false;
      }
    }
    return !p.contains("anyOf") && !p.contains("oneOf") && !p.contains("enum");
  }
  const json& t = p["type"];
  if (t.is_string()) return t.get<std::string>() == "string";
  if (t.is_array()) {
    for (const auto& x : t) {
      if (x.is_string() && x.get<std::string>() == "string") return true;
    }
    return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<Call>> parse_qwen3_xml_body(std::string_view body,
                                                      const std::vector<ToolInfo>& tools) {
  static constexpr std::string_view kFunction = "<function=";
  static constexpr std::string_view kFunctionEnd = "</function>";
  static constexpr std::string_view kParam = "<parameter=";
  static constexpr std::string_view kParamEnd = "</parameter>";
  std::vector<Call> calls;
  std::string_view s = trim(body);
  while (!s.empty()) {
    if (s.substr(0, kFunction.size()) != kFunction) return std::nullopt;
    s.remove_prefix(kFunction.size());
    const size_t gt = s.find('>');
    if (gt == std::string_view::npos) return std::nullopt;
    Call c;
    c.name = std::string(trim(s.substr(0, gt)));
    if (c.name.empty() || c.name.find_first_of("<\n") != std::string::npos) return std::nullopt;
    s.remove_prefix(gt + 1);
    c.arguments = ordered_json::object();
    const json* schema = find_schema(tools, c.name);
    bool closed = false;
    while (true) {
      s = trim(s);
      if (s.empty()) break;  // unterminated </function>: accepted when the block ends here
      if (s.substr(0, kFunctionEnd.size()) == kFunctionEnd) {
        s.remove_prefix(kFunctionEnd.size());
        closed = true;
        break;
      }
      if (s.substr(0, kParam.size()) != kParam) return std::nullopt;
      s.remove_prefix(kParam.size());
      const size_t pgt = s.find('>');
      if (pgt == std::string_view::npos) return std::nullopt;
      const std::string name(trim(s.substr(0, pgt)));
      if (name.empty() || name.find_first_of("<\n") != std::string::npos) return std::nullopt;
      s.remove_prefix(pgt + 1);
      const size_t end = s.find(kParamEnd);
      if (end == std::string_view::npos) return std::nullopt;
      std::string_view value = s.substr(0, end);
      s.remove_prefix(end + kParamEnd.size());
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      if (declared_string(schema, name)) {
        c.arguments[name] = std::string(value);
      } else {
        auto parsed = ordered_json::parse(trim(value), nullptr, false);
        c.arguments[name] = parsed.is_discarded() ? ordered_json(std::string(value)) : parsed;
      }
    }
    calls.push_back(std::move(c));
    s = trim(s);
    if (!closed && !s.empty()) return std::nullopt;
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace tern::api::parsers

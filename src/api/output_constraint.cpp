#include "api/output_constraint.h"

#include <map>
#include <mutex>

#include "sample/grammar.h"
#include "sample/json_constraint.h"

namespace tern::api {

using nlohmann::json;

Result<OutputConstraint> read_response_format(const json& body) {
  OutputConstraint c;
  if (!body.contains("response_format") || body["response_format"].is_null()) return c;
  const json& rf = body["response_format"];
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    return Error{"'response_format' must be an object with a 'type'"};
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return c;
  if (type == "json_object") {
    c.kind = OutputConstraint::Kind::JsonObject;
    return c;
  }
  if (type == "json_schema") {
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
      return Error{"'response_format.json_schema' must be an object with a 'schema'"};
    const json& js = rf["json_schema"];
    c.kind = OutputConstraint::Kind::JsonSchema;
    c.schema = js.contains("schema") ? js["schema"] : json::object();
    return c;
  }
  return make_error("'response_format.type' '{}' is not one of text, json_object, json_schema",
                    type);
}

namespace {

// The vocabulary's byte strings, built once per tokenizer and shared by its requests.
std::shared_ptr<const TokenVocabulary> vocabulary_for(const Tokenizer& tok) {
  static std::mutex mutex;
  static std::map<const Tokenizer*, std::weak_ptr<const TokenVocabulary>> cache;
  std::lock_guard lock(mutex);
  if (auto v = cache[&tok].lock()) return v;
  // Control tokens are not text, except the markers of call formats that some vocabularies
  // hold as special tokens.
  static const std::vector<std::string> kMarkers = {
      "<tool_call>", "</tool_call>", "<|python_tag|>", "<|tool_call>", "<tool_call|>", "<|\"|>"};
  std::vector<std::string> bytes(tok.vocab_size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    std::string b(tok.token_bytes(id));
    if (tok.is_special(id) && std::find(kMarkers.begin(), kMarkers.end(), b) == kMarkers.end()) {
      b.clear();
    }
    bytes[i] = std::move(b);
  }
  auto v = std::make_shared<const TokenVocabulary>(std::move(bytes), tok.end_of_generation_ids());
  cache[&tok] = v;
  return v;
}

bool is_string_schema(const json& s) {
  if (!s.is_object()) return false;
  if (s.contains("type")) return s["type"].is_string() && s["type"].get<std::string>() == "string";
  return false;
}

Result<int32_t> tool_call_node(Grammar& g, const OutputFormat& format, const ToolInfo& tool) {
  const json schema = tool.parameters.is_object() ? tool.parameters : json{{"type", "object"}};
  auto required_params = [&] {
    std::vector<std::pair<std::string, json>> out;
    if (!schema.contains("properties") || !schema["properties"].is_object()) return out;
    for (const auto& [key, sub] : schema["properties"].items()) {
      bool required = false;
      if (schema.contains("required") && schema["required"].is_array()) {
        for (const auto& r : schema["required"]) required = required || (r == key);
      }
      if (required) out.emplace_back(key, sub);
    }
    return out;
  };
  switch (format.tools) {
    case ToolCallFormat::Llama3Json: {
      auto args = g.add_schema(schema);
      if (!args) return args.error();
      return g.sequence({g.literal("{\"name\": " + json(tool.name).dump() + ", \"parameters\": "),
                         *args, g.literal("}")});
    }
    case ToolCallFormat::Qwen3CoderXml: {
      std::vector<int32_t> parts = {g.literal("<tool_call>\n<function=" + tool.name + ">\n")};
      for (const auto& [key, sub] : required_params()) {
        parts.push_back(g.literal("<parameter=" + key + ">\n"));
        if (is_string_schema(sub) || !sub.is_object()) {
          const int64_t max =
              sub.is_object() && sub.contains("maxLength") && sub["maxLength"].is_number_integer()
                  ? sub["maxLength"].get<int64_t>()
                  : -1;
          parts.push_back(g.raw_text("<", max));
        } else {
          auto v = g.add_schema(sub);
          if (!v) return v.error();
          parts.push_back(*v);
        }
        parts.push_back(g.literal("\n</parameter>\n"));
      }
      parts.push_back(g.literal("</function>\n</tool_call>"));
      return g.sequence(std::move(parts));
    }
    case ToolCallFormat::Gemma4: {
      std::vector<int32_t> parts = {g.literal("<|tool_call>call:" + tool.name + "{")};
      bool first = true;
      for (const auto& [key, sub] : required_params()) {
        parts.push_back(g.literal((first ? "" : ",") + key + ":"));
        first = false;
        if (is_string_schema(sub) || !sub.is_object()) {
          parts.push_back(g.literal("<|\"|>"));
          parts.push_back(g.raw_text("<", -1));
          parts.push_back(g.literal("<|\"|>"));
        } else {
          auto v = g.add_schema(sub);
          if (!v) return v.error();
          parts.push_back(*v);
        }
      }
      parts.push_back(g.literal("}<tool_call|>"));
      return g.sequence(std::move(parts));
    }
    default: {
      auto args = g.add_schema(schema);
      if (!args) return args.error();
      return g.sequence(
          {g.literal("<tool_call>\n{\"name\": " + json(tool.name).dump() + ", \"arguments\": "),
           *args, g.literal("}\n</tool_call>")});
    }
  }
}

}  // namespace

Result<std::shared_ptr<TokenConstraint>> make_output_constraint(const Tokenizer& tokenizer,
                                                                const OutputFormat& format,
                                                                const OutputConstraint& spec) {
  auto grammar = std::make_shared<Grammar>();
  switch (spec.kind) {
    case OutputConstraint::Kind::None:
      return std::shared_ptr<TokenConstraint>();
    case OutputConstraint::Kind::JsonObject:
      *grammar = Grammar::json_object();
      break;
    case OutputConstraint::Kind::JsonSchema: {
      auto g = Grammar::from_json_schema(spec.schema);
      if (!g) return make_error("response_format.json_schema: {}", g.error().message);
      *grammar = std::move(*g);
      break;
    }
    case OutputConstraint::Kind::ToolCall: {
      if (spec.tools.empty()) return Error{"a forced tool call needs at least one tool"};
      std::vector<int32_t> calls;
      for (const auto& t : spec.tools) {
        auto node = tool_call_node(*grammar, format, t);
        if (!node) return make_error("tools: '{}': {}", t.name, node.error().message);
        calls.push_back(*node);
      }
      grammar->set_root(calls.size() == 1 ? calls[0] : grammar->choice(std::move(calls)));
      break;
    }
  }
  std::shared_ptr<TokenConstraint> c =
      std::make_shared<GrammarConstraint>(grammar, vocabulary_for(tokenizer));
  return c;
}

}  // namespace tern::api

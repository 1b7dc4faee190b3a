#include "api/output_parser.h"

#include "api/parsers/parsers.h"

namespace tern::api {

using nlohmann::ordered_json;

// The family is recognized by what its template writes for calls:
//   "<function=" and "<parameter=" ........ Qwen3-Coder / Qwen3.5 XML calls
//   "<|tool_call>" ........................ Gemma 4
//   "<tool_call>" ......................... Hermes JSON in tags (Qwen2.5, Qwen3, Hermes, Granite)
//   "<|python_tag|>", or "parameters" with "Environment: ipython" ... Llama 3.x JSON
// and reasoning by "<think>" (Qwen3, QwQ, DeepSeek-R1, SmolLM3) or Gemma 4's "<|channel>".
OutputFormat detect_output_format(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  OutputFormat f;
  if (has("<function=") && has("<parameter=")) {
    f.tools = ToolCallFormat::Qwen3CoderXml;
  } else if (has("<|tool_call>")) {
    f.tools = ToolCallFormat::Gemma4;
  } else if (has("<tool_call>")) {
    f.tools = ToolCallFormat::Hermes;
  } else if (has("<|python_tag|>") || (has("\"parameters\"") && has("Environment: ipython"))) {
    f.tools = ToolCallFormat::Llama3Json;
  }
  if (has("<think>")) {
    f.reasoning_open = "<think>";
    f.reasoning_close = "</think>";
  } else if (has("<|channel>") && has("<channel|>")) {
    f.reasoning_open = "<|channel>thought";
    f.reasoning_close = "<channel|>";
  }
  return f;
}

bool prompt_opens_reasoning(const OutputFormat& format, std::string_view prompt) {
  if (format.reasoning_open.empty()) return false;
  const size_t open = prompt.rfind(format.reasoning_open);
  if (open == std::string_view::npos) return false;
  if (prompt.find(format.reasoning_close, open) != std::string_view::npos) return false;
  // Only the generation prompt's own marker: nothing but whitespace may follow it.
  for (size_t i = open + format.reasoning_open.size(); i < prompt.size(); ++i) {
    if (!parsers::is_space(prompt[i])) return false;
  }
  return true;
}

std::vector<ToolInfo> tool_infos(const ordered_json& tools) {
  std::vector<ToolInfo> out;
  if (!tools.is_array()) return out;
  for (const auto& t : tools) {
    const ordered_json* fn = &t;
    if (t.is_object() && t.contains("function") && t["function"].is_object()) fn = &t["function"];
    if (!fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) continue;
    ToolInfo info;
    info.name = (*fn)["name"].get<std::string>();
    if (fn->contains("parameters")) info.parameters = nlohmann::json((*fn)["parameters"]);
    out.push_back(std::move(info));
  }
  return out;
}

namespace {

class FamilyParser : public OutputParser {
 public:
  FamilyParser(const OutputFormat& format, ParserOptions options)
      : reasoning_(format.reasoning_open, format.reasoning_close, options.in_reasoning) {
    if (!options.tools.empty()) {
      if (format.tools == ToolCallFormat::Llama3Json) {
        tools_ = parsers::make_llama3_extractor(std::move(options.tools));
      } else if (format.tools != ToolCallFormat::None) {
        tools_ = parsers::make_block_extractor(format.tools, std::move(options.tools));
      }
    }
  }

  std::vector<OutputDelta> push(std::string_view text) override {
    std::vector<OutputDelta> out;
    std::string content;
    reasoning_.push(text, out, content);
    forward(content, out);
    return out;
  }

  std::vector<OutputDelta> finish() override {
    std::vector<OutputDelta> out;
    std::string content;
    reasoning_.finish(out, content);
    forward(content, out);
    if (tools_) tools_->finish(out);
    return out;
  }

 private:
  void forward(const std::string& content, std::vector<OutputDelta>& out) {
    if (content.empty()) return;
    if (tools_) {
      tools_->push(content, out);
    } else if (!out.empty() && out.back().kind == OutputDelta::Kind::Content) {
      out.back().text += content;
    } else {
      out.push_back({OutputDelta::Kind::Content, content, -1, {}, {}});
    }
  }

  parsers::ReasoningSplitter reasoning_;
  std::unique_ptr<parsers::ToolExtractor> tools_;
};

}  // namespace

std::unique_ptr<OutputParser> make_output_parser(const OutputFormat& format,
                                                 ParserOptions options) {
  return std::make_unique<FamilyParser>(format, std::move(options));
}

void ParsedOutput::add(const OutputDelta& d) {
  switch (d.kind) {
    case OutputDelta::Kind::Content:
      content += d.text;
      break;
    case OutputDelta::Kind::Reasoning:
      reasoning += d.text;
      break;
    case OutputDelta::Kind::ToolCallBegin:
      tool_calls.push_back({d.id, d.name, {}});
      break;
    case OutputDelta::Kind::ToolCallArguments:
      if (!tool_calls.empty()) tool_calls.back().arguments += d.text;
      break;
    case OutputDelta::Kind::ToolCallEnd:
      break;
  }
}

}  // namespace tern::api

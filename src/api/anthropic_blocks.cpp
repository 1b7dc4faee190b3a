#include "api/anthropic_blocks.h"

#include "api/output_parser.h"

namespace tern::api {

namespace {

std::vector<OutputPiece> to_pieces(const std::vector<OutputDelta>& deltas) {
  std::vector<OutputPiece> out;
  out.reserve(deltas.size());
  for (const auto& d : deltas) {
    OutputPiece p;
    switch (d.kind) {
      case OutputDelta::Kind::Content:
        p.kind = OutputPiece::Kind::Text;
        p.text = d.text;
        break;
      case OutputDelta::Kind::Reasoning:
        p.kind = OutputPiece::Kind::Reasoning;
        p.text = d.text;
        break;
      case OutputDelta::Kind::ToolCallBegin:
        p.kind = OutputPiece::Kind::ToolCallStart;
        p.text = d.name;
        p.id = d.id;
        break;
      case OutputDelta::Kind::ToolCallArguments:
        p.kind = OutputPiece::Kind::ToolCallArguments;
        p.text = d.text;
        break;
      case OutputDelta::Kind::ToolCallEnd:
        p.kind = OutputPiece::Kind::ToolCallEnd;
        break;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

OutputSplitter::OutputSplitter(const std::string& template_source,
                               const std::string& rendered_prompt,
                               const nlohmann::ordered_json& tools) {
  const OutputFormat format = detect_output_format(template_source);
  ParserOptions options;
  options.tools = tool_infos(tools);
  options.in_reasoning = prompt_opens_reasoning(format, rendered_prompt);
  parser_ = make_output_parser(format, std::move(options));
}
OutputSplitter::OutputSplitter(std::unique_ptr<OutputParser> parser) : parser_(std::move(parser)) {}
OutputSplitter::~OutputSplitter() = default;
OutputSplitter::OutputSplitter(OutputSplitter&&) noexcept = default;
OutputSplitter& OutputSplitter::operator=(OutputSplitter&&) noexcept = default;

std::vector<OutputPiece> OutputSplitter::feed(const std::string& text) {
  return to_pieces(parser_->push(text));
}

std::vector<OutputPiece> OutputSplitter::finish() {
  return to_pieces(parser_->finish());
}

}  // namespace tern::api

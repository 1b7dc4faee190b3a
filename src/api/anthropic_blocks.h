// The generated text split into the pieces the Anthropic and Responses endpoints turn into
// content blocks / output items: visible text, reasoning, and tool calls (a name, then JSON
// argument fragments, then an end). OutputSplitter adapts the model-family output parser
// (api/output_parser.h) to this one shape, so each endpoint has one state machine over it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tern::api {

class OutputParser;

struct OutputPiece {
  enum class Kind { Text, Reasoning, ToolCallStart, ToolCallArguments, ToolCallEnd };
  Kind kind = Kind::Text;
  std::string text;  // Text / Reasoning: new text; ToolCallStart: the tool's name;
                     // ToolCallArguments: a fragment of the arguments' JSON text
  std::string id;    // ToolCallStart: the call's id ("call_...")
};

class OutputSplitter {
 public:
  // template_source: the chat template (picks the model family's markers); rendered_prompt: the
  // prompt as rendered (whether the output starts inside reasoning); tools: the tools offered in
  // the template format (empty: no tool calls are looked for).
  OutputSplitter(const std::string& template_source, const std::string& rendered_prompt,
                 const nlohmann::ordered_json& tools);
  // Over a parser already configured (prepare_chat's).
  explicit OutputSplitter(std::unique_ptr<OutputParser> parser);
  ~OutputSplitter();
  OutputSplitter(OutputSplitter&&) noexcept;
  OutputSplitter& operator=(OutputSplitter&&) noexcept;

  std::vector<OutputPiece> feed(const std::string& text);
  // End of generation: whatever was held back (a partial marker, an unterminated call) comes out.
  std::vector<OutputPiece> finish();

 private:
  std::unique_ptr<OutputParser> parser_;
};

}  // namespace tern::api

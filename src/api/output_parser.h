// From generated text to structure: an OutputParser consumes the model's output as it streams
// (any split into pieces) and emits deltas — visible content, reasoning, and tool calls (begin
// with id and name, arguments as JSON text, end). The model family's format is recognized from
// its chat template source:
//
//   auto format = detect_output_format(formatter.source());
//   ParserOptions o;
//   o.tools = tool_infos(template_tools);             // empty: tool calls are not looked for
//   o.in_reasoning = prompt_opens_reasoning(format, rendered_prompt);
//   auto parser = make_output_parser(format, std::move(o));
//   for (piece : stream) for (auto& d : parser->push(piece)) ...;
//   for (auto& d : parser->finish()) ...;
//
// Held back: text that may be the start of a marker (`<tool_call>`, `<think>`, ...) waits until
// the next piece decides it, like a stop-string matcher; finish() flushes it.
//
// Malformed calls: a tool-call block is buffered until its closing marker and validated (the
// arguments must be a JSON object, values typed by the tool's schema for XML parameters). A
// block that does not parse is returned as plain content, markers included, so nothing the model
// wrote is lost and a client never receives arguments that are not valid JSON. Consequently the
// arguments of one call arrive in one ToolCallArguments delta, after the call's end marker.
// An unterminated block at finish() is parsed the same way (models often stop right before the
// closing marker); if it does not parse it becomes content.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tern::api {

struct OutputDelta {
  enum class Kind { Content, Reasoning, ToolCallBegin, ToolCallArguments, ToolCallEnd };
  Kind kind = Kind::Content;
  std::string text;  // Content / Reasoning: new text; ToolCallArguments: JSON text (fragment)
  int index = -1;    // tool-call deltas: the call's 0-based index in this output
  std::string id;    // ToolCallBegin: "call_..."
  std::string name;  // ToolCallBegin: the function's name
};

enum class ToolCallFormat {
  None,
  Hermes,  // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Qwen2.5/3, Hermes)
  Qwen3CoderXml,  // <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>...
  Llama3Json,     // {"name": ..., "parameters": {...}} as the whole output, maybe <|python_tag|>
  Gemma4,         // <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>
};

struct OutputFormat {
  ToolCallFormat tools = ToolCallFormat::None;
  std::string reasoning_open;   // "<think>", "<|channel>thought"; empty: no reasoning markers
  std::string reasoning_close;  // "</think>", "<channel|>"
};

// Picks the family by markers in the template source (see output_parser.cpp for the rules).
OutputFormat detect_output_format(std::string_view template_source);
// Whether the rendered prompt leaves the model inside an open reasoning block (a template that
// writes "<think>\n" in the generation prompt): the output then starts as reasoning.
bool prompt_opens_reasoning(const OutputFormat& format, std::string_view rendered_prompt);

struct ToolInfo {
  std::string name;
  nlohmann::json parameters;  // the JSON schema of the arguments (may be null)
};
// From tools in the template format ([{"type": "function", "function": {name, parameters}}])
// or the OpenAI request format (same shape); entries without a name are skipped.
std::vector<ToolInfo> tool_infos(const nlohmann::ordered_json& tools);

struct ParserOptions {
  std::vector<ToolInfo> tools;  // empty: no tool calls are looked for (all text is content)
  bool in_reasoning = false;    // the output starts inside reasoning
};

class OutputParser {
 public:
  virtual ~OutputParser() = default;
  // Consumes the next piece of output; returns what became certain.
  virtual std::vector<OutputDelta> push(std::string_view text) = 0;
  // End of output: flushes what was held back (an unterminated call is parsed or becomes text).
  virtual std::vector<OutputDelta> finish() = 0;
};

std::unique_ptr<OutputParser> make_output_parser(const OutputFormat& format, ParserOptions options);

// The deltas of a whole output gathered: for non-streaming responses and tests.
struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text
};
struct ParsedOutput {
  std::string content;
  std::string reasoning;
  std::vector<ParsedToolCall> tool_calls;
  void add(const OutputDelta& delta);
  void add(const std::vector<OutputDelta>& deltas) {
    for (const auto& d : deltas) add(d);
  }
};

}  // namespace tern::api

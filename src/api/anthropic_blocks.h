// The generated text split into the pieces the Anthropic and Responses endpoints turn into
// content blocks / output items: visible text, reasoning, and tool calls (a name, then JSON
// argument fragments, then an end). OutputSplitter adapts the model-family output parser to
// this one shape, so both endpoints share one streaming state machine each over it.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/loaded_model.h"

namespace tern::api {

struct OutputPiece {
  enum class Kind { Text, Reasoning, ToolCallStart, ToolCallArguments, ToolCallEnd };
  Kind kind = Kind::Text;
  std::string text;  // Text / Reasoning: new text; ToolCallStart: the tool's name;
                     // ToolCallArguments: a fragment of the arguments' JSON text
};

class OutputSplitter {
 public:
  // thinking: the prompt was rendered with reasoning on (the output may start inside it).
  // tools: the tools offered in the template format (empty: no tool calls are looked for).
  OutputSplitter(const LoadedModel& model, bool thinking, const nlohmann::ordered_json& tools);
  ~OutputSplitter();
  OutputSplitter(OutputSplitter&&) noexcept;
  OutputSplitter& operator=(OutputSplitter&&) noexcept;

  std::vector<OutputPiece> feed(const std::string& text);
  // End of generation: whatever was held back (a partial marker) comes out.
  std::vector<OutputPiece> finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern::api

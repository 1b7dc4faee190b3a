// Internals of the output parsers (api/output_parser.h): the reasoning splitter, the tool-call
// extractors per family and the body parsers they share. Not part of the public API.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/output_parser.h"

namespace tern::api::parsers {

// Length of the longest suffix of `text` that is a proper prefix of `marker`: the part that must
// be held back because the next piece may complete the marker.
size_t partial_suffix(std::string_view text, std::string_view marker);
bool is_space(char c);

struct Call {
  std::string name;
  nlohmann::ordered_json arguments;  // always an object
};

// The tool's parameter schema, or nullptr when the tool (or schema) is unknown.
const nlohmann::json* find_schema(const std::vector<ToolInfo>& tools, const std::string& name);

// Body parsers: the text between a block's markers; nullopt when it is malformed.
std::optional<std::vector<Call>> parse_hermes_body(std::string_view body);
std::optional<std::vector<Call>> parse_qwen3_xml_body(std::string_view body,
                                                      const std::vector<ToolInfo>& tools);
std::optional<std::vector<Call>> parse_gemma4_body(std::string_view body);
// Llama 3: the whole output is one or more {"name", "parameters"} objects (separated by ';' or
// whitespace) naming known tools.
std::optional<std::vector<Call>> parse_llama3_output(std::string_view text,
                                                     const std::vector<ToolInfo>& tools);
// "{...}" or "\"{...}\"" (some models quote the arguments): an object, or nullopt.
std::optional<nlohmann::ordered_json> arguments_object(const nlohmann::ordered_json& value);

// Content after reasoning: finds tool calls in it. Emits Content and ToolCall* deltas.
class ToolExtractor {
 public:
  virtual ~ToolExtractor() = default;
  virtual void push(std::string_view text, std::vector<OutputDelta>& out) = 0;
  virtual void finish(std::vector<OutputDelta>& out) = 0;
};

// A run of streamed text of one kind (reasoning, or content between tool calls) appended to the
// last delta of that kind: whitespace at the run's start is dropped (when the run trims its
// start) and whitespace at its end is held back until more text follows, so a marker or call
// that ends the run can drop it.
class TrimmedRun {
 public:
  TrimmedRun(OutputDelta::Kind kind, bool trim_start) : kind_(kind), trim_start_(trim_start) {}
  void push(std::string_view t, std::vector<OutputDelta>& out);
  // The whitespace held back is dropped; with trim_start, the next run's leading whitespace too.
  void end(bool trim_next_start);
  // The whitespace held back, emitted after all (output that ended in it).
  void flush(std::vector<OutputDelta>& out);

 private:
  void emit(std::string text, std::vector<OutputDelta>& out) const;
  OutputDelta::Kind kind_;
  bool trim_start_;
  std::string held_space_;
};

// Content passes through, except whitespace right before or after tool calls, which is dropped.
class ContentSink {
 public:
  void text(std::string_view t, std::vector<OutputDelta>& out);
  void call(const Call& c, std::vector<OutputDelta>& out);
  void finish(std::vector<OutputDelta>& out);
  int calls() const { return next_index_; }

 private:
  TrimmedRun run_{OutputDelta::Kind::Content, false};
  int next_index_ = 0;
};

std::unique_ptr<ToolExtractor> make_block_extractor(ToolCallFormat format,
                                                    std::vector<ToolInfo> tools);
std::unique_ptr<ToolExtractor> make_llama3_extractor(std::vector<ToolInfo> tools);

// Splits reasoning (between the open and close markers, only at the start of the output) from
// content. Whitespace right inside the markers and right after the close is dropped.
class ReasoningSplitter {
 public:
  ReasoningSplitter(std::string open, std::string close, bool inside);
  // Reasoning deltas go to `out`; content text is appended to `content`.
  void push(std::string_view text, std::vector<OutputDelta>& out, std::string& content);
  void finish(std::vector<OutputDelta>& out, std::string& content);

 private:
  enum class State { Start, Inside, After };
  std::string open_, close_;
  State state_;
  std::string buf_;
  TrimmedRun reasoning_{OutputDelta::Kind::Reasoning, true};
  bool strip_ = false;  // drop whitespace at the start of content after the close
};

}  // namespace tern::api::parsers

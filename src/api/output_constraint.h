// Constrained decoding for the API layer: response_format (json_object, json_schema) and forced
// tool calls (tool_choice "required" or a named function) as a TokenConstraint over the model's
// vocabulary. A forced call is written in the model family's own format (output_parser.h), so
// the same parser that reads free calls reads it back:
//   Hermes / Qwen:  <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//   Qwen3-Coder:    <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...
//                   (required parameters, in schema order; string values are text without '<')
//   Llama 3:        {"name": "NAME", "parameters": ARGS}
//   Gemma 4:        <|tool_call>call:NAME{key:VALUE,...}<tool_call|> (required parameters;
//                   strings in <|"|>, numbers, booleans; other types as JSON)
// ARGS follows the tool's parameter schema (grammar.h lists the subset; a tool without a schema
// gets any JSON object). Templates that know no call format get the Hermes format.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "api/output_parser.h"
#include "base/error.h"
#include "sample/token_constraint.h"
#include "text/tokenizer.h"

namespace tern::api {

struct OutputConstraint {
  enum class Kind { None, JsonObject, JsonSchema, ToolCall };
  Kind kind = Kind::None;
  nlohmann::json schema;        // JsonSchema
  std::vector<ToolInfo> tools;  // ToolCall: the model must call one of these
};

// OpenAI's response_format: absent or {"type": "text"} -> None; {"type": "json_object"};
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}.
Result<OutputConstraint> read_response_format(const nlohmann::json& body);

// The constraint for one request (errors name the unsupported schema part).
Result<std::shared_ptr<TokenConstraint>> make_output_constraint(const Tokenizer& tokenizer,
                                                                const OutputFormat& format,
                                                                const OutputConstraint& spec);

}  // namespace tern::api

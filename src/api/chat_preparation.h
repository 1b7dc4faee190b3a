// The one preparation every chat endpoint shares: a ChatRequest (api/chat_request.h) -> the
// model's chat template -> prompt tokens, sampling options and the constraint that enforces a
// response format or a forced tool call -> the engine Request, and the output parser (reasoning
// and tool calls in the model family's format) that reads the generation back. The endpoints
// only translate their JSON into the ChatRequest and the parser's output into their events.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/chat_request.h"
#include "api/errors.h"
#include "api/output_parser.h"
#include "engine/engine.h"

namespace tern::api {

// The prompt a chat request renders to.
struct ChatPrompt {
  std::string text;  // as the model's template wrote it
  std::vector<int32_t> tokens;
  std::string template_source;  // the template: which output format the model writes
};

// Renders and tokenizes the conversation (what /v1/messages/count_tokens counts). The tools the
// template sees and the thinking switch follow the tool choice as prepare_chat applies them.
Result<ChatPrompt> render_chat_prompt(const LoadedModel& model, const ChatRequest& chat);

struct PreparedChat {
  Request request;                       // for Engine::submit
  std::unique_ptr<OutputParser> parser;  // reads the generated text back
};

// The engine request and its output parser. default_temperature: for requests that set none
// (tern serve --temp). Errors are the client's (a template that fails on these messages, a
// schema outside the supported subset) and name the field when there is one.
RequestResult<PreparedChat> prepare_chat(const LoadedModel& model, const ChatRequest& chat,
                                         std::optional<float> default_temperature);

// The engine's options for the client's sampling fields: an unset temperature takes
// default_temperature, an unset max_tokens default_max_tokens.
GenerateOptions generate_options(const SamplingRequest& sampling, float default_temperature,
                                 int64_t default_max_tokens);

}  // namespace tern::api

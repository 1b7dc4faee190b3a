#include "api/chat_preparation.h"

#include <algorithm>

#include "engine/chat_prompt.h"

namespace tern::api {

using nlohmann::ordered_json;

namespace {

// tool_choice none: the template sees no tools and the output is not searched for calls.
ordered_json offered_tools(const ChatRequest& chat) {
  return chat.tool_choice.mode == ToolChoice::Mode::None ? ordered_json::array() : chat.tools;
}

// A forced call or format is forced from the first token: no reasoning before it.
bool forces_output(const ChatRequest& chat) {
  return chat.tool_choice.forces_call() ||
         chat.response_format.kind != OutputConstraint::Kind::None;
}

// What the constraint must enforce: the response format, or one call of the tools allowed.
OutputConstraint constraint_spec(const ChatRequest& chat, const ordered_json& tools) {
  OutputConstraint spec = chat.response_format;
  if (!chat.tool_choice.forces_call()) return spec;
  spec.kind = OutputConstraint::Kind::ToolCall;
  for (auto& t : tool_infos(tools)) {
    if (chat.tool_choice.mode == ToolChoice::Mode::Required || t.name == chat.tool_choice.name)
      spec.tools.push_back(std::move(t));
  }
  return spec;
}

}  // namespace

GenerateOptions generate_options(const SamplingRequest& sampling, float default_temperature,
                                 int64_t default_max_tokens) {
  GenerateOptions o;
  o.sampling = sampling.params;
  o.sampling.temperature = sampling.temperature.value_or(default_temperature);
  o.stop = sampling.stop;
  o.max_tokens = sampling.max_tokens.value_or(default_max_tokens);
  return o;
}

Result<ChatPrompt> render_chat_prompt(const LoadedModel& model, const ChatRequest& chat) {
  auto formatter = ChatFormatter::create(model);
  if (!formatter) return formatter.error();
  ChatPromptOptions options;
  options.enable_thinking = forces_output(chat) ? std::optional<bool>(false) : chat.thinking;
  options.extra = chat.template_variables;
  auto text = formatter->render(chat.messages, offered_tools(chat), options);
  if (!text) return text.error();
  ChatPrompt prompt;
  prompt.tokens = model.tokenizer->encode(*text, false, true);
  prompt.text = std::move(*text);
  prompt.template_source = formatter->source();
  return prompt;
}

RequestResult<PreparedChat> prepare_chat(const LoadedModel& model, const ChatRequest& chat,
                                         std::optional<float> default_temperature) {
  auto prompt = render_chat_prompt(model, chat);
  if (!prompt) return prompt.error();
  const ordered_json tools = offered_tools(chat);
  OutputFormat format = detect_output_format(prompt->template_source);
  // A template without a call format of its own: calls are read (and forced) as Hermes calls.
  if (format.tools == ToolCallFormat::None && !tools.empty()) format.tools = ToolCallFormat::Hermes;

  PreparedChat p;
  Request& r = p.request;
  r.options = generate_options(chat.sampling, default_temperature.value_or(1.0f), model.context);
  // Never more than the context leaves (a prompt over it fails at submit).
  r.options.max_tokens = std::min<int64_t>(
      r.options.max_tokens, model.context - static_cast<int64_t>(prompt->tokens.size()));
  r.top_logprobs = chat.top_logprobs;
  const OutputConstraint spec = constraint_spec(chat, tools);
  if (spec.kind != OutputConstraint::Kind::None) {
    auto c = make_output_constraint(*model.tokenizer, format, spec);
    if (!c) {
      return RequestError{c.error().message, spec.kind == OutputConstraint::Kind::ToolCall
                                                 ? "tools"
                                                 : "response_format"};
    }
    r.constraint = std::move(*c);
  }
  ParserOptions parser_options;
  parser_options.tools = tool_infos(tools);
  parser_options.in_reasoning = prompt_opens_reasoning(format, prompt->text);
  p.parser = make_output_parser(format, std::move(parser_options));
  r.prompt = std::move(prompt->tokens);
  return p;
}

}  // namespace tern::api

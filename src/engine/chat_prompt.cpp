#include "engine/chat_prompt.h"

namespace tern {

extern const std::string_view kGemma3ChatTemplate;  // data/chat-templates/gemma3.jinja

Result<ChatFormatter> ChatFormatter::create(const LoadedModel& model) {
  std::string source = model.chat_template;
  // Files without a template get their family's documented chat format.
  if (source.empty() && model.info.architecture == "gemma3") source = kGemma3ChatTemplate;
  if (source.empty()) {
    return make_error("{} has no chat template; use a raw prompt (--raw)", model.path);
  }
  auto tmpl = jinja::ChatTemplate::parse(source);
  if (!tmpl)
    return make_error("the model's chat template does not parse: {}", tmpl.error().message);
  return ChatFormatter(model, std::move(*tmpl), std::move(source));
}

Result<std::string> ChatFormatter::render(const nlohmann::ordered_json& messages,
                                          const nlohmann::ordered_json& tools,
                                          const ChatPromptOptions& options) const {
  const Tokenizer& tok = *model_->tokenizer;
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  if (!tools.is_null() && !tools.empty()) ctx["tools"] = tools;
  ctx["add_generation_prompt"] = options.add_generation_prompt;
  ctx["bos_token"] = tok.bos() ? std::string(tok.token_text(*tok.bos())) : std::string();
  ctx["eos_token"] = tok.eos() ? std::string(tok.token_text(*tok.eos())) : std::string();
  if (options.enable_thinking) ctx["enable_thinking"] = *options.enable_thinking;
  if (options.extra.is_object()) {
    for (const auto& [key, value] : options.extra.items()) ctx[key] = value;
  }
  auto text = template_.render(ctx);
  if (!text) return make_error("rendering the chat template failed: {}", text.error().message);
  return *text;
}

Result<std::vector<int32_t>> ChatFormatter::tokens(const nlohmann::ordered_json& messages,
                                                   const nlohmann::ordered_json& tools,
                                                   const ChatPromptOptions& options) const {
  auto text = render(messages, tools, options);
  if (!text) return text.error();
  return model_->tokenizer->encode(*text, false, true);
}

}  // namespace tern

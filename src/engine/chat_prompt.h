// Turns a conversation into prompt tokens with the model's own chat template (Jinja, rendered
// as transformers' apply_chat_template does). Messages and tools are in the Hugging Face chat
// format the templates expect: {"role", "content", "tool_calls", "reasoning_content", ...}.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/loaded_model.h"
#include "text/jinja/chat_template.h"

namespace tern {

struct ChatPromptOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // passed to templates that read it (Qwen3, ...)
  nlohmann::ordered_json extra;         // further template variables
};

class ChatFormatter {
 public:
  // Fails when the model has no chat template (use raw prompts then) or it does not parse.
  static Result<ChatFormatter> create(const LoadedModel& model);

  Result<std::string> render(const nlohmann::ordered_json& messages,
                             const nlohmann::ordered_json& tools,
                             const ChatPromptOptions& options) const;
  // Rendered and tokenized (special tokens in the text are matched; nothing is added: templates
  // write BOS themselves where the model wants it).
  Result<std::vector<int32_t>> tokens(const nlohmann::ordered_json& messages,
                                      const nlohmann::ordered_json& tools,
                                      const ChatPromptOptions& options) const;
  const std::string& source() const { return source_; }

 private:
  ChatFormatter(const LoadedModel& model, jinja::ChatTemplate tmpl, std::string source)
      : model_(&model), template_(std::move(tmpl)), source_(std::move(source)) {}
  const LoadedModel* model_;
  jinja::ChatTemplate template_;
  std::string source_;
};

}  // namespace tern

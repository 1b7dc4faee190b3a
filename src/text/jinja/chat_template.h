// Chat templates: a Jinja2-compatible engine for the templates models ship
// (tokenizer.chat_template), rendering byte-identically to transformers'
// apply_chat_template environment: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True) with loopcontrols, its own tojson (json.dumps, ensure_ascii=False),
// raise_exception and strftime_now.
//
//   auto tmpl = tern::jinja::ChatTemplate::parse(source);          // syntax errors: line, column
//   auto text = tmpl->render({{"messages", messages}, {"add_generation_prompt", true},
//                             {"bos_token", "<s>"}, {"tools", tools}});
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace tern::jinja {

struct RenderOptions {
  // The clock strftime_now() reads; the local time when empty. Tests pin it.
  std::optional<std::tm> now;
  // The most loop iterations and macro calls a render may take before it fails (a template is
  // untrusted input: GGUF files carry theirs). The default is far above any chat template's.
  int64_t max_steps = 1000000;
};

class ChatTemplate {
 public:
  // Parses a template. Fails with "line L, column C: ..." on syntax the engine does not know.
  // Unknown filters and tests fail when evaluated, as in jinja2 3.1.
  static Result<ChatTemplate> parse(std::string_view source);

  // Renders with `context` as the template's variables (messages, tools, add_generation_prompt,
  // bos_token, eos_token, enable_thinking, ...). JSON objects keep their key order, as Python
  // dicts do, when given as ordered_json; nlohmann::json sorts keys. Fails with the template's
  // line and column on runtime errors, including raise_exception("...").
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const RenderOptions& options = {}) const;
  Result<std::string> render(const nlohmann::json& context,
                             const RenderOptions& options = {}) const;

  struct Program;  // the parsed template (internal)

 private:
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace tern::jinja

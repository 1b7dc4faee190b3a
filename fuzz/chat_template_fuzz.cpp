// libFuzzer target: any text given to the chat-template engine as a template (GGUF files carry
// theirs, so a template is untrusted input) must parse and render, or fail with an error — no
// crash, no hang, no unbounded memory. The context is a conversation with a system prompt, a tool
// call and its result, tools and the usual variables, as the server renders one.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/jinja/chat_template.h"

namespace {

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "What is the weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
      {"role": "user", "content": [{"type": "text", "text": "Thanks! And tomorrow?"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>", "documents": null
  })");
  return kContext;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = tern::jinja::ChatTemplate::parse(source);
  if (!tmpl) return 0;
  tern::jinja::RenderOptions options;
  options.now = std::tm{};  // a fixed clock: the same input renders the same way
  // Loops fail sooner than the default's million steps: under the sanitizers a step takes ~75 us,
  // and an input that ran a million would pass libFuzzer's 10 s timeout. The failure path is the
  // same one.
  options.max_steps = 20000;
  (void)tmpl->render(conversation(), options);
  return 0;
}

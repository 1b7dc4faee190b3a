// `tern run [PROMPT]`: one reply from an instruct model to a chat prompt (stdin when no PROMPT),
// streamed to stdout. --raw sends the text to the model as it is, without the chat template. It
// runs through the serving Engine with one slot.
#include <fmt/format.h>

#include <iostream>
#include <iterator>

#include "cli/model_options.h"
#include "engine/chat_prompt.h"
#include "engine/engine.h"

namespace tern::cli {

void add_run_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("run", "Generate a reply to a prompt (stdin when no PROMPT)");
  struct Args {
    ModelOptions model;
    SamplingOptions sampling;
    std::string prompt;
    std::string system;
    bool raw = false;
    bool think = false;
    bool no_think = false;
    bool stats = false;
  };
  auto a = std::make_shared<Args>();
  a->model.add_to(*cmd, true);
  a->sampling.add_to(*cmd);
  cmd->add_option("prompt", a->prompt, "The user's message (default: read stdin)");
  cmd->add_option("-s,--system", a->system, "A system prompt");
  cmd->add_flag("--raw", a->raw, "Send the prompt as it is, without the chat template");
  cmd->add_flag("--think", a->think, "Ask reasoning models to think (enable_thinking=true)");
  cmd->add_flag("--no-think", a->no_think,
                "Ask reasoning models not to think (enable_thinking=false)");
  cmd->add_flag("--stats", a->stats, "Print token counts and speed to stderr at the end");
  cmd->callback([&ctx, a, cmd] {
    if (a->model.follows()) {  // --tp: ranks other than 0 only run rank 0's forward passes
      ctx.exit_code = a->model.follow(ctx);
      return;
    }
    std::string prompt = a->prompt;
    if (!cmd->count("prompt")) {
      prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    if (prompt.empty()) {
      ctx.exit_code = report_error("the prompt is empty");
      return;
    }
    auto loaded = a->model.load(ctx);
    if (!loaded) {
      ctx.exit_code = report_error(loaded.error().message);
      return;
    }
    LoadedModel& m = **loaded;
    std::vector<int32_t> tokens;
    // A file without a chat template is a base model: it continues text rather than chatting.
    const bool raw = a->raw || m.chat_template.empty();
    if (raw && !a->raw) {
      fmt::print(stderr,
                 "note: {} has no chat template (a base model); the prompt is sent as it is\n",
                 a->model.model);
    }
    if (raw) {
      tokens = m.tokenizer->encode(prompt, true, true);
    } else {
      auto formatter = ChatFormatter::create(m);
      if (!formatter) {
        ctx.exit_code = report_error(formatter.error().message);
        return;
      }
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!a->system.empty()) messages.push_back({{"role", "system"}, {"content", a->system}});
      messages.push_back({{"role", "user"}, {"content", prompt}});
      ChatPromptOptions po;
      if (a->think) po.enable_thinking = true;
      if (a->no_think) po.enable_thinking = false;
      auto t = formatter->tokens(messages, nullptr, po);
      if (!t) {
        ctx.exit_code = report_error(t.error().message);
        return;
      }
      tokens = std::move(*t);
    }
    Engine engine(m, EngineOptions{.parallel = 1});
    Request request;
    request.prompt = std::move(tokens);
    request.options = a->sampling.options();
    auto result = engine.generate(std::move(request), [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    if (!result) {
      ctx.exit_code = report_error(result.error().message);
      return;
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (a->stats) {
      fmt::print(
          stderr,
          "prompt {} tokens in {:.2f} s ({:.1f} tok/s), generated {} tokens at {:.1f} tok/s\n",
          result->prompt_tokens, result->prefill_seconds,
          static_cast<double>(result->prompt_tokens) / result->prefill_seconds,
          result->tokens.size(),
          result->tokens.size() > 1
              ? static_cast<double>(result->tokens.size() - 1) / result->decode_seconds
              : 0.0);
    }
  });
}

}  // namespace tern::cli

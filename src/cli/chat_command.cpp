// `tern chat`: an interactive, multi-turn conversation through the serving Engine with one slot.
// The history is kept, and each turn reuses the KV of the turns before it (the engine's prefix
// cache). Ctrl-C stops the reply being written (EventStream::cancel), not the program; Ctrl-D or
// /exit ends it.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>

#include "cli/model_options.h"
#include "engine/chat_prompt.h"
#include "engine/engine.h"

namespace tern::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) {
  g_interrupted.store(true);
}

}  // namespace

void add_chat_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  struct Args {
    ModelOptions model;
    SamplingOptions sampling;
    std::string system;
  };
  auto a = std::make_shared<Args>();
  a->model.add_to(*cmd);
  a->sampling.add_to(*cmd);
  cmd->add_option("-s,--system", a->system, "A system prompt");
  cmd->callback([&ctx, a] {
    auto loaded = a->model.load(ctx);
    if (!loaded) {
      ctx.exit_code = report_error(loaded.error().message);
      return;
    }
    LoadedModel& m = **loaded;
    auto formatter = ChatFormatter::create(m);
    if (!formatter) {
      ctx.exit_code = report_error(formatter.error().message);
      return;
    }
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: a Ctrl-C at the prompt interrupts the read

    // The engine's loop thread blocks SIGINT, so that a Ctrl-C reaches this thread's read.
    sigset_t sigint, previous;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigint, &previous);
    Engine engine(m, EngineOptions{.parallel = 1, .prefix_cache = true});
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    nlohmann::ordered_json history = nlohmann::ordered_json::array();
    if (!a->system.empty()) history.push_back({{"role", "system"}, {"content", a->system}});
    const bool tty = ::isatty(STDIN_FILENO) != 0;
    if (tty)
      fmt::print(
          "Chatting with {} ({}). /clear forgets, /exit or Ctrl-D quits, Ctrl-C stops a reply.\n",
          a->model.model, m.info.architecture);
    while (true) {
      if (tty) {
        fmt::print("\n> ");
        std::fflush(stdout);
      }
      std::string line;
      g_interrupted.store(false);
      if (!std::getline(std::cin, line)) {
        if (g_interrupted.load() && tty) {  // Ctrl-C at the prompt: a fresh prompt
          std::cin.clear();
          continue;
        }
        break;
      }
      if (line.empty()) continue;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/clear") {
        history = nlohmann::ordered_json::array();
        if (!a->system.empty()) history.push_back({{"role", "system"}, {"content", a->system}});
        fmt::print("(history cleared)\n");
        continue;
      }
      history.push_back({{"role", "user"}, {"content", line}});
      auto tokens = formatter->tokens(history, nullptr, {});
      if (!tokens) {
        report_error(tokens.error().message);
        history.erase(history.size() - 1);
        continue;
      }
      g_interrupted.store(false);
      Request request;
      request.prompt = std::move(*tokens);
      request.options = a->sampling.options();
      auto result = engine.generate(std::move(request), [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return !g_interrupted.load();
      });
      std::fputc('\n', stdout);
      if (!result) {
        report_error(result.error().message);
        history.erase(history.size() - 1);
        continue;
      }
      if (result->finish == FinishReason::Cancelled) fmt::print("(stopped)\n");
      history.push_back({{"role", "assistant"}, {"content", result->text}});
    }
  });
}

}  // namespace tern::cli

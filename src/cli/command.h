// Each `tern` subcommand lives in its own file and registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "base/error.h"
#include "io/model_store.h"

namespace tern::cli {

// Shared by every command: where the model store lives.
struct GlobalOptions {
  std::string home;  // --home, defaults to $TERN_HOME / ~/.cache/tern
};

// A command sets `exit_code` from its callback; errors go to stderr as "error: ...".
struct CommandContext {
  GlobalOptions global;
  int exit_code = 0;
};

void add_show_command(CLI::App& app, CommandContext& ctx);
void add_list_command(CLI::App& app, CommandContext& ctx);
void add_import_command(CLI::App& app, CommandContext& ctx);
void add_rm_command(CLI::App& app, CommandContext& ctx);
void add_tokenize_command(CLI::App& app, CommandContext& ctx);
void add_detokenize_command(CLI::App& app, CommandContext& ctx);
void add_bench_command(CLI::App& app, CommandContext& ctx);
// `tern bench compare` (bench_compare_command.cpp), under `tern bench`.
void add_bench_compare_command(CLI::App& bench, CommandContext& ctx);
void add_doctor_command(CLI::App& app, CommandContext& ctx);
void add_serve_command(CLI::App& app, CommandContext& ctx);
void add_run_command(CLI::App& app, CommandContext& ctx);
void add_chat_command(CLI::App& app, CommandContext& ctx);
void add_pull_command(CLI::App& app, CommandContext& ctx);
// The coding-agent launchers: `tern claude`, `tern codex`, ... (agent_commands.cpp).
void add_agent_commands(CLI::App& app, CommandContext& ctx);

// Validates a GGUF file (its architecture and metadata) and adds it to the store as `name`
// (import_command.cpp; used by import and pull). `source` is recorded as where it came from
// (default: the file's path).
Result<StoredModel> add_gguf_to_store(const ModelStore& store, const std::string& name,
                                      const std::string& gguf_path, bool link,
                                      const std::string& source = {});

// Prints "error: message" to stderr and returns the exit status for a failure.
int report_error(const std::string& message);

}  // namespace tern::cli

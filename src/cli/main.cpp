// `tern`: the command-line front end. One file per subcommand; this file only wires them up.
#include <fmt/format.h>

#include "cli/command.h"
#include "io/model_store.h"

namespace tern::cli {

int report_error(const std::string& message) {
  fmt::print(stderr, "error: {}\n", message);
  return 1;
}

}  // namespace tern::cli

int main(int argc, char** argv) {
  using namespace tern::cli;
  CLI::App app{"Tern: a local LLM inference engine and server for coding agents.", "tern"};
  app.set_version_flag("--version", "tern 0.1.0");
  app.require_subcommand(1);
  app.fallthrough();
  CommandContext ctx;
  ctx.global.home = tern::ModelStore::default_home();
  app.add_option("--home", ctx.global.home, "Tern home directory (model store); env TERN_HOME")
      ->capture_default_str();

  add_show_command(app, ctx);
  add_list_command(app, ctx);
  add_import_command(app, ctx);
  add_rm_command(app, ctx);
  add_tokenize_command(app, ctx);
  add_detokenize_command(app, ctx);
  add_bench_command(app, ctx);
  add_doctor_command(app, ctx);
  add_run_command(app, ctx);
  add_chat_command(app, ctx);
  add_serve_command(app, ctx);
  add_pull_command(app, ctx);
  add_agent_commands(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return ctx.exit_code;
}

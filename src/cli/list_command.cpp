// `tern list`: the models in the store with size, architecture and quantization.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/progress_bar.h"
#include "cli/command.h"
#include "config/model_info.h"
#include "io/model_store.h"

namespace tern::cli {

void add_list_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("list", "List installed models");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([&ctx, json] {
    ModelStore store(ctx.global.home);
    auto models = store.list();
    if (!models) {
      ctx.exit_code = report_error(models.error().message);
      return;
    }
    if (*json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& m : *models) {
        out.push_back({{"name", m.name},
                       {"files", m.files},
                       {"size_bytes", m.size_bytes},
                       {"architecture", m.architecture},
                       {"quantization", m.quantization},
                       {"parameter_count", m.parameter_count}});
      }
      fmt::print("{}\n", out.dump(2));
      return;
    }
    if (models->empty()) {
      fmt::print(
          "No models installed in {}. Import one with `tern import FILE.gguf --name NAME`.\n",
          store.models_directory());
      return;
    }
    fmt::print("{:<24} {:>10} {:<12} {:<10} {:>8}\n", "NAME", "SIZE", "ARCH", "QUANT", "PARAMS");
    for (const auto& m : *models) {
      fmt::print("{:<24} {:>10} {:<12} {:<10} {:>8}\n", m.name, format_bytes(m.size_bytes),
                 m.architecture, m.quantization, format_parameter_count(m.parameter_count));
    }
  });
}

}  // namespace tern::cli

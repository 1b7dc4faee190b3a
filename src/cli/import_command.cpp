// `tern import FILE.gguf --name N`: validates a GGUF file and adds it to the model store.
#include <fmt/format.h>

#include "cli/command.h"
#include "config/model_info.h"
#include "io/gguf_file.h"
#include "io/model_store.h"

namespace tern::cli {

void add_import_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("import", "Validate a GGUF file and add it to the model store");
  auto file = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto link = std::make_shared<bool>(false);
  cmd->add_option("file", *file, "The .gguf file (the first part of a split model)")->required();
  cmd->add_option("--name", *name, "Name to store it under (letters, digits, - _ . :)")->required();
  cmd->add_flag("--link", *link, "Hard-link instead of copying when on the same file system");
  cmd->callback([&ctx, file, name, link] {
    if (auto ok = ModelStore::check_name(*name); !ok) {
      ctx.exit_code = report_error(ok.error().message);
      return;
    }
    auto gguf = GgufFile::open(*file);
    if (!gguf) {
      ctx.exit_code = report_error(gguf.error().message);
      return;
    }
    auto info = model_info_from_gguf(*gguf);
    if (!info) {
      ctx.exit_code = report_error(info.error().message);
      return;
    }
    ModelStore store(ctx.global.home);
    auto added = store.add(*name, gguf->paths(),
                           {info->architecture, info->quantization, info->parameter_count}, *link);
    if (!added) {
      ctx.exit_code = report_error(added.error().message);
      return;
    }
    fmt::print("imported {} ({} {}, {} parameters) into {}\n", added->name, info->architecture,
               info->quantization, format_parameter_count(info->parameter_count), added->directory);
  });
}

void add_rm_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("rm", "Remove a model from the store");
  auto names = std::make_shared<std::vector<std::string>>();
  cmd->add_option("names", *names, "Model names")->required();
  cmd->callback([&ctx, names] {
    ModelStore store(ctx.global.home);
    for (const auto& n : *names) {
      if (auto ok = store.remove(n); !ok) {
        ctx.exit_code = report_error(ok.error().message);
        continue;
      }
      fmt::print("removed {}\n", n);
    }
  });
}

}  // namespace tern::cli

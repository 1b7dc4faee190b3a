// `tern import FILE.gguf|HF_DIR --name N [--quant TYPE]`: validates a GGUF file, or converts a
// Hugging Face directory (config.json + safetensors + tokenizer.json) to GGUF, and adds it to the
// model store.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "base/progress_bar.h"
#include "cli/command.h"
#include "config/hf_model.h"
#include "config/model_info.h"
#include "engine/hf_import.h"
#include "io/gguf_file.h"
#include "io/model_store.h"

namespace tern::cli {

Result<StoredModel> add_gguf_to_store(const ModelStore& store, const std::string& name,
                                      const std::string& gguf_path, bool link,
                                      const std::string& source) {
  auto gguf = GgufFile::open(gguf_path);
  if (!gguf) return gguf.error();
  auto info = model_info_from_gguf(*gguf);
  if (!info) return info.error();
  return store.add(name, gguf->paths(),
                   {info->architecture, info->quantization, info->parameter_count, source}, link);
}

void add_import_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand(
      "import",
      "Add a GGUF file, or a Hugging Face directory converted to GGUF, to the model store");
  struct Args {
    std::string source;
    std::string name;
    std::string quant;
    bool link = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("source", a->source,
                  "A .gguf file (the first part of a split model) or an HF model directory")
      ->required();
  cmd->add_option("--name", a->name, "Name to store it under (letters, digits, - _ . :)")
      ->required();
  cmd->add_option(
      "--quant", a->quant,
      "HF directories: convert the matrices to F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K "
      "(default: keep their precision)");
  cmd->add_flag("--link", a->link,
                "GGUF files: hard-link instead of copying when on the same file system");
  cmd->callback([&ctx, a] {
    if (auto ok = ModelStore::check_name(a->name); !ok) {
      ctx.exit_code = report_error(ok.error().message);
      return;
    }
    ModelStore store(ctx.global.home);
    std::vector<std::string> files;
    bool link = a->link;
    if (is_hf_model_dir(a->source)) {
      std::optional<TensorType> quant;
      if (!a->quant.empty()) {
        quant = tensor_type_from_name(a->quant);
        if (!quant) {
          ctx.exit_code = report_error(fmt::format("unknown --quant '{}'", a->quant));
          return;
        }
      }
      const auto dir = std::filesystem::path(store.models_directory()) / a->name;
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      const std::string out = (dir / (a->name + ".gguf")).string();
      std::unique_ptr<ProgressBar> bar;
      auto ok = write_gguf_from_hf(a->source, out, quant, [&](uint64_t done, uint64_t total) {
        if (!bar) bar = std::make_unique<ProgressBar>("converting " + a->name, total);
        bar->update(done);
      });
      if (bar) bar->finish();
      if (!ok) {
        ctx.exit_code = report_error(ok.error().message);
        return;
      }
      files.push_back(out);
      link = true;  // already in the store's directory
    } else if (!a->quant.empty()) {
      ctx.exit_code = report_error(
          "--quant applies to Hugging Face directories; GGUF files are imported as they are");
      return;
    } else {
      files.push_back(a->source);
    }
    auto added = add_gguf_to_store(store, a->name, files.front(), link);
    if (!added) {
      ctx.exit_code = report_error(added.error().message);
      return;
    }
    fmt::print("imported {} ({} {}, {} parameters) into {}\n", added->name, added->architecture,
               added->quantization, format_parameter_count(added->parameter_count),
               added->directory);
  });
}

void add_rm_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("rm", "Remove models from the store");
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

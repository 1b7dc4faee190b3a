// `tern pull HF_REPO:FILE [--revision R] [--name N]`: downloads a GGUF file from a Hugging
// Face-compatible hub ($HF_ENDPOINT, $HF_TOKEN) into the model store, resuming an interrupted
// download and verifying the hub's sha256 before the file is added.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "base/progress_bar.h"
#include "cli/command.h"
#include "config/model_info.h"
#include "io/hub_client.h"
#include "io/model_store.h"

namespace tern::cli {
namespace {

struct PullTarget {
  std::string repo;
  std::string file;
};

Result<PullTarget> parse_target(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size() ||
      spec.find('/') == std::string::npos || spec.find('/') > colon) {
    return make_error("'{}' is not HF_REPO:FILE (e.g. Qwen/Qwen3-8B-GGUF:Qwen3-8B-Q4_K_M.gguf)",
                      spec);
  }
  return PullTarget{spec.substr(0, colon), spec.substr(colon + 1)};
}

std::string default_name(const std::string& file) {
  std::string stem = std::filesystem::path(file).stem().string();
  for (char& c : stem) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    if (!ok) c = '-';
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return stem;
}

}  // namespace

void add_pull_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand(
      "pull", "Download a GGUF model from a Hugging Face-compatible hub into the model store");
  struct Args {
    std::string target;
    std::string revision = "main";
    std::string name;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("target", a->target, "HF_REPO:FILE, e.g. Qwen/Qwen3-8B-GGUF:Qwen3-8B-Q4_K_M.gguf")
      ->required();
  cmd->add_option("--revision", a->revision, "Branch, tag or commit of the repository")
      ->capture_default_str();
  cmd->add_option("--name", a->name, "Store name (default: the file's name, lowercased)");
  cmd->footer(
      "Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN for gated or private "
      "repositories. An interrupted download resumes when the command is run again.");
  cmd->callback([&ctx, a] {
    auto target = parse_target(a->target);
    if (!target) {
      ctx.exit_code = report_error(target.error().message);
      return;
    }
    const std::string name = a->name.empty() ? default_name(target->file) : a->name;
    if (auto ok = ModelStore::check_name(name); !ok) {
      ctx.exit_code = report_error(ok.error().message);
      return;
    }
    ModelStore store(ctx.global.home);
    if (store.find(name)) {
      fmt::print("{} is already installed\n", name);
      return;
    }
    HubClient hub(HubOptions::from_environment());
    auto files = hub.list_files(target->repo, a->revision);
    if (!files) {
      ctx.exit_code = report_error(files.error().message);
      return;
    }
    const HubFile* file = nullptr;
    for (const auto& f : *files)
      if (f.path == target->file) file = &f;
    if (file == nullptr) {
      std::string ggufs;
      for (const auto& f : *files)
        if (f.path.ends_with(".gguf")) ggufs += "\n  " + target->repo + ":" + f.path;
      ctx.exit_code =
          report_error(fmt::format("{} has no file {} at {}{}{}", target->repo, target->file,
                                   a->revision, ggufs.empty() ? "" : "; its GGUF files:", ggufs));
      return;
    }
    const auto downloads = std::filesystem::path(store.home()) / "downloads";
    std::error_code ec;
    std::filesystem::create_directories(downloads, ec);
    const std::string dest = (downloads / std::filesystem::path(file->path).filename()).string();
    std::unique_ptr<ProgressBar> bar;
    auto ok =
        hub.download(target->repo, a->revision, *file, dest, [&](uint64_t done, uint64_t total) {
          if (!bar) bar = std::make_unique<ProgressBar>("pulling " + name, total);
          bar->update(done);
        });
    if (bar) bar->finish();
    if (!ok) {
      ctx.exit_code = report_error(ok.error().message);
      return;
    }
    auto added = add_gguf_to_store(store, name, dest, /*link=*/true);
    if (!added) {
      ctx.exit_code = report_error(added.error().message);
      return;
    }
    std::filesystem::remove(dest, ec);  // the store holds a hard link (or a copy)
    fmt::print("pulled {} ({} {}, {} parameters, sha256 {}) into {}\n", added->name,
               added->architecture, added->quantization,
               format_parameter_count(added->parameter_count),
               file->sha256.empty() ? "not listed" : file->sha256.substr(0, 12), added->directory);
  });
}

}  // namespace tern::cli

// `tern pull NAME[:QUANT] | HF_REPO[:FILE]`: downloads a GGUF file from a Hugging Face-compatible
// hub ($HF_ENDPOINT, $HF_TOKEN) into the model store. A catalog NAME picks the repository, the
// pinned revision and the file of a quantization (the most precise that fits this machine with
// 8K tokens of context, as `tern doctor` recommends, unless one is asked for). The revision is
// resolved to a commit first, so that a download resumed later reads the same bytes; the hub's
// sha256 is verified before the file is added.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

#include "base/progress_bar.h"
#include "cli/command.h"
#include "cli/machine_info.h"
#include "config/model_info.h"
#include "io/catalog.h"
#include "io/hub_client.h"
#include "io/model_store.h"

namespace tern::cli {
namespace {

constexpr int64_t kPlanContextTokens = 8192;  // what doctor's recommendation leaves room for

// What to fetch: a repository at a revision, and either a file or a quantization to find in it.
struct PullPlan {
  std::string repo;
  std::string revision = "main";
  std::string file;          // empty: the repository's one GGUF file of `quantization`
  std::string quantization;  // for finding the file; empty: any
  std::string name;          // store name
};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
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

// HF_REPO[:FILE]: an owner/name repository, optionally a file in it.
Result<PullPlan> plan_for_repo(const std::string& spec, const std::string& quant) {
  PullPlan plan;
  const size_t colon = spec.find(':');
  plan.repo = spec.substr(0, colon);
  if (colon != std::string::npos) plan.file = spec.substr(colon + 1);
  const size_t slash = plan.repo.find('/');
  // The hub's repository ids: owner/name of letters, digits, '-', '_' and '.', not "." or "..".
  auto valid_part = [](const std::string& part) {
    return !part.empty() && part != "." && part != ".." &&
           std::all_of(part.begin(), part.end(), [](char c) {
             return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
           });
  };
  if (slash == std::string::npos || !valid_part(plan.repo.substr(0, slash)) ||
      !valid_part(plan.repo.substr(slash + 1)) ||
      (colon != std::string::npos && plan.file.empty())) {
    return make_error(
        "'{}' is not HF_REPO[:FILE] (e.g. Qwen/Qwen3-8B-GGUF:Qwen3-8B-Q4_K_M.gguf) nor a catalog "
        "name",
        spec);
  }
  plan.quantization = upper(quant);
  return plan;
}

// NAME[:QUANT] from the catalog.
Result<PullPlan> plan_for_catalog_name(const std::string& spec, std::string quant) {
  auto catalog = Catalog::load();
  if (!catalog) return catalog.error();
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  if (colon != std::string::npos) {
    if (!quant.empty()) return make_error("give the quantization once: {} or --quant", spec);
    quant = spec.substr(colon + 1);
  }
  const CatalogModel* model = catalog->find(name);
  if (model == nullptr) {
    std::vector<std::string> names;
    for (const auto& m : catalog->models) names.push_back(m.name);
    return make_error("unknown model '{}'. The catalog has: {}; or pull HF_REPO[:FILE]", name,
                      fmt::join(names, ", "));
  }
  PullPlan plan;
  plan.repo = model->repo;
  plan.revision = model->revision;
  plan.name = model->name;
  if (!quant.empty()) {
    const CatalogFile* file = model->file_for(upper(quant));
    if (file == nullptr) {
      std::vector<std::string> have;
      for (const auto& f : model->files) have.push_back(f.quantization);
      return make_error("{} has no {} file in the catalog; it has {}", name, quant,
                        fmt::join(have, ", "));
    }
    plan.file = file->path;
    plan.quantization = file->quantization;
    return plan;
  }
  const auto mem = memory_info();
  const auto budget = memory_budget(gpus(), mem);
  auto best = catalog->recommend(*model, budget.bytes, kPlanContextTokens);
  if (!best) {
    const MemoryFit smallest = catalog->fits(*model, budget.bytes, kPlanContextTokens).back();
    fmt::print(stderr,
               "tern: warning: no quantization of {} fits in {} of {} with {} tokens of "
               "context; pulling the smallest, {} ({} of weights)\n",
               name, format_bytes(budget.bytes), budget.from, kPlanContextTokens,
               smallest.quantization, format_bytes(smallest.weight_bytes));
    best = smallest.quantization;
  }
  plan.file = model->file_for(*best)->path;
  plan.quantization = *best;
  if (!model->pinned()) {
    fmt::print(stderr,
               "tern: note: the catalog does not pin {}'s revision ({}); the commit it resolves "
               "to now is recorded\n",
               name, model->revision);
  }
  return plan;
}

// The file to download: the planned one when the listing has it, else the one GGUF file whose
// name carries the quantization (repositories rename files; the tag stays).
Result<const HubFile*> choose_file(const std::vector<HubFile>& files, const PullPlan& plan) {
  std::vector<const HubFile*> ggufs;
  for (const auto& f : files) {
    if (f.path == plan.file) return &f;
    if (f.path.ends_with(".gguf")) ggufs.push_back(&f);
  }
  std::vector<const HubFile*> tagged;
  for (const HubFile* f : ggufs) {
    const std::string base = upper(std::filesystem::path(f->path).filename().string());
    if (plan.quantization.empty() || base.find(plan.quantization) != std::string::npos)
      tagged.push_back(f);
  }
  if (tagged.size() == 1 && (plan.file.empty() || !plan.quantization.empty())) {
    if (!plan.file.empty())
      fmt::print(stderr, "tern: note: {} has no {}; its {} file is {}\n", plan.repo, plan.file,
                 plan.quantization, tagged[0]->path);
    return tagged[0];
  }
  std::string listing;
  for (const HubFile* f : ggufs) listing += "\n  " + plan.repo + ":" + f->path;
  const std::string wanted =
      !plan.file.empty() ? "no file " + plan.file
                         : fmt::format("{} GGUF files{}", tagged.size() > 1 ? "several" : "no",
                                       plan.quantization.empty() ? "" : " of " + plan.quantization);
  return make_error("{} has {} at {}{}{}", plan.repo, wanted, plan.revision,
                    ggufs.empty() ? "" : "; its GGUF files:", listing);
}

}  // namespace

void add_pull_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand(
      "pull", "Download a model by catalog name or from a Hugging Face-compatible hub");
  struct Args {
    std::string target;
    std::string revision;
    std::string name;
    std::string quant;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("target", a->target,
                  "A catalog name (qwen3-8b, qwen3-8b:Q8_0; see tern doctor) or HF_REPO[:FILE] "
                  "(Qwen/Qwen3-8B-GGUF:Qwen3-8B-Q4_K_M.gguf)")
      ->required();
  cmd->add_option("--quant", a->quant,
                  "Quantization: of a catalog model (default: the most precise that fits, as "
                  "tern doctor recommends), or the tag to pick in an HF repository");
  cmd->add_option("--revision", a->revision,
                  "Branch, tag or commit (default: the catalog's pinned one, else main)");
  cmd->add_option("--name", a->name,
                  "Store name (default: the catalog name, else the file's name, lowercased)");
  cmd->footer(
      "Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN for gated or private "
      "repositories, TERN_CATALOG for another catalog file. An interrupted download resumes "
      "when the command is run again.");
  cmd->callback([&ctx, a] {
    const bool is_repo = a->target.find('/') != std::string::npos;
    auto plan =
        is_repo ? plan_for_repo(a->target, a->quant) : plan_for_catalog_name(a->target, a->quant);
    if (!plan) {
      ctx.exit_code = report_error(plan.error().message);
      return;
    }
    if (!a->revision.empty()) plan->revision = a->revision;
    if (!a->name.empty()) plan->name = a->name;
    ModelStore store(ctx.global.home);
    if (!plan->name.empty()) {
      if (auto ok = ModelStore::check_name(plan->name); !ok) {
        ctx.exit_code = report_error(ok.error().message);
        return;
      }
      if (auto have = store.find(plan->name)) {
        fmt::print("{} is already installed ({}, from {})\n", plan->name, have->quantization,
                   have->source);
        return;
      }
    }
    HubClient hub(HubOptions::from_environment());
    auto commit = hub.resolve_revision(plan->repo, plan->revision);
    if (!commit) {
      ctx.exit_code = report_error(commit.error().message);
      return;
    }
    auto files = hub.list_files(plan->repo, *commit);
    if (!files) {
      ctx.exit_code = report_error(files.error().message);
      return;
    }
    auto chosen = choose_file(*files, *plan);
    if (!chosen) {
      ctx.exit_code = report_error(chosen.error().message);
      return;
    }
    const HubFile& file = **chosen;
    const std::string name = plan->name.empty() ? default_name(file.path) : plan->name;
    if (auto ok = ModelStore::check_name(name); !ok) {
      ctx.exit_code = report_error(ok.error().message);
      return;
    }
    if (plan->name.empty() && store.find(name)) {
      fmt::print("{} is already installed\n", name);
      return;
    }
    const auto downloads = std::filesystem::path(store.home()) / "downloads";
    std::error_code ec;
    std::filesystem::create_directories(downloads, ec);
    // Named by commit, so that a .part left by another revision is never resumed.
    const std::string dest = (downloads / (commit->substr(0, 12) + "-" +
                                           std::filesystem::path(file.path).filename().string()))
                                 .string();
    std::unique_ptr<ProgressBar> bar;
    auto ok = hub.download(plan->repo, *commit, file, dest, [&](uint64_t done, uint64_t total) {
      if (!bar) bar = std::make_unique<ProgressBar>("pulling " + name, total);
      bar->update(done);
    });
    if (bar) bar->finish();
    if (!ok) {
      ctx.exit_code = report_error(ok.error().message);
      return;
    }
    const std::string source = fmt::format("hf://{}@{}/{}", plan->repo, *commit, file.path);
    auto added = add_gguf_to_store(store, name, dest, /*link=*/true, source);
    if (!added) {
      ctx.exit_code = report_error(added.error().message);
      return;
    }
    std::filesystem::remove(dest, ec);  // the store holds a hard link (or a copy)
    fmt::print("pulled {} ({} {}, {} parameters) from {}@{} {} (sha256 {}) into {}\n", added->name,
               added->architecture, added->quantization,
               format_parameter_count(added->parameter_count), plan->repo, commit->substr(0, 12),
               file.path, file.sha256.empty() ? "not listed" : file.sha256.substr(0, 12),
               added->directory);
  });
}

}  // namespace tern::cli

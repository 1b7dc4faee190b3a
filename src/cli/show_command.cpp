// `tern show FILE|NAME`: a model file's metadata and tensor table, as text or JSON.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/progress_bar.h"
#include "cli/command.h"
#include "config/model_info.h"
#include "io/gguf_file.h"
#include "io/model_store.h"

namespace tern::cli {
namespace {

nlohmann::json value_to_json(const GgufValue& v) {
  if (auto* s = v.as_string()) return *s;
  if (auto* b = std::get_if<bool>(&v.data)) return *b;
  if (auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (auto* d = std::get_if<double>(&v.data)) return *d;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& item : v.as_array()->items) arr.push_back(value_to_json(item));
  return arr;
}

std::string shape_text(const GgufTensor& t) {
  std::string s;
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? " x " : "") + std::to_string(t.shape[i]);
  return s;
}

void print_text(const GgufFile& file, const ModelInfo* info, bool all) {
  fmt::print("file        {}\n", fmt::join(file.paths(), ", "));
  fmt::print("format      GGUF v{}, alignment {}, {}\n", file.version(), file.alignment(),
             format_bytes(file.total_bytes()));
  if (info != nullptr) {
    fmt::print("model       {} ({}), {} parameters, {}\n",
               info->name.empty() ? "unnamed" : info->name, info->architecture,
               format_parameter_count(info->parameter_count), info->quantization);
  }
  fmt::print("\nmetadata ({} keys)\n", file.metadata().size());
  for (const auto& [key, value] : file.metadata().entries()) {
    std::string shown = value.to_display(all ? SIZE_MAX : 8);
    if (!all && shown.size() > 160) shown = shown.substr(0, 157) + "...";
    fmt::print("  {:<40} {:<4} {}\n", key, gguf_value_type_name(value.type), shown);
  }
  fmt::print("\ntensors ({}, {})\n", file.tensors().size(), format_bytes(file.tensor_bytes()));
  fmt::print("  {:<40} {:<8} {:<24} {:>12} {:>12}\n", "name", "type", "shape", "offset", "bytes");
  for (const auto& t : file.tensors()) {
    fmt::print("  {:<40} {:<8} {:<24} {:>12} {:>12}\n", t.name, tensor_type_name(t.type),
               shape_text(t), t.offset, t.size_bytes);
  }
}

nlohmann::json to_json(const GgufFile& file, const ModelInfo* info) {
  nlohmann::json j;
  j["paths"] = file.paths();
  j["version"] = file.version();
  j["alignment"] = file.alignment();
  j["size_bytes"] = file.total_bytes();
  if (info != nullptr) {
    j["architecture"] = info->architecture;
    j["quantization"] = info->quantization;
    j["parameter_count"] = info->parameter_count;
  }
  nlohmann::json md = nlohmann::json::object();
  for (const auto& [key, value] : file.metadata().entries()) {
    md[key] = {{"type", gguf_value_type_name(value.type)}, {"value", value_to_json(value)}};
  }
  j["metadata"] = std::move(md);
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : file.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"type", tensor_type_name(t.type)},
                       {"shape", t.shape},
                       {"offset", t.offset},
                       {"size_bytes", t.size_bytes},
                       {"split", t.split_index}});
  }
  j["tensors"] = std::move(tensors);
  return j;
}

}  // namespace

void add_show_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("show", "Print a model file's metadata and tensor table");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto all = std::make_shared<bool>(false);
  cmd->add_option("model", *model, "A .gguf file (the first part of a split model) or a model name")
      ->required();
  cmd->add_flag("--json", *json, "Print JSON (every metadata value in full)");
  cmd->add_flag("--all", *all, "Print long arrays in full instead of abbreviating them");
  cmd->callback([&ctx, model, json, all] {
    ModelStore store(ctx.global.home);
    auto path = store.resolve_model_file(*model);
    if (!path) {
      ctx.exit_code = report_error(path.error().message);
      return;
    }
    auto file = GgufFile::open(*path);
    if (!file) {
      ctx.exit_code = report_error(file.error().message);
      return;
    }
    auto info = model_info_from_gguf(*file);
    const ModelInfo* info_ptr = info ? &*info : nullptr;
    if (*json) {
      fmt::print(
          "{}\n",
          to_json(*file, info_ptr).dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      print_text(*file, info_ptr, *all);
    }
  });
}

}  // namespace tern::cli

// `tern doctor`: what this machine is (CPU and its vector features, cores, memory, disk, GPUs, the
// links between them (the driver's topology matrix) and,
// in a CUDA build, their copy bandwidth measured on the spot)
// and which catalog models and quantizations fit it with room for 8K tokens of context.
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "backend/cpu/cpu_features.h"
#include "base/progress_bar.h"
#include "cli/command.h"
#include "cli/machine_info.h"
#include "config/model_info.h"
#include "engine/gpu_probe.h"
#include "io/catalog.h"
#include "io/model_store.h"

namespace tern::cli {

void add_doctor_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("doctor", "Describe this machine and which models fit it");
  auto json = std::make_shared<bool>(false);
  auto context = std::make_shared<int64_t>(8192);
  cmd->add_flag("--json", *json, "Print JSON");
  auto memory_text = std::make_shared<std::string>();
  cmd->add_option("--context", *context, "Context tokens to leave room for")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 22))
      ->capture_default_str();
  cmd->add_option("--memory", *memory_text,
                  "Plan for this much memory instead of this machine's (e.g. 24G, 80GiB)");
  cmd->callback([&ctx, json, context, memory_text] {
    const auto f = cpu::detect_cpu_features();
    const MemoryInfo mem = memory_info();
    const uint64_t mem_total = mem.total, mem_available = mem.available;
    struct statvfs vfs {};
    std::error_code ec;
    std::filesystem::create_directories(ctx.global.home, ec);
    uint64_t disk_free = ::statvfs(ctx.global.home.c_str(), &vfs) == 0
                             ? static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize
                             : 0;
    auto gpu_list = gpus();
    const std::vector<GpuLink> links = gpu_list.size() > 1 ? gpu_links() : std::vector<GpuLink>{};
    // The GPUs as this build's CUDA runtime sees them, copy bandwidth measured now; only where
    // the driver reports a GPU (a CPU build says it has no CUDA backend).
    std::optional<Result<std::vector<GpuProbe>>> probed;
    if (!gpu_list.empty()) probed = probe_gpus();
    auto catalog = Catalog::load();
    if (!catalog) {
      ctx.exit_code = report_error(catalog.error().message);
      return;
    }
    MemoryBudget budget = memory_budget(gpu_list, mem);
    if (!memory_text->empty()) {
      budget = {parse_memory_size(*memory_text), "--memory"};
      if (budget.bytes == 0) {
        ctx.exit_code = report_error(
            fmt::format("--memory {}: not a size (e.g. 24G, 80GiB, 512M)", *memory_text));
        return;
      }
    }
    std::vector<std::string> feature_names;
    auto add_feature = [&](bool has, const char* name) {
      if (has) feature_names.emplace_back(name);
    };
    add_feature(f.avx2, "avx2");
    add_feature(f.fma, "fma");
    add_feature(f.f16c, "f16c");
    add_feature(f.avx512f, "avx512f");
    add_feature(f.avx512bw, "avx512bw");
    add_feature(f.avx512_vnni, "avx512_vnni");
    add_feature(f.avx_vnni, "avx_vnni");
    add_feature(f.avx512_bf16, "avx512_bf16");
    add_feature(f.amx, "amx");
    const std::string path(cpu::cpu_path_name(cpu::default_cpu_path()));

    nlohmann::json fits = nlohmann::json::array();
    for (const auto& m : catalog->models) {
      nlohmann::json quants = nlohmann::json::array();
      for (const auto& fit : catalog->fits(m, budget.bytes, *context)) {
        if (fit.fits)
          quants.push_back(
              {{"quantization", fit.quantization}, {"bytes", fit.weight_bytes + fit.kv_bytes}});
      }
      const auto best = catalog->recommend(m, budget.bytes, *context);
      fits.push_back({{"model", m.name},
                      {"parameters", m.parameters},
                      {"recommended", best ? nlohmann::json(*best) : nlohmann::json()},
                      {"fits", quants}});
    }
    if (*json) {
      nlohmann::json out;
      out["cpu"] = {{"model", cpu_model_name()},
                    {"threads", std::thread::hardware_concurrency()},
                    {"features", feature_names},
                    {"kernel_path", path}};
      out["memory"] = {{"total", mem_total}, {"available", mem_available}};
      out["disk"] = {{"path", ctx.global.home}, {"free", disk_free}};
      nlohmann::json g = nlohmann::json::array();
      for (const auto& x : gpu_list)
        g.push_back({{"name", x.name}, {"memory", x.memory_bytes}, {"driver", x.driver}});
      out["gpus"] = g;
      nlohmann::json l = nlohmann::json::array();
      for (const auto& x : links) {
        l.push_back({{"gpus", {x.a, x.b}},
                     {"path", x.path},
                     {"nvlinks", x.nvlinks},
                     {"description", describe_gpu_link(x)}});
      }
      out["gpu_links"] = l;
      if (probed) {
        nlohmann::json c = nlohmann::json::array();
        if (*probed) {
          for (const auto& p : **probed) {
            c.push_back(
                {{"ordinal", p.ordinal},
                 {"name", p.name},
                 {"compute_capability", fmt::format("{}.{}", p.compute_major, p.compute_minor)},
                 {"memory", p.total_bytes},
                 {"free", p.free_bytes},
                 {"copy_gb_s", p.copy_gb_s},
                 {"copy_error", p.copy_error}});
          }
          out["cuda"] = c;
        } else {
          out["cuda"] = {{"error", probed->error().message}};
        }
      }
      out["budget"] = {
          {"bytes", budget.bytes}, {"from", budget.from}, {"context_tokens", *context}};
      out["catalog"] = fits;
      fmt::print("{}\n", out.dump(2));
      return;
    }
    fmt::print("cpu       {} ({} threads)\n", cpu_model_name(),
               std::thread::hardware_concurrency());
    fmt::print("features  {}\n", fmt::join(feature_names, " "));
    fmt::print("kernels   {} (set TERN_CPU_PATH=scalar|avx2|avx512 to override)\n", path);
    fmt::print("memory    {} total, {} available\n", format_bytes(mem_total),
               format_bytes(mem_available));
    fmt::print("disk      {} free in {}\n", format_bytes(disk_free), ctx.global.home);
    if (gpu_list.empty()) {
      fmt::print("gpus      none found (nvidia-smi)\n");
    } else {
      for (const auto& g : gpu_list) {
        fmt::print("gpu       {}, {}, driver {}\n", g.name, format_bytes(g.memory_bytes), g.driver);
      }
      for (const auto& x : links) {
        fmt::print("link      GPU{} - GPU{}: {}\n", x.a, x.b, describe_gpu_link(x));
      }
      if (gpu_list.size() > 1 && links.empty()) {
        fmt::print("links     not reported by the driver (nvidia-smi topo -m)\n");
      }
      if (probed && !*probed) {
        fmt::print("cuda      {}\n", probed->error().message);
      } else if (probed) {
        for (const auto& p : **probed) {
          const std::string copy =
              p.copy_error.empty()
                  ? fmt::format("copy bandwidth {:.0f} GB/s (measured now)", p.copy_gb_s)
                  : "copy bandwidth not measured: " + p.copy_error;
          fmt::print("cuda {}    {}, compute {}.{}, {} ({} free), CUDA {}.{}; {}\n", p.ordinal,
                     p.name, p.compute_major, p.compute_minor, format_bytes(p.total_bytes),
                     format_bytes(p.free_bytes), p.runtime_version / 1000,
                     p.runtime_version % 1000 / 10, copy);
        }
      }
    }
    fmt::print(
        "\nCatalog models for {} of {} with {} tokens of context (tern pull NAME gets the "
        "recommended one):\n",
        format_bytes(budget.bytes), budget.from, *context);
    fmt::print("  {:<22} {:>8}  {:<12} {}\n", "MODEL", "PARAMS", "RECOMMENDED", "ALSO FITS");
    for (const auto& entry : fits) {
      std::vector<std::string> others;
      for (const auto& q : entry["fits"]) {
        if (q["quantization"] != entry["recommended"])
          others.push_back(q["quantization"].get<std::string>());
      }
      fmt::print("  {:<22} {:>8}  {:<12} {}\n", entry["model"].get<std::string>(),
                 format_parameter_count(entry["parameters"].get<uint64_t>()),
                 entry["recommended"].is_null() ? std::string("(none fits)")
                                                : entry["recommended"].get<std::string>(),
                 fmt::format("{}", fmt::join(others, " ")));
    }
  });
}

}  // namespace tern::cli

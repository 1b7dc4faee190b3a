// `tern doctor`: what this machine is (CPU and its vector features, cores, memory, disk, GPUs)
// and which catalog models and quantizations fit it with room for 8K tokens of context.
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/cpu/cpu_features.h"
#include "base/progress_bar.h"
#include "cli/command.h"
#include "config/model_info.h"
#include "io/catalog.h"
#include "io/model_store.h"

namespace tern::cli {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// MemTotal and MemAvailable from /proc/meminfo, in bytes.
std::pair<uint64_t, uint64_t> memory() {
  std::ifstream in("/proc/meminfo");
  uint64_t total = 0, available = 0;
  for (std::string key; in >> key;) {
    uint64_t kb = 0;
    in >> kb;
    if (key == "MemTotal:") total = kb * 1024;
    if (key == "MemAvailable:") available = kb * 1024;
    in.ignore(64, '\n');
  }
  return {total, available};
}

struct Gpu {
  std::string name;
  uint64_t memory_bytes = 0;
  std::string driver;
};

// GPUs as the NVIDIA driver reports them (nvidia-smi), without needing a CUDA build.
std::vector<Gpu> gpus() {
  std::vector<Gpu> out;
  FILE* p = ::popen(
      "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits "
      "2>/dev/null",
      "r");
  if (p == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::string s(line);
    auto a = s.find(','), b = s.find(',', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    Gpu g;
    g.name = s.substr(0, a);
    g.memory_bytes = std::strtoull(s.c_str() + a + 1, nullptr, 10) << 20;
    g.driver = s.substr(b + 2, s.find_last_not_of(" \n") - b - 1);
    out.push_back(g);
  }
  ::pclose(p);
  return out;
}

}  // namespace

void add_doctor_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("doctor", "Describe this machine and which models fit it");
  auto json = std::make_shared<bool>(false);
  auto context = std::make_shared<int64_t>(8192);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--context", *context, "Context tokens to leave room for")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 22))
      ->capture_default_str();
  cmd->callback([&ctx, json, context] {
    const auto f = cpu::detect_cpu_features();
    const auto [mem_total, mem_available] = memory();
    struct statvfs vfs {};
    std::error_code ec;
    std::filesystem::create_directories(ctx.global.home, ec);
    uint64_t disk_free = ::statvfs(ctx.global.home.c_str(), &vfs) == 0
                             ? static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize
                             : 0;
    auto gpu_list = gpus();
    auto catalog = Catalog::builtin();
    if (!catalog) {
      ctx.exit_code = report_error(catalog.error().message);
      return;
    }
    // Memory a model may use: the largest GPU's, else the RAM available now, minus 1 GiB.
    uint64_t budget = mem_available;
    std::string budget_where = "RAM available";
    if (!gpu_list.empty()) {
      budget = 0;
      budget_where = "GPU memory";
      for (const auto& g : gpu_list) budget = std::max(budget, g.memory_bytes);
    }
    const uint64_t reserve = uint64_t{1} << 30;
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
      const uint64_t kv = m.kv_bytes(std::min(*context, m.context));
      nlohmann::json quants = nlohmann::json::array();
      for (const auto& q : catalog->quantizations) {
        const auto weights =
            static_cast<uint64_t>(static_cast<double>(m.parameters) * q.bits_per_weight / 8.0);
        if (weights + kv + reserve <= budget)
          quants.push_back({{"quantization", q.name}, {"bytes", weights + kv}});
      }
      fits.push_back({{"model", m.name}, {"parameters", m.parameters}, {"fits", quants}});
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
      out["budget"] = {{"bytes", budget}, {"from", budget_where}, {"context_tokens", *context}};
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
    }
    fmt::print("\nModels that fit in {} of {} with {} tokens of context (most precise first):\n",
               format_bytes(budget), budget_where, *context);
    fmt::print("  {:<22} {:>8}  {}\n", "MODEL", "PARAMS", "QUANTIZATIONS THAT FIT");
    for (const auto& entry : fits) {
      std::vector<std::string> names;
      for (const auto& q : entry["fits"]) names.push_back(q["quantization"].get<std::string>());
      fmt::print("  {:<22} {:>8}  {}\n", entry["model"].get<std::string>(),
                 format_parameter_count(entry["parameters"].get<uint64_t>()),
                 names.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(names, " ")));
    }
  });
}

}  // namespace tern::cli

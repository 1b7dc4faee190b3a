// `tern bench compare`: the same prefill/decode test on Tern and on every other engine found
// installed (llama.cpp's llama-bench and llama-server, Ollama), on the very same GGUF file, as
// BENCHMARKS.md asks: one warm-up run each, then runs interleaved A B C A B C, median and range;
// a table, or a Markdown report with the machine and the commands (--report).
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/progress_bar.h"
#include "cli/command.h"
#include "cli/compare/engines.h"
#include "cli/machine_info.h"
#include "cli/median_range.h"
#include "io/model_store.h"

namespace tern::cli {
namespace {

struct EngineResult {
  std::string name, version, commands, error;
  MedianRange prefill, decode;
};

std::string self_path() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("tern") : p.string();
}

std::string cell(const MedianRange& f) {
  if (f.median <= 0) return "-";
  return fmt::format("{:.1f} [{:.1f}-{:.1f}]", f.median, f.low, f.high);
}

std::string ratio(const MedianRange& a, const MedianRange& b) {
  if (a.median <= 0 || b.median <= 0) return "-";
  return fmt::format("{:.2f}", a.median / b.median);
}

}  // namespace

void add_bench_compare_command(CLI::App& bench, CommandContext& ctx) {
  auto* cmd = bench.add_subcommand(
      "compare", "Run the same prefill/decode test on Tern and every other engine installed");
  struct Args {
    std::string model;
    int64_t prompt_tokens = 512;
    int64_t gen_tokens = 128;
    int runs = 3;
    int threads = 0;
    std::string device = "cpu";
    std::vector<std::string> engines;
    std::string llama_bin;
    std::string report;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-m,--model", a->model, "A store name or a .gguf file")->required();
  cmd->add_option("-p,--prompt-tokens", a->prompt_tokens, "Prompt length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("-n,--gen-tokens", a->gen_tokens, "Tokens generated after the prompt")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("-r,--runs", a->runs, "Timed runs per engine, interleaved, after a warm-up")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("-t,--threads", a->threads,
                  "CPU threads for every engine (0: each one's default)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--device", a->device, "cpu, or cuda: all layers on the GPU for every engine")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--engines", a->engines,
                  "Only these: tern, llama-bench, llama-server, ollama, vllm (default: all found)")
      ->check(CLI::IsMember({"tern", "llama-bench", "llama-server", "ollama", "vllm"}))
      ->delimiter(',');
  cmd->add_option("--llama-bin", a->llama_bin,
                  "Folder of a llama.cpp build (llama-bench, llama-server; default: PATH)");
  cmd->add_option("--report", a->report, "Write a Markdown report to this file (- : stdout)");
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&ctx, a] {
    ModelStore store(ctx.global.home);
    auto file = store.resolve_model_file(a->model);
    if (!file) {
      ctx.exit_code = report_error(file.error().message);
      return;
    }
    if (!a->llama_bin.empty() && !std::filesystem::is_directory(a->llama_bin)) {
      ctx.exit_code = report_error(fmt::format("--llama-bin {}: not a folder", a->llama_bin));
      return;
    }
    CompareSetup setup;
    setup.model_file = std::filesystem::absolute(*file).string();
    setup.prompt_tokens = a->prompt_tokens;
    setup.gen_tokens = a->gen_tokens;
    setup.threads = a->threads;
    setup.gpu = a->device == "cuda";
    const auto work =
        std::filesystem::path(store.home()) / "logs" / fmt::format("bench-compare-{}", ::getpid());
    std::error_code ec;
    std::filesystem::create_directories(work, ec);
    setup.work_dir = work.string();
    auto found = find_engines(setup, {self_path(), a->llama_bin, a->engines});
    for (const auto& why : found.not_run) fmt::print(stderr, "tern: {}\n", why);
    if (found.engines.empty()) {
      ctx.exit_code = report_error("no engine to run");
      return;
    }
    std::vector<EngineResult> results(found.engines.size());
    std::vector<std::vector<double>> prefill(found.engines.size()), decode(found.engines.size());
    std::vector<bool> ok(found.engines.size(), true);
    for (size_t i = 0; i < found.engines.size(); ++i) {
      auto& e = *found.engines[i];
      results[i].name = e.name();
      fmt::print(stderr, "tern: preparing {}...\n", e.name());
      if (auto r = e.prepare(); !r) {
        results[i].error = r.error().message;
        ok[i] = false;
      }
    }
    const int total = (a->runs + 1) * static_cast<int>(found.engines.size());
    ProgressBar bar("bench compare", static_cast<uint64_t>(total));
    int done = 0;
    for (int run = 0; run <= a->runs; ++run) {  // run 0 is every engine's warm-up
      for (size_t i = 0; i < found.engines.size(); ++i) {
        bar.update(static_cast<uint64_t>(done++));
        if (!ok[i]) continue;
        auto m = found.engines[i]->measure(run);
        if (!m) {
          results[i].error = m.error().message;
          ok[i] = false;
          continue;
        }
        if (run == 0) continue;
        prefill[i].push_back(m->prefill_tok_s);
        decode[i].push_back(m->decode_tok_s);
      }
    }
    bar.update(static_cast<uint64_t>(total));
    bar.finish();
    for (size_t i = 0; i < found.engines.size(); ++i) {
      found.engines[i]->finish();
      results[i].version = found.engines[i]->version();
      results[i].commands = found.engines[i]->commands();  // after prepare: ports are known
      results[i].prefill = median_range(prefill[i]);
      results[i].decode = median_range(decode[i]);
    }
    const EngineResult& tern = results[0];
    const bool have_tern = tern.name == "tern";
    const std::string pf = fmt::format("prefill {} tok/s", a->prompt_tokens);
    const std::string df =
        fmt::format("decode {} tok/s (after {})", a->gen_tokens, a->prompt_tokens);

    if (a->json) {
      nlohmann::json out = {{"model", setup.model_file},   {"prompt_tokens", a->prompt_tokens},
                            {"gen_tokens", a->gen_tokens}, {"runs", a->runs},
                            {"device", a->device},         {"not_run", found.not_run}};
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& r : results) {
        auto fig = [](const MedianRange& f) {
          return nlohmann::json{{"median", f.median}, {"min", f.low}, {"max", f.high}};
        };
        rows.push_back({{"engine", r.name},
                        {"version", r.version},
                        {"commands", r.commands},
                        {"prefill_tok_s", fig(r.prefill)},
                        {"decode_tok_s", fig(r.decode)},
                        {"error", r.error}});
      }
      out["engines"] = rows;
      fmt::print("{}\n", out.dump(2));
    } else {
      fmt::print("{} ({}), {} runs interleaved after a warm-up, device {}\n", setup.model_file,
                 format_bytes(std::filesystem::file_size(setup.model_file, ec)), a->runs,
                 a->device);
      fmt::print("  {:<26} {:>26} {:>26} {:>10} {:>10}\n", "ENGINE", pf, df, "PREFILL/x",
                 "DECODE/x");
      for (const auto& r : results) {
        fmt::print("  {:<26} {:>26} {:>26} {:>10} {:>10}{}\n", r.name, cell(r.prefill),
                   cell(r.decode), have_tern ? ratio(tern.prefill, r.prefill) : "-",
                   have_tern ? ratio(tern.decode, r.decode) : "-",
                   r.error.empty() ? "" : "  error: " + r.error.substr(0, 200));
      }
      if (have_tern) fmt::print("  (x/y columns: Tern's figure divided by that engine's)\n");
    }

    if (!a->report.empty()) {
      std::string md;
      const auto now = std::chrono::system_clock::now();
      md += fmt::format("# tern bench compare: {}\n\n",
                        std::filesystem::path(setup.model_file).filename().string());
      const auto gpu_list = gpus();
      std::string gpu_text = "none";
      if (!gpu_list.empty()) {
        gpu_text.clear();
        for (const auto& g : gpu_list)
          gpu_text += fmt::format("{}{} ({}, driver {})", gpu_text.empty() ? "" : "; ", g.name,
                                  format_bytes(g.memory_bytes), g.driver);
      }
      md += fmt::format(
          "- date: {:%Y-%m-%d %H:%M} UTC\n- machine: {}, {} threads, {} RAM; GPUs: {}\n"
          "- model: `{}` ({} bytes)\n- test: prefill of {} tokens, decode of {} tokens after "
          "it, batch 1, device {}{}\n- method: one warm-up run per engine, then {} runs "
          "interleaved; median [min-max]\n\n",
          fmt::gmtime(std::chrono::system_clock::to_time_t(now)), cpu_model_name(),
          std::thread::hardware_concurrency(), format_bytes(memory_info().total), gpu_text,
          setup.model_file, std::filesystem::file_size(setup.model_file, ec), a->prompt_tokens,
          a->gen_tokens, a->device,
          a->threads > 0 ? fmt::format(", {} threads", a->threads) : std::string(), a->runs);
      md += fmt::format("| engine | {} | {} | Tern / engine, prefill | Tern / engine, decode |\n",
                        pf, df);
      md += "| --- | ---: | ---: | ---: | ---: |\n";
      for (const auto& r : results) {
        md += fmt::format("| {}{} | {} | {} | {} | {} |\n", r.name,
                          r.version.empty() ? "" : " " + r.version, cell(r.prefill), cell(r.decode),
                          have_tern ? ratio(tern.prefill, r.prefill) : "-",
                          have_tern ? ratio(tern.decode, r.decode) : "-");
      }
      md += "\nCommands:\n\n";
      for (const auto& r : results) {
        md += fmt::format("- {}:\n```\n{}\n```\n", r.name, r.commands);
        if (!r.error.empty()) md += fmt::format("  failed: {}\n", r.error);
      }
      if (!found.not_run.empty()) {
        md += "\nNot run:\n\n";
        for (const auto& n : found.not_run) md += "- " + n + "\n";
      }
      if (a->report == "-") {
        fmt::print("{}", md);
      } else {
        const std::string tmp = a->report + ".tmp";
        std::ofstream(tmp) << md;
        std::filesystem::rename(tmp, a->report, ec);
        if (ec) {
          ctx.exit_code = report_error(fmt::format("cannot write {}: {}", a->report, ec.message()));
          return;
        }
        fmt::print(stderr, "tern: report written to {}\n", a->report);
      }
    }
    bool any_failed = false;
    for (const auto& r : results) any_failed |= !r.error.empty();
    if (any_failed) {
      fmt::print(stderr, "tern: an engine failed; its logs are in {}\n", work.string());
      ctx.exit_code = 1;
    } else {
      std::filesystem::remove_all(work, ec);
    }
  });
}

}  // namespace tern::cli

// `tern bench`: prefill and decode speed of a model, as BENCHMARKS.md defines them: prefill tok/s
// = prompt tokens / time to the first token's logits; decode tok/s = generated tokens / time from
// the first to the last generated token. A warm-up run, then repetitions: median and range.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/median_range.h"
#include "cli/model_options.h"

namespace tern::cli {

void add_bench_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens per second");
  struct Args {
    ModelOptions model;
    std::vector<int64_t> prompt_tokens{512};
    std::vector<int64_t> gen_tokens{128};
    int repetitions = 3;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  a->model.add_to(*cmd, true);
  cmd->add_option("-p,--prompt-tokens", a->prompt_tokens, "Prompt lengths to test (repeatable)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("-n,--gen-tokens", a->gen_tokens, "Generation lengths to test (repeatable)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", a->repetitions, "Timed runs per test (after one warm-up)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print JSON");
  add_bench_compare_command(*cmd, ctx);
  cmd->require_subcommand(0, 1);
  cmd->callback([&ctx, a, cmd] {
    if (cmd->got_subcommand("compare")) return;
    int64_t longest = 0;
    for (auto p : a->prompt_tokens) {
      for (auto n : a->gen_tokens) longest = std::max(longest, p + n + 1);
    }
    ModelOptions mo = a->model;
    if (mo.context == 0) mo.context = longest;
    if (mo.follows()) {  // --tp: ranks other than 0 only run rank 0's forward passes
      ctx.exit_code = mo.follow(ctx);
      return;
    }
    auto loaded = mo.load(ctx);
    if (!loaded) {
      ctx.exit_code = report_error(loaded.error().message);
      return;
    }
    LoadedModel& m = **loaded;
    Generator gen(m);
    // Deterministic ordinary tokens: ids the tokenizer does not treat as special.
    std::mt19937 rng(1234);
    std::vector<int32_t> ordinary;
    for (int32_t id = 0; id < static_cast<int32_t>(m.tokenizer->vocab_size()); ++id) {
      if (!m.tokenizer->is_special(id)) ordinary.push_back(id);
    }
    nlohmann::json results = nlohmann::json::array();
    if (!a->json) {
      fmt::print("model {} ({} {}), {}{}\n", m.path, m.info.architecture, m.info.quantization,
                 m.device->name(), m.comm ? ", tensor parallel over " + m.comm->name() : "");
      fmt::print("{:>8} {:>8} {:>22} {:>22}\n", "prompt", "gen", "prefill tok/s", "decode tok/s");
    }
    for (int64_t p : a->prompt_tokens) {
      for (int64_t n : a->gen_tokens) {
        std::vector<int32_t> prompt(static_cast<size_t>(p));
        for (auto& t : prompt) t = ordinary[rng() % ordinary.size()];
        GenerateOptions go;
        go.max_tokens = n;
        go.ignore_eos = true;
        std::vector<double> prefill, decode;
        for (int r = 0; r <= a->repetitions; ++r) {
          gen.reset();
          auto res = gen.generate(prompt, go);
          if (!res) {
            ctx.exit_code = report_error(res.error().message);
            return;
          }
          if (r == 0) continue;  // warm-up
          prefill.push_back(static_cast<double>(p) / res->prefill_seconds);
          if (res->tokens.size() > 1) {
            decode.push_back(static_cast<double>(res->tokens.size() - 1) / res->decode_seconds);
          }
        }
        const MedianRange ps = median_range(prefill), ds = median_range(decode);
        if (a->json) {
          results.push_back(
              {{"prompt_tokens", p},
               {"gen_tokens", n},
               {"repetitions", a->repetitions},
               {"prefill_tok_s", {{"median", ps.median}, {"min", ps.low}, {"max", ps.high}}},
               {"decode_tok_s", {{"median", ds.median}, {"min", ds.low}, {"max", ds.high}}}});
        } else {
          fmt::print("{:>8} {:>8} {:>9.1f} [{:.1f}-{:.1f}] {:>9.1f} [{:.1f}-{:.1f}]\n", p, n,
                     ps.median, ps.low, ps.high, ds.median, ds.low, ds.high);
        }
      }
    }
    const std::string device_stats = m.device->stats();
    if (!a->json && !device_stats.empty()) fmt::print("device: {}\n", device_stats);
    if (a->json) {
      nlohmann::json out = {{"model", m.path},
                            {"architecture", m.info.architecture},
                            {"quantization", m.info.quantization},
                            {"device", m.device->name()},
                            {"tp", m.comm ? m.comm->size() : 1},
                            {"results", results}};
      if (!device_stats.empty()) out["device_stats"] = device_stats;
      fmt::print("{}\n", out.dump(2));
    }
  });
}

}  // namespace tern::cli

// `tern bench`: prefill and decode speed of a model, as BENCHMARKS.md defines them: prefill tok/s
// = prompt tokens / time to the first token's logits; decode tok/s = generated tokens / time from
// the first to the last generated token. A warm-up run, then repetitions: median and range.
// Every run goes through the serving Engine (one slot; N slots with --parallel N) and its
// figures come from the engine's timing of each request (admission, first and last token).
// With --parallel N (N > 1), N sequences run batched through the serving scheduler and the
// figures are aggregates: N x prompt tokens / time until every sequence has its first token, and
// N x (gen - 1) tokens / time from then until the last one ends. With --depth D, each run first
// fills the cache with D tokens (untimed, as llama-bench's -d), so the prompt is prefilled and the
// tokens decoded after D tokens of context.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "cli/median_range.h"
#include "cli/model_options.h"
#include "engine/engine.h"

namespace tern::cli {
namespace {

struct Speeds {
  double prefill_tok_s = 0, decode_tok_s = 0;
};

// N sequences (one per prompt) of `go.max_tokens` tokens each, submitted together so that the
// scheduler batches them from the first step.
Result<Speeds> run_batched(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                           const GenerateOptions& go) {
  const auto count = static_cast<int64_t>(prompts.size());
  std::vector<Request> requests;
  for (const auto& p : prompts) {
    Request r;
    r.prompt = p;
    r.options = go;
    requests.push_back(std::move(r));
  }
  auto streams = engine.submit_all(std::move(requests));
  if (!streams) return streams.error();
  // From the first admission to the moment every sequence has its first token, then to the last.
  Timing::Clock::time_point start = Timing::Clock::time_point::max(), all_started{}, end{};
  for (const auto& stream : *streams) {
    while (auto e = stream->next()) {
      if (e->type == Event::Type::Error) return Error{e->error};
      if (e->type != Event::Type::Done) continue;
      if (e->usage.completion_tokens != go.max_tokens) {
        return make_error("a batched sequence stopped after {} of {} tokens",
                          e->usage.completion_tokens, go.max_tokens);
      }
      start = std::min(start, e->timing.admitted);
      all_started = std::max(all_started, e->timing.first_token);
      end = std::max(end, e->timing.last_token);
    }
  }
  const double to_first = std::chrono::duration<double>(all_started - start).count();
  const double decoding = std::chrono::duration<double>(end - all_started).count();
  Speeds s;
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  s.prefill_tok_s = static_cast<double>(prompt_tokens) / to_first;
  s.decode_tok_s = decoding > 0 ? static_cast<double>(count * (go.max_tokens - 1)) / decoding : 0.0;
  return s;
}

}  // namespace

void add_bench_command(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens per second");
  struct Args {
    ModelOptions model;
    std::vector<int64_t> prompt_tokens{512};
    std::vector<int64_t> gen_tokens{128};
    std::vector<int64_t> parallel{1};
    std::vector<int64_t> depth{0};
    int repetitions = 3;
    float temperature = 0.0f;
    float top_p = 1.0f;
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
  cmd->add_option("-d,--depth", a->depth,
                  "Tokens of context already in the cache before the prompt (repeatable; "
                  "filled untimed before each run, as llama-bench's -d)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", a->repetitions, "Timed runs per test (after one warm-up)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--parallel", a->parallel,
                  "Sequences decoded together (repeatable); above 1 the figures are aggregates "
                  "over that many sequences batched by the serving scheduler")
      ->check(CLI::Range(int64_t{1}, int64_t{256}))
      ->capture_default_str();
  cmd->add_option("--temp,--temperature", a->temperature,
                  "Sample at this temperature instead of greedy decoding (seeded): decode speed "
                  "with a client's sampling settings")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass with --temperature (1: off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print JSON");
  add_bench_compare_command(*cmd, ctx);
  cmd->require_subcommand(0, 1);
  cmd->callback([&ctx, a, cmd] {
    if (cmd->got_subcommand("compare")) return;
    const int64_t deepest = *std::max_element(a->depth.begin(), a->depth.end());
    const int64_t most_sequences = *std::max_element(a->parallel.begin(), a->parallel.end());
    if (deepest > 0 && most_sequences > 1) {
      ctx.exit_code = report_error("--depth measures one sequence; it cannot go with --parallel");
      return;
    }
    int64_t longest = 0;
    for (auto p : a->prompt_tokens) {
      for (auto n : a->gen_tokens) longest = std::max(longest, deepest + p + n + 1);
    }
    ModelOptions mo = a->model;
    if (mo.context == 0) mo.context = longest;
    const bool show_sequences = a->parallel.size() > 1 || most_sequences > 1;
    if (mo.follows()) {  // --tp: ranks other than 0 only run rank 0's forward passes
      ctx.exit_code = mo.follow(ctx, most_sequences);
      return;
    }
    auto loaded = mo.load(ctx, true, most_sequences);
    if (!loaded) {
      ctx.exit_code = report_error(loaded.error().message);
      return;
    }
    LoadedModel& m = **loaded;
    // Deterministic ordinary tokens: ids the tokenizer does not treat as special.
    std::mt19937 rng(1234);
    std::vector<int32_t> ordinary;
    for (int32_t id = 0; id < static_cast<int32_t>(m.tokenizer->vocab_size()); ++id) {
      if (!m.tokenizer->is_special(id)) ordinary.push_back(id);
    }
    nlohmann::json results = nlohmann::json::array();
    if (!a->json) {
      fmt::print("model {} ({} {}), {}{}, prefill in chunks of {} tokens{}\n", m.path,
                 m.info.architecture, m.info.quantization, m.device->name(),
                 m.comm ? ", tensor parallel over " + m.comm->name() : "", m.prefill_chunk,
                 a->temperature > 0.0f ? fmt::format(", sampled at temperature {:g} (top-p {:g})",
                                                     a->temperature, a->top_p)
                                       : std::string());
      fmt::print("{}{:>8} {:>8} {:>22} {:>22}{}\n",
                 deepest > 0 ? fmt::format("{:>8} ", "depth") : "", "prompt", "gen",
                 "prefill tok/s", "decode tok/s", show_sequences ? "  sequences" : "");
    }
    for (int64_t seqs : a->parallel) {
      for (int64_t depth : a->depth) {
        // Every run starts from nothing, but for its --depth context: the prefix cache then
        // keeps only that (the untimed fill adopts the previous run's blocks and leaves the
        // context's).
        EngineOptions eo;
        eo.parallel = seqs;
        eo.max_queue = std::max<int64_t>(seqs, eo.max_queue);
        eo.prefix_cache = depth > 0;
        Engine engine(m, eo);
        std::vector<int32_t> context(static_cast<size_t>(depth));
        for (auto& t : context) t = ordinary[rng() % ordinary.size()];
        for (int64_t p : a->prompt_tokens) {
          for (int64_t n : a->gen_tokens) {
            std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(seqs));
            for (auto& prompt : prompts) {
              prompt = context;
              prompt.resize(static_cast<size_t>(depth + p));
              for (size_t i = context.size(); i < prompt.size(); ++i) {
                prompt[i] = ordinary[rng() % ordinary.size()];
              }
            }
            GenerateOptions go;
            go.max_tokens = n;
            go.ignore_eos = true;
            go.sampling.temperature = a->temperature;
            go.sampling.top_p = a->top_p <= 0.0f ? 1.0f : a->top_p;
            go.sampling.seed = 1234;
            std::vector<double> prefill, decode;
            for (int r = 0; r <= a->repetitions; ++r) {
              if (seqs > 1) {
                auto res = run_batched(engine, prompts, go);
                if (!res) {
                  ctx.exit_code = report_error(res.error().message);
                  return;
                }
                if (r == 0) continue;  // warm-up
                prefill.push_back(res->prefill_tok_s);
                if (n > 1) decode.push_back(res->decode_tok_s);
                continue;
              }
              if (depth > 0) {  // the context, untimed: the prompt's run reuses it
                GenerateOptions fill = go;
                fill.max_tokens = 1;
                Request fill_request;
                fill_request.prompt = context;
                fill_request.options = fill;
                auto filled = engine.generate(std::move(fill_request));
                if (!filled) {
                  ctx.exit_code = report_error(filled.error().message);
                  return;
                }
              }
              Request request;
              request.prompt = prompts[0];
              request.options = go;
              auto res = engine.generate(std::move(request));
              if (!res) {
                ctx.exit_code = report_error(res.error().message);
                return;
              }
              // The engine computes at least the prompt's last two tokens again.
              if (res->reused_tokens < std::min(depth, std::max<int64_t>(0, depth + p - 2))) {
                ctx.exit_code = report_error(fmt::format(
                    "the run reused {} of the {} context tokens", res->reused_tokens, depth));
                return;
              }
              if (r == 0) continue;  // warm-up
              prefill.push_back(static_cast<double>(depth + p - res->reused_tokens) /
                                res->prefill_seconds);
              if (res->tokens.size() > 1) {
                decode.push_back(static_cast<double>(res->tokens.size() - 1) / res->decode_seconds);
              }
            }
            const MedianRange ps = median_range(prefill), ds = median_range(decode);
            if (a->json) {
              results.push_back(
                  {{"prompt_tokens", p},
                   {"depth", depth},
                   {"gen_tokens", n},
                   {"sequences", seqs},
                   {"repetitions", a->repetitions},
                   {"temperature", a->temperature},
                   {"prefill_tok_s", {{"median", ps.median}, {"min", ps.low}, {"max", ps.high}}},
                   {"decode_tok_s", {{"median", ds.median}, {"min", ds.low}, {"max", ds.high}}}});
            } else {
              fmt::print("{}{:>8} {:>8} {:>9.1f} [{:.1f}-{:.1f}] {:>9.1f} [{:.1f}-{:.1f}]{}\n",
                         deepest > 0 ? fmt::format("{:>8} ", depth) : "", p, n, ps.median, ps.low,
                         ps.high, ds.median, ds.low, ds.high,
                         show_sequences ? fmt::format("  {:>9}", seqs) : "");
            }
          }
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

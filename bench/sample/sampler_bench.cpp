// Sampler::sample over a whole vocabulary row: greedy, temperature alone, with top-p, with
// top-k, for SmolLM2's and Qwen3's vocabulary sizes, on two kinds of logits: "peaked" (a language
// model's shape: logit 20 - 3 ln(rank), plus noise, ids shuffled; the top token has ~40% of the
// mass at T = 1) and "flat" (normal, sd 3: thousands of tokens share the mass, the worst case for
// taking candidates in order). Run: build/bench/sample/bench_sampler (Google Benchmark flags
// apply).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "sample/sampler.h"

namespace {

std::vector<float> make_logits(int64_t vocab, bool peaked) {
  std::mt19937 rng(7);
  std::vector<float> logits(static_cast<size_t>(vocab));
  if (peaked) {
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (size_t r = 0; r < logits.size(); ++r)
      logits[r] = 20.0f - 3.0f * std::log(static_cast<float>(r) + 1.0f) + noise(rng);
    std::shuffle(logits.begin(), logits.end(), rng);
  } else {
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (auto& l : logits) l = normal(rng);
  }
  return logits;
}

// Arguments: vocabulary, peaked (1) or flat (0), temperature x 100, top_p x 100, top_k.
void BM_Sample(benchmark::State& state) {
  const auto logits = make_logits(state.range(0), state.range(1) != 0);
  tern::SamplingParams p;
  p.temperature = static_cast<float>(state.range(2)) / 100.0f;
  p.top_p = static_cast<float>(state.range(3)) / 100.0f;
  p.top_k = static_cast<int32_t>(state.range(4));
  p.seed = 1;
  tern::Sampler sampler(p);
  const std::vector<int32_t> history;
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(logits, history));
}

void Arguments(benchmark::internal::Benchmark* b) {
  for (int64_t vocab : {49152, 151936}) {
    for (int64_t peaked : {1, 0}) {
      b->Args({vocab, peaked, 0, 100, 0});    // greedy
      b->Args({vocab, peaked, 100, 100, 0});  // temperature 1 (an Anthropic client's default)
      b->Args({vocab, peaked, 70, 95, 0});    // temperature 0.7, top-p 0.95
      b->Args({vocab, peaked, 70, 100, 40});  // temperature 0.7, top-k 40
    }
  }
  b->ArgNames({"vocab", "peaked", "temp_x100", "top_p_x100", "top_k"})
      ->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Sample)->Apply(Arguments);

}  // namespace

BENCHMARK_MAIN();

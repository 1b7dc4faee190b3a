// sample/'s ops in a step plan pick what the host Sampler picks: for greedy and seeded sampling,
// with repetition / presence / frequency penalties, logit bias and a constraint's mask, token by
// token over a growing history, the plan's pick (on the CPU device) equals Sampler::sample on
// the same row (the host reference), and a returned row is the row before the penalties.
#include "sample/row_sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "backend/cpu_device/cpu_device.h"
#include "sample/sampler.h"

namespace tern {
namespace {

// Allows the even tokens only.
class EvenTokens final : public TokenConstraint {
 public:
  void apply(std::span<float> logits) override {
    for (size_t t = 1; t < logits.size(); t += 2) logits[t] = -INFINITY;
  }
  void accept(int32_t) override {}
};

struct Case {
  const char* name;
  SamplingParams params;
  bool constrained = false;
};

TEST(RowSampling, PlanPicksWhatTheHostSamplerPicks) {
  const int64_t vocab = 300;
  std::vector<Case> cases;
  auto add = [&](const char* name, auto edit, bool constrained = false) {
    SamplingParams p;
    p.seed = 5;
    edit(p);
    cases.push_back({name, p, constrained});
  };
  add("greedy", [](SamplingParams&) {});
  add("greedy + penalties", [](SamplingParams& p) {
    p.repetition_penalty = 1.4f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.3f;
  });
  add("temperature", [](SamplingParams& p) { p.temperature = 0.9f; });
  add("temperature + top-k/p + min-p", [](SamplingParams& p) {
    p.temperature = 1.3f;
    p.top_k = 40;
    p.top_p = 0.8f;
    p.min_p = 0.02f;
  });
  add("temperature + penalties + bias", [](SamplingParams& p) {
    p.temperature = 0.7f;
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.4f;
    p.logit_bias = {{7, 3.0f}, {11, -INFINITY}, {250, 1.5f}};
  });
  add(
      "constrained", [](SamplingParams& p) { p.temperature = 1.0f; }, true);
  CpuDevice device(1);
  std::mt19937 rng(3);
  for (const Case& c : cases) {
    Sampler host(c.params), planned(c.params);
    EvenTokens constraint;
    std::vector<int32_t> history = {1, 7, 7, 40, 250, 3};
    for (int step = 0; step < 40; ++step) {
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (auto& l : logits) l = std::normal_distribution<float>(0.0f, 2.0f)(rng);
      std::vector<float> masked = logits;
      if (c.constrained) constraint.apply(masked);
      const int32_t want = host.sample(masked, history);
      // The same row through a plan: the row's copy is the device's memory.
      std::vector<float> row = logits;
      Tensor t{row.data()};
      t.ne = {vocab, 1, 1, 1};
      RowSampling r = planned.next_row(history);
      if (c.constrained) r.allowed = allowed_tokens(constraint, vocab);
      r.return_row = true;
      StepPlan plan;
      Ops ops(plan);
      std::vector<std::shared_ptr<void>> held;
      auto out = append_sampling(ops, t, std::span(&r, 1), [&](size_t bytes) -> Result<void*> {
        auto b = device.allocate(bytes);
        if (!b) return b.error();
        void* data = b->data();
        held.push_back(std::make_shared<DeviceBuffer>(std::move(*b)));
        return data;
      });
      ASSERT_TRUE(out.ok()) << out.error().message;
      ASSERT_TRUE(device.execute(plan).ok());
      EXPECT_EQ(out->ids[0], want) << c.name << ", step " << step;
      for (int64_t i = 0; i < vocab; ++i) {
        ASSERT_EQ(out->returned.f32()[i], masked[static_cast<size_t>(i)])
            << c.name << ": the returned row is the masked row before the penalties";
      }
      history.push_back(want);
    }
  }
}

}  // namespace
}  // namespace tern

// Sampling: greedy, seeded reproducibility, truncation (top-k/top-p/min-p), penalties, bias,
// the sampled distribution itself, and stop strings split across tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "sample/sampler.h"
#include "sample/stop_matcher.h"

namespace tern {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};

TEST(Sampler, GreedyPicksTheFirstMaximum) {
  Sampler s({});
  EXPECT_EQ(s.sample(kLogits, {}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int32_t> xa, xb;
  for (int i = 0; i < 200; ++i) {
    xa.push_back(a.sample(kLogits, {}));
    xb.push_back(b.sample(kLogits, {}));
  }
  EXPECT_EQ(xa, xb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> xc;
  for (int i = 0; i < 200; ++i) xc.push_back(c.sample(kLogits, {}));
  EXPECT_NE(xa, xc);
}

TEST(Sampler, FollowsTheSoftmaxDistribution) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 7;
  Sampler s(p);
  std::map<int32_t, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) counts[s.sample(kLogits, {})]++;
  double total = 0;
  for (float l : kLogits) total += std::exp(l / 0.8);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double expected = std::exp(kLogits[i] / 0.8) / total;
    const double got = counts[static_cast<int32_t>(i)] / static_cast<double>(n);
    EXPECT_NEAR(got, expected, 4 * std::sqrt(expected * (1 - expected) / n) + 1e-3)
        << "token " << i;
  }
}

TEST(Sampler, TruncationKeepsOnlyTheHead) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.seed = 1;
  p.top_k = 2;
  Sampler k(p);
  for (int i = 0; i < 500; ++i) {
    int32_t t = k.sample(kLogits, {});
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  p.top_k = 0;
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p_max: ids 1, 3 and (at T=1.5) 2
  Sampler m(p);
  for (int i = 0; i < 500; ++i) {
    int32_t t = m.sample(kLogits, {});
    EXPECT_TRUE(t == 1 || t == 3 || t == 2) << t;
  }
  p.min_p = 0.0f;
  p.top_p = 0.01f;
  Sampler tp(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(tp.sample(kLogits, {}), 1);
}

// The sampler takes candidates band by band below the maximum instead of sorting the vocabulary;
// its picks must equal a full sort's: every token ordered by logit (ties: lower id first),
// top-k / min-p / top-p cut from that order, then one uniform draw walked down it.
int32_t full_sort_pick(const std::vector<float>& logits, const SamplingParams& p, double u) {
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const size_t keep =
      p.top_k > 0 ? std::min(order.size(), static_cast<size_t>(p.top_k)) : order.size();
  std::vector<double> w(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    w[i] = std::exp((logits[order[i]] - logits[order[0]]) * (1.0f / p.temperature));
    total += w[i];
  }
  size_t end = keep;
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) {
    if (p.min_p > 0 && w[i] / total < w[0] / total * p.min_p) {
      end = i;
      break;
    }
    mass += w[i] / total;
    if (p.top_p < 1 && mass >= p.top_p) {
      end = i + 1;
      break;
    }
  }
  const double kept = (p.min_p > 0 || p.top_p < 1) ? mass : 1.0;
  double cumulative = 0;
  for (size_t i = 0; i < end; ++i) {
    cumulative += w[i] / total;
    if (u * kept < cumulative) return order[i];
  }
  return order[end - 1];
}

TEST(Sampler, PicksWhatAFullSortPicks) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 12; ++trial) {
    // Logits spread over several bands (tens of units below the maximum), with ties.
    std::vector<float> logits(3000);
    std::normal_distribution<float> normal(0.0f, trial % 2 == 0 ? 2.0f : 8.0f);
    for (auto& l : logits) l = std::round(normal(rng) * 4.0f) / 4.0f;
    SamplingParams p;
    p.temperature = trial % 3 == 0 ? 0.5f : 1.0f;
    p.top_p = trial % 4 == 1 ? 0.9f : 1.0f;
    p.min_p = trial % 4 == 2 ? 0.01f : 0.0f;
    p.top_k = trial % 4 == 3 ? 50 : 0;
    p.seed = 100 + trial;
    Sampler s(p);
    std::mt19937_64 draws(*p.seed);  // the sampler's own draws: one uniform per token
    for (int i = 0; i < 200; ++i) {
      const double u = std::uniform_real_distribution<double>(0.0, 1.0)(draws);
      ASSERT_EQ(s.sample(logits, {}), full_sort_pick(logits, p, u)) << "trial " << trial;
    }
  }
}

// A head token and a flat tail one band down (4,000 tokens at 10 below): the tail holds 15% of
// the mass, and top-p 0.9 keeps the tail's lowest ids only (ties in id order).
TEST(Sampler, TailBandsAndTiesFollowTheDistribution) {
  std::vector<float> logits(4001, -10.0f);
  logits[0] = 0.0f;
  const double tail = 4000 * std::exp(-10.0), head = 1.0 / (1.0 + tail);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 3;
  Sampler all(p);
  const int n = 20000;
  int heads = 0;
  for (int i = 0; i < n; ++i) heads += all.sample(logits, {}) == 0;
  EXPECT_NEAR(heads / static_cast<double>(n), head, 4 * std::sqrt(head * (1 - head) / n));
  p.top_p = 0.9f;
  Sampler cut(p);
  // Kept: the head and the first (0.9 - head) / (tail share per token) tail tokens.
  const auto last_kept = static_cast<int32_t>(std::ceil((0.9 - head) / (std::exp(-10.0) * head)));
  for (int i = 0; i < 5000; ++i) EXPECT_LE(cut.sample(logits, {}), last_kept);
}

TEST(Sampler, PenaltiesAndBiasChangeTheChoice) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> history = {1, 3};
  EXPECT_EQ(Sampler(p).sample(kLogits, history), 2);  // 3/2 = 1.5 < 2
  p = {};
  p.presence_penalty = 1.5f;
  EXPECT_EQ(Sampler(p).sample(kLogits, history), 2);
  p = {};
  p.frequency_penalty = 0.6f;
  const std::vector<int32_t> twice = {1, 1};
  EXPECT_EQ(Sampler(p).sample(kLogits, twice), 3);  // 3 - 1.2 < 3
  p = {};
  p.logit_bias = {{4, 10.0f}};
  EXPECT_EQ(Sampler(p).sample(kLogits, {}), 4);
  p.logit_bias = {{1, -INFINITY}};
  EXPECT_EQ(Sampler(p).sample(kLogits, {}), 3);
}

TEST(Sampler, ValidatesParameters) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_FALSE(p.validate(10).ok());
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(p.validate(10).ok());
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_FALSE(p.validate(10).ok());
  EXPECT_TRUE(SamplingParams{}.validate(10).ok());
}

TEST(StopMatcher, FindsStopsAcrossPieces) {
  StopMatcher m({"</answer>", "STOP"});
  std::string emitted;
  for (const char* piece : {"The result", " is 4</", "ans", "wer> and more"}) {
    auto out = m.push(piece);
    emitted += out.text;
    if (out.stopped) {
      EXPECT_EQ(out.matched, "</answer>");
      break;
    }
  }
  EXPECT_EQ(emitted, "The result is 4");
}

TEST(StopMatcher, ReleasesHeldTextThatTurnsOutNotToStop) {
  StopMatcher m({"STOP"});
  auto a = m.push("go ST");
  EXPECT_EQ(a.text, "go ");
  auto b = m.push("ILL");
  EXPECT_EQ(b.text, "STILL");
  auto c = m.push("ST");
  EXPECT_EQ(c.text, "");
  EXPECT_EQ(m.flush(), "ST");
}

TEST(StopMatcher, EarliestStopWins) {
  StopMatcher m({"bb", "a"});
  auto out = m.push("xxbba");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "xx");
}

}  // namespace
}  // namespace tern

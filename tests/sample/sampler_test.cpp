// Sampling: greedy, seeded reproducibility, truncation (top-k/top-p/min-p), penalties, bias,
// the sampled distribution itself, and stop strings split across tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

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

// The mixture-of-experts block's routing and its loader: the top-k choice and weights against a
// direct computation, the renormalisation switch, ties, and shape errors; and one MoE layer's
// output against the same experts run one token at a time as dense MLPs.
#include "models/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/cpu_device/cpu_device.h"
#include "backend/device/moe_routing.h"
#include "models/model.h"
#include "models/weights.h"
#include "synthetic_model.h"

namespace tern {
namespace {

TEST(MoeRouting, PicksTheTopExpertsWithSoftmaxWeights) {
  MoeConfig cfg{.experts = 4, .used = 2, .ffn = 8, .normalize = false};
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f,   // token 0: experts 1, 3
                                     3.0f, 0.0f, 0.0f,  3.5f};  // token 1: experts 3, 0
  const Routing r = route_tokens(logits, 2, MoeRouting{cfg.experts, cfg.used, 0, cfg.normalize});
  ASSERT_EQ(r.expert, (std::vector<int32_t>{1, 3, 3, 0}));
  auto softmax = [&](size_t t, size_t e) {
    double total = 0;
    for (size_t i = 0; i < 4; ++i) total += std::exp(logits[t * 4 + i]);
    return std::exp(logits[t * 4 + e]) / total;
  };
  EXPECT_NEAR(r.weight[0], softmax(0, 1), 1e-6);
  EXPECT_NEAR(r.weight[1], softmax(0, 3), 1e-6);
  EXPECT_NEAR(r.weight[2], softmax(1, 3), 1e-6);
  EXPECT_NEAR(r.weight[3], softmax(1, 0), 1e-6);

  cfg.normalize = true;
  const Routing n = route_tokens(logits, 2, MoeRouting{cfg.experts, cfg.used, 0, cfg.normalize});
  EXPECT_EQ(n.expert, r.expert);
  EXPECT_NEAR(n.weight[0] + n.weight[1], 1.0f, 1e-6);
  EXPECT_NEAR(n.weight[0] / n.weight[1], r.weight[0] / r.weight[1], 1e-5);
}

TEST(MoeRouting, TiesGoToTheLowerExpert) {
  const MoeConfig cfg{.experts = 4, .used = 2, .ffn = 8, .normalize = true};
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  const Routing r = route_tokens(logits, 1, MoeRouting{cfg.experts, cfg.used, 0, cfg.normalize});
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.weight[0], 0.5f, 1e-6);
}

class MoeModel : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("tern-moe-" + std::to_string(::getpid()) + ".gguf"))
                .string();
    auto shape = synth::preset_shape("tiny-qwen3moe");
    ASSERT_TRUE(shape.ok());
    shape_ = *shape;
    synth::SyntheticOptions options;
    options.weight_scale = 0.08f;
    ASSERT_TRUE(synth::write_synthetic_model(path_, shape_, options).ok());
    auto file = GgufFile::open(path_);
    ASSERT_TRUE(file.ok()) << file.error().message;
    file_ = std::make_unique<GgufFile>(std::move(*file));
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
  synth::SyntheticShape shape_;
  std::unique_ptr<GgufFile> file_;
  CpuDevice device_{2};
};

// The block on a batch of tokens equals, token by token, the weighted sum of the chosen experts'
// dense MLPs (each expert loaded as an ordinary MLP from its slice of the stacked tensors).
TEST_F(MoeModel, BlockEqualsTheWeightedSumOfItsExperts) {
  WeightLoader w(*file_, device_);
  const MoeConfig cfg{shape_.experts, shape_.experts_used, shape_.expert_ffn, true};
  auto moe = load_moe(w, 0, shape_.hidden, cfg);
  ASSERT_TRUE(moe.ok()) << moe.error().message;
  ASSERT_EQ(moe->experts.size(), static_cast<size_t>(shape_.experts));

  auto kv = KvCache::create(device_, KvCacheConfig{1, 1, 8, 16, 1, TensorType::F32});
  ASSERT_TRUE(kv.ok());
  std::vector<SequenceBatch> none;
  const int64_t tokens = 5, hidden = shape_.hidden;
  std::vector<float> x(static_cast<size_t>(tokens * hidden));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  Tensor xt;
  xt.data = x.data();
  xt.ne = {hidden, tokens, 1, 1};
  StepPlan plan;
  ForwardState st(device_, *kv, none, plan);
  st.tokens = tokens;
  auto out = st.scratch(tokens, hidden);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(sparse_moe(st, *moe, cfg, xt, *out).ok());
  ASSERT_TRUE(device_.execute(plan).ok());

  // Router and experts by hand, one token at a time.
  std::vector<float> logits(static_cast<size_t>(tokens * cfg.experts));
  Tensor lt;
  lt.data = logits.data();
  lt.ne = {cfg.experts, tokens, 1, 1};
  ASSERT_TRUE(device_.matmul(moe->router, xt, lt).ok());
  const Routing r =
      route_tokens(logits, tokens, MoeRouting{cfg.experts, cfg.used, 0, cfg.normalize});
  float worst = 0, scale = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> want(static_cast<size_t>(hidden), 0.0f);
    for (int64_t k = 0; k < cfg.used; ++k) {
      const auto slot = static_cast<size_t>(t * cfg.used + k);
      const ExpertMlp& e = moe->experts[static_cast<size_t>(r.expert[slot])];
      std::vector<float> g(static_cast<size_t>(cfg.ffn)), u(g.size()), y(want.size());
      Tensor xr = xt.row_slice(t, 1), gt, ut, yt;
      gt.data = g.data();
      gt.ne = {cfg.ffn, 1, 1, 1};
      ut = gt;
      ut.data = u.data();
      yt.data = y.data();
      yt.ne = {hidden, 1, 1, 1};
      ASSERT_TRUE(device_.matmul(e.gate, xr, gt).ok());
      ASSERT_TRUE(device_.matmul(e.up, xr, ut).ok());
      device_.silu_mul(gt, ut, gt);
      ASSERT_TRUE(device_.matmul(e.down, gt, yt).ok());
      for (int64_t c = 0; c < hidden; ++c)
        want[static_cast<size_t>(c)] += r.weight[slot] * y[static_cast<size_t>(c)];
    }
    for (int64_t c = 0; c < hidden; ++c) {
      const float got = out->f32()[t * hidden + c];
      worst = std::max(worst, std::fabs(got - want[static_cast<size_t>(c)]));
      scale = std::max(scale, std::fabs(want[static_cast<size_t>(c)]));
    }
  }
  EXPECT_GT(scale, 1e-3f);
  EXPECT_LT(worst, 1e-5f * std::max(1.0f, scale));
}

TEST_F(MoeModel, WrongExpertShapesAreClearErrors) {
  WeightLoader w(*file_, device_);
  const MoeConfig bad{shape_.experts * 2, shape_.experts_used, shape_.expert_ffn, true};
  auto moe = load_moe(w, 0, shape_.hidden, bad);
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(moe.error().message.find("ffn_gate_inp"), std::string::npos) << moe.error().message;
  auto e = w.expert_matmul_weight(0, "ffn_up_exps", 0, shape_.experts, shape_.expert_ffn + 1,
                                  shape_.hidden);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("experts x rows x cols"), std::string::npos)
      << e.error().message;
  auto missing = w.expert_matmul_weight(0, "ffn_nothing_exps", 0, shape_.experts, 1, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("ffn_nothing_exps.0.weight"), std::string::npos)
      << missing.error().message;
}

}  // namespace
}  // namespace tern

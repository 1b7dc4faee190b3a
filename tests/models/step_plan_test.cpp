// The step contract as the models record it (ops/step_plan.h): every architecture's forward is a
// plan of the fused ops it names, one set a layer (no unfused norm, rope or store a layer), the
// logits come from one LM head product, sample/'s ops follow, and the same batch shape records
// the same plan (what a CUDA graph is keyed by). The CUDA side (the same plan recorded through
// the CUDA device object) is in cuda_forward_test.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <map>
#include <tuple>

#include "backend/cpu_device/cpu_device.h"
#include "models/model.h"
#include "sample/row_sampling.h"
#include "synthetic_model.h"

namespace tern {
namespace {

class StepPlanTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("tern-plan-" + GetParam() + "-" + std::to_string(::getpid()) + ".gguf"))
                .string();
    auto shape = synth::preset_shape(GetParam());
    ASSERT_TRUE(shape.ok());
    shape_ = *shape;
    synth::SyntheticOptions options;
    options.quantization = "Q8_0";
    ASSERT_TRUE(synth::write_synthetic_model(path_, *shape, options).ok());
    auto file = GgufFile::open(path_);
    ASSERT_TRUE(file.ok()) << file.error().message;
    file_ = std::make_unique<GgufFile>(std::move(*file));
    auto model = load_model(*file_, device_);
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(*model);
    auto c = KvCache::create(device_, model_->kv_config(256, TensorType::F16, 16));
    ASSERT_TRUE(c.ok());
    cache_ = std::make_unique<KvCache>(std::move(*c));
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // The plan of one step: a 7-token prefill and a 1-token decode of another sequence.
  std::string record(StepPlan& plan) {
    std::vector<int32_t> prefill = {1, 2, 3, 4, 5, 6, 7}, decode = {9};
    SequenceKv a, b;
    EXPECT_TRUE(cache_->reserve(a, 7));
    EXPECT_TRUE(cache_->reserve(b, 6));
    b.length = 5;
    std::vector<SequenceBatch> batch = {{prefill, &a, false}, {decode, &b, false}};
    auto logits = model_->forward(batch, *cache_, plan);
    EXPECT_TRUE(logits.ok()) << logits.error().message;
    cache_->release(a);
    cache_->release(b);
    return plan.describe();
  }

  std::string path_;
  synth::SyntheticShape shape_;
  std::unique_ptr<GgufFile> file_;
  CpuDevice device_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
};

TEST_P(StepPlanTest, EachLayerIsTheFusedOpsItNames) {
  StepPlan plan;
  record(plan);
  std::map<OpKind, int64_t> count;
  for (const Op& o : plan.ops()) ++count[kind_of(o)];
  const int64_t layers = model_->shape().layers;
  EXPECT_EQ(count[OpKind::MatmulsSharedInput], layers) << "q, k and v: one op a layer";
  EXPECT_EQ(count[OpKind::QkNormRopeStoreKv], layers);
  EXPECT_EQ(count[OpKind::Attention], layers);
  EXPECT_EQ(count[OpKind::AddRmsNorm], 2 * layers - 1) << "the residual adds feed the norms";
  EXPECT_EQ(count[OpKind::Rope], 0);
  EXPECT_EQ(count[OpKind::StoreKv], 0);
  if (shape_.experts > 0) {
    EXPECT_EQ(count[OpKind::MoeExperts] + count[OpKind::GateUpActivation], layers);
    EXPECT_GT(count[OpKind::MoeExperts], 0);
  } else {
    EXPECT_EQ(count[OpKind::GateUpActivation], layers);
  }
  // The LM head: the two sequences' last rows gathered, normed and projected; no sampling op
  // until sample/ appends one.
  EXPECT_EQ(count[OpKind::ArgmaxRows] + count[OpKind::SampleRows], 0);
  EXPECT_EQ(kind_of(plan.ops().back()), OpKind::Matmul);
}

TEST_P(StepPlanTest, TheSameBatchShapeRecordsTheSamePlan) {
  StepPlan first, second;
  EXPECT_EQ(record(first), record(second));
  EXPECT_FALSE(first.empty());
}

TEST_P(StepPlanTest, SamplingAppendsItsOpsAfterTheLogits) {
  StepPlan plan;
  std::vector<int32_t> prompt = {3, 4, 5};
  SequenceKv kv;
  ASSERT_TRUE(cache_->reserve(kv, 3));
  SequenceBatch b{prompt, &kv, false};
  auto logits = model_->forward({&b, 1}, *cache_, plan);
  ASSERT_TRUE(logits.ok());
  const size_t forward_ops = plan.size();
  Ops ops(plan);
  RowSampling row;
  row.greedy = false;
  row.draw = SampleDraw{0.8f, 0, 1.0f, 0.0f, 0.25};
  row.repetition_penalty = 1.3f;
  row.repeated = {3, 4};
  row.biased = {7};
  row.biases = {2.0f};
  std::vector<std::shared_ptr<void>> held;
  auto sampled =
      append_sampling(ops, *logits, std::span(&row, 1), [&](size_t bytes) -> Result<void*> {
        auto buffer = device_.allocate(bytes);
        if (!buffer) return buffer.error();
        void* data = buffer->data();
        held.push_back(std::make_shared<DeviceBuffer>(std::move(*buffer)));
        return data;
      });
  ASSERT_TRUE(sampled.ok()) << sampled.error().message;
  std::vector<OpKind> tail;
  for (size_t i = forward_ops; i < plan.size(); ++i) tail.push_back(kind_of(plan.ops()[i]));
  EXPECT_EQ(tail, (std::vector<OpKind>{OpKind::RepetitionPenalty, OpKind::AddToLogits,
                                       OpKind::SampleRows}));
  ASSERT_TRUE(device_.execute(plan).ok());
  EXPECT_GE(sampled->ids[0], 0);
  EXPECT_LT(sampled->ids[0], model_->shape().vocab);
  cache_->release(kv);
}

// A shape that does not fit fails the plan at recording, with the op and the shapes.
TEST(StepPlan, AShapeThatDoesNotFitFailsTheRecording) {
  StepPlan plan;
  Ops ops(plan);
  std::vector<float> w(12), x(8), y(3);
  Tensor tw{w.data()}, tx{x.data()}, ty{y.data()};
  tw.ne = {4, 3, 1, 1};
  tx.ne = {8, 1, 1, 1};  // 8 columns for a weight of 4
  ty.ne = {3, 1, 1, 1};
  ops.matmul(tw, tx, ty);
  ops.add(tx, tx, tx);  // not recorded: the plan has failed
  EXPECT_TRUE(plan.failed());
  EXPECT_EQ(plan.size(), 0u);
  EXPECT_NE(plan.error().message.find("matmul shapes"), std::string::npos) << plan.error().message;
  CpuDevice device(1);
  EXPECT_FALSE(device.execute(plan).ok());
}

// The KV ops speculation and the shared prefix cache build on: copying a block (a partly
// matching last block) and moving slots (a token tree's accepted path into consecutive slots),
// in every layer, keys and values, leaving the other slots as they were.
TEST(StepPlan, KvBlocksCopyAndSlotsMove) {
  CpuDevice device(1);
  KvCacheConfig config{2, 2, 32, 4, 6, TensorType::F16};
  auto cache = KvCache::create(device, config);
  ASSERT_TRUE(cache.ok());
  const int64_t slots = config.blocks * config.block_size, row = config.kv_heads * config.head_dim;
  std::vector<float> k(static_cast<size_t>(slots * row)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i % 1000) * 0.5f;
    v[i] = -static_cast<float>(i % 997);
  }
  std::vector<int32_t> all(static_cast<size_t>(slots));
  for (int32_t s = 0; s < slots; ++s) all[static_cast<size_t>(s)] = s;
  StepPlan fill;
  Ops fill_ops(fill);
  Tensor kt{k.data()}, vt{v.data()};
  kt.ne = vt.ne = {config.head_dim, config.kv_heads, slots, 1};
  for (int64_t l = 0; l < config.layers; ++l) fill_ops.store_kv(cache->layer(l), kt, vt, all);
  ASSERT_TRUE(device.execute(fill).ok());
  auto slot_bytes = [&](int64_t layer, bool keys, int64_t slot) {
    const KvLayer& kl = cache->layer(layer);
    const auto* base = static_cast<const uint16_t*>(keys ? kl.k.data : kl.v.data);
    return std::vector<uint16_t>(base + slot * row, base + (slot + 1) * row);
  };
  std::map<std::tuple<int64_t, bool, int64_t>, std::vector<uint16_t>> before;
  for (int64_t l = 0; l < config.layers; ++l)
    for (bool keys : {true, false})
      for (int64_t s = 0; s < slots; ++s) before[{l, keys, s}] = slot_bytes(l, keys, s);
  StepPlan plan;
  Ops ops(plan);
  ops.copy_kv_blocks(cache->layers(), plan.keep(std::vector<int32_t>{1}),
                     plan.keep(std::vector<int32_t>{4}));  // block 1 (slots 4-7) to block 4
  ops.move_kv_slots(cache->layers(), plan.keep(std::vector<int32_t>{13, 15}),
                    plan.keep(std::vector<int32_t>{12, 13}));  // a path 13, 15 into 12, 13
  ASSERT_TRUE(device.execute(plan).ok());
  for (int64_t l = 0; l < config.layers; ++l) {
    for (bool keys : {true, false}) {
      for (int64_t s = 0; s < slots; ++s) {
        int64_t from = s;
        if (s >= 16 && s < 20) from = s - 12;  // block 4 is block 1's copy
        if (s == 12) from = 13;
        if (s == 13) from = 15;
        EXPECT_EQ(slot_bytes(l, keys, s), (before[{l, keys, from}]))
            << "layer " << l << (keys ? " keys" : " values") << " slot " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, StepPlanTest,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3",
                                           "tiny-qwen3moe"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace tern

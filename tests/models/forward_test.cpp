// Invariants of the forward pass on every architecture (random-weight tiny models): chunked
// prefill, decode one token at a time, and one batch of several sequences of different lengths
// all give the logits of a single whole-prompt pass; quantized KV stays close to F16 KV.
// Agreement with the reference implementation is checked against transformers fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "backend/cpu_device/cpu_device.h"
#include "models/model.h"
#include "sched/step.h"
#include "synthetic_model.h"

namespace tern {
namespace {

class ForwardTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("tern-forward-" + GetParam() + "-" + std::to_string(::getpid()) + ".gguf"))
                .string();
    auto shape = synth::preset_shape(GetParam());
    ASSERT_TRUE(shape.ok());
    synth::SyntheticOptions options;
    options.quantization = "Q8_0";
    options.weight_scale = 0.08f;
    ASSERT_TRUE(synth::write_synthetic_model(path_, *shape, options).ok());
    auto file = GgufFile::open(path_);
    ASSERT_TRUE(file.ok()) << file.error().message;
    file_ = std::make_unique<GgufFile>(std::move(*file));
    auto model = load_model(*file_, device_);
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(*model);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  std::unique_ptr<KvCache> cache(TensorType type = TensorType::F16) {
    auto c = KvCache::create(device_, model_->kv_config(1024, type, 16));
    EXPECT_TRUE(c.ok());
    return std::make_unique<KvCache>(std::move(*c));
  }

  // Logits for every token of `tokens`, fed in chunks of `chunk`.
  std::vector<float> run(KvCache& kv, const std::vector<int32_t>& tokens, size_t chunk) {
    SequenceKv seq;
    std::vector<float> all;
    for (size_t at = 0; at < tokens.size(); at += chunk) {
      const size_t n = std::min(chunk, tokens.size() - at);
      EXPECT_TRUE(kv.reserve(seq, seq.length + static_cast<int64_t>(n)));
      SequenceBatch b{std::span(tokens).subspan(at, n), &seq, true};
      auto ok = forward_logits(*model_, {&b, 1}, kv, all);
      EXPECT_TRUE(ok.ok()) << ok.error().message;
    }
    kv.release(seq);
    return all;
  }

  std::vector<int32_t> prompt(size_t n, int32_t salt) const {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i)
      t[i] = static_cast<int32_t>((i * 37 + static_cast<size_t>(salt) * 101 + 5) % 256);
    return t;
  }

  static float max_abs_diff(std::span<const float> a, std::span<const float> b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
  }

  static double rel_rms(std::span<const float> got, std::span<const float> want) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    return std::sqrt(err / std::max(norm, 1e-30));
  }

  std::string path_;
  CpuDevice device_{2};
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Model> model_;
};

TEST_P(ForwardTest, ChunkedPrefillAndDecodeMatchOnePass) {
  auto kv = cache();
  auto tokens = prompt(40, 1);
  auto whole = run(*kv, tokens, tokens.size());
  const size_t vocab = static_cast<size_t>(model_->shape().vocab);
  ASSERT_EQ(whole.size(), tokens.size() * vocab);
  float spread = 0;
  for (float v : whole) spread = std::max(spread, std::fabs(v));
  ASSERT_GT(spread, 0.1f) << "logits are degenerate";
  const auto chunked = run(*kv, tokens, 7), decoded = run(*kv, tokens, 1);
  EXPECT_LT(max_abs_diff(whole, chunked), 2e-3f * spread);
  EXPECT_LT(max_abs_diff(whole, decoded), 2e-3f * spread);
  // The CUDA backend's forward test measures its own logits against the whole pass: the same
  // numbers from the CPU's own paths say how much of that is the CPU's.
  std::printf("[forward] %-10s whole vs chunks of 7 rel rms %.3g, vs one token at a time %.3g\n",
              GetParam().c_str(), rel_rms(chunked, whole), rel_rms(decoded, whole));
}

TEST_P(ForwardTest, OneBatchOfSeveralSequencesMatchesSeparateRuns) {
  auto kv = cache();
  const std::vector<std::vector<int32_t>> prompts = {prompt(9, 1), prompt(23, 2), prompt(1, 3)};
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(run(*kv, p, p.size()));
  const size_t vocab = static_cast<size_t>(model_->shape().vocab);

  // First a prefix of each sequence, then the rest of all three in one batch of mixed lengths.
  std::vector<SequenceKv> seqs(prompts.size());
  std::vector<float> first;
  std::vector<SequenceBatch> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t head = prompts[i].size() / 2;
    if (head == 0) continue;
    ASSERT_TRUE(kv->reserve(seqs[i], static_cast<int64_t>(head)));
    batch.push_back({std::span(prompts[i]).first(head), &seqs[i], false});
  }
  ASSERT_TRUE(forward_logits(*model_, batch, *kv, first).ok());
  batch.clear();
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(kv->reserve(seqs[i], static_cast<int64_t>(prompts[i].size())));
    batch.push_back(
        {std::span(prompts[i]).subspan(static_cast<size_t>(seqs[i].length)), &seqs[i], true});
  }
  std::vector<float> rest;
  ASSERT_TRUE(forward_logits(*model_, batch, *kv, rest).ok());
  size_t row = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const size_t head = prompts[i].size() / 2;
    for (size_t t = head; t < prompts[i].size(); ++t, ++row) {
      std::span<const float> got(rest.data() + row * vocab, vocab);
      std::span<const float> want(alone[i].data() + t * vocab, vocab);
      EXPECT_LT(max_abs_diff(got, want), 1e-3f) << "sequence " << i << " token " << t;
    }
  }
  EXPECT_EQ(row * vocab, rest.size());
}

TEST_P(ForwardTest, StepSamplingPicksTheArgmaxOfTheLogitsWhereTheyAre) {
  // One batch of three sequences, run twice: once returning every sequence's last logits, once
  // through the engine's step (sched/step.h) with the first and last picking their argmax in the
  // plan and the middle one returning its row. The step returns the middle sequence's row
  // alone, and the ids are the first index of the maximum of the rows they replace (the same
  // batch gives the same logits).
  auto kv = cache();
  const std::vector<std::vector<int32_t>> prompts = {prompt(9, 4), prompt(5, 5), prompt(13, 6)};
  const size_t vocab = static_cast<size_t>(model_->shape().vocab);
  std::vector<float> full;
  StepOutputs step;
  for (bool sampled : {false, true}) {
    std::vector<SequenceKv> seqs(prompts.size());
    std::vector<SequenceBatch> batch;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_TRUE(kv->reserve(seqs[i], static_cast<int64_t>(prompts[i].size())));
      batch.push_back(SequenceBatch{std::span(prompts[i]), &seqs[i], false});
    }
    if (sampled) {
      std::vector<RowSampling> rows(3);
      rows[1] = RowSampling::scored();
      auto out = run_step(*model_, *kv, batch, rows);
      ASSERT_TRUE(out.ok()) << out.error().message;
      step = *out;
    } else {
      EXPECT_TRUE(forward_logits(*model_, batch, *kv, full).ok());
    }
    for (auto& s : seqs) kv->release(s);
  }
  ASSERT_EQ(full.size(), 3 * vocab);
  ASSERT_EQ(step.rows.size(), vocab) << "only the middle sequence's row comes back";
  EXPECT_EQ(max_abs_diff(step.rows, std::span(full).subspan(vocab, vocab)), 0.0f);
  ASSERT_EQ(step.tokens.size(), 3u);
  EXPECT_EQ(step.tokens[1], -1);
  for (size_t i : {size_t{0}, size_t{2}}) {
    auto row = std::span(full).subspan(i * vocab, vocab);
    const auto want = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    EXPECT_EQ(step.tokens[i], want) << "sequence " << i;
  }
}

TEST_P(ForwardTest, ATokenTreeGivesEachBranchItsOwnPathsLogits) {
  // Speculative decoding's verify pass: after a cached prompt, one forward over a tree of draft
  // tokens; every node's logits must be those of a plain causal run over the prompt and the
  // node's path from the root (its ancestors, then itself).
  auto kv = cache();
  const auto prefix = prompt(21, 7);
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 5, -1, 7, 3};
  const std::vector<int32_t> draft = {11, 45, 46, 101, 102, 200, 201, 17, 18, 99};
  const size_t vocab = static_cast<size_t>(model_->shape().vocab);
  SequenceKv seq;
  ASSERT_TRUE(kv->reserve(seq, static_cast<int64_t>(prefix.size() + draft.size())));
  std::vector<float> ignored, tree;
  SequenceBatch head{prefix, &seq, false};
  ASSERT_TRUE(forward_logits(*model_, {&head, 1}, *kv, ignored).ok());
  SequenceBatch b{draft, &seq, true};
  b.tree_parents = parents;
  ASSERT_TRUE(forward_logits(*model_, {&b, 1}, *kv, tree).ok());
  ASSERT_EQ(tree.size(), draft.size() * vocab);
  kv->release(seq);
  for (size_t i = 0; i < draft.size(); ++i) {
    std::vector<int32_t> path;
    for (int32_t n = static_cast<int32_t>(i); n >= 0; n = parents[static_cast<size_t>(n)])
      path.insert(path.begin(), draft[static_cast<size_t>(n)]);
    std::vector<int32_t> tokens = prefix;
    tokens.insert(tokens.end(), path.begin(), path.end());
    const auto plain = run(*kv, tokens, tokens.size());
    std::span<const float> want(plain.data() + (tokens.size() - 1) * vocab, vocab);
    std::span<const float> got(tree.data() + i * vocab, vocab);
    EXPECT_LT(max_abs_diff(got, want), 1e-3f) << "tree token " << i;
  }
}

TEST_P(ForwardTest, MalformedTokenTreesAreRefused) {
  auto kv = cache();
  const auto tokens = prompt(4, 8);
  SequenceKv seq;
  ASSERT_TRUE(kv->reserve(seq, 4));
  std::vector<float> logits;
  const std::vector<std::vector<int32_t>> bad = {{-1, 0, 2, 1}, {-1, 0}, {-1, -2, 0, 1}};
  for (const auto& parents : bad) {
    SequenceBatch b{tokens, &seq, true};
    b.tree_parents = parents;
    auto r = forward_logits(*model_, {&b, 1}, *kv, logits);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("tree"), std::string::npos) << r.error().message;
    EXPECT_EQ(seq.length, 0) << "a refused batch leaves the sequence as it was";
  }
  kv->release(seq);
}

TEST_P(ForwardTest, QuantizedKvStaysCloseToF16) {
  auto tokens = prompt(32, 4);
  auto f16 = run(*cache(TensorType::F16), tokens, tokens.size());
  float spread = 0;
  for (float v : f16) spread = std::max(spread, std::fabs(v));
  for (TensorType type : {TensorType::F32, TensorType::BF16, TensorType::Q8_0}) {
    auto other = run(*cache(type), tokens, tokens.size());
    EXPECT_LT(max_abs_diff(f16, other), 0.05f * spread) << tensor_type_name(type);
  }
}

TEST_P(ForwardTest, CacheRefusesWhenFull) {
  auto c = KvCache::create(device_, model_->kv_config(32, TensorType::F16, 16));
  ASSERT_TRUE(c.ok());
  SequenceKv a, b;
  EXPECT_TRUE(c->reserve(a, 20));
  EXPECT_FALSE(c->reserve(b, 20));
  EXPECT_EQ(b.blocks.size(), 0u);
  c->release(a);
  EXPECT_TRUE(c->reserve(b, 32));
}

INSTANTIATE_TEST_SUITE_P(Architectures, ForwardTest,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3",
                                           "tiny-qwen3moe"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace tern

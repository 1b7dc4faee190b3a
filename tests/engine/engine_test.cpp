// The serving engine on a tiny random model: concurrent requests give exactly the tokens each
// would get alone, a follow-up request reuses the cached prefix without changing its output,
// cancellation and shutdown end streams with a final event, bad requests fail at submit.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <tuple>

#include "backend/cpu_device/cpu_device.h"
#include "engine/engine.h"
#include "synthetic_model.h"

namespace tern {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = (std::filesystem::temp_directory_path() /
             ("tern-engine-" + std::to_string(::getpid()) + ".gguf"))
                .string();
    auto shape = synth::preset_shape("tiny-qwen3");
    synth::SyntheticOptions o;
    o.quantization = "Q8_0";
    o.weight_scale = 0.1f;
    ASSERT_TRUE(synth::write_synthetic_model(path_, *shape, o).ok());
  }
  static void TearDownTestSuite() { std::filesystem::remove(path_); }

  std::unique_ptr<LoadedModel> load(int64_t context = 512) {
    LoadOptions o;
    o.threads = 2;
    o.context = context;
    o.progress = false;
    auto m = load_model_file(path_, o);
    EXPECT_TRUE(m.ok()) << m.error().message;
    return std::move(*m);
  }

  static std::vector<int32_t> prompt(size_t n, int salt) {
    std::vector<int32_t> p(n);
    for (size_t i = 0; i < n; ++i)
      p[i] = static_cast<int32_t>(32 + (i * 7 + static_cast<size_t>(salt) * 13) % 90);
    return p;
  }

  struct Collected {
    std::vector<int32_t> tokens;
    std::string text;
    Event done;
  };
  static Collected drain(EventStream& s) {
    Collected c;
    while (auto e = s.next()) {
      if (e->type == Event::Type::Text) {
        for (const auto& t : e->tokens) c.tokens.push_back(t.chosen.token);
        c.text += e->text;
      } else {
        c.done = *e;
      }
    }
    return c;
  }

  static Request greedy(std::vector<int32_t> p, int64_t n) {
    Request r;
    r.prompt = std::move(p);
    r.options.max_tokens = n;
    r.options.ignore_eos = true;
    return r;
  }

  static std::string path_;
};
std::string EngineTest::path_;

TEST_F(EngineTest, ConcurrentRequestsMatchSingleSequenceGeneration) {
  auto m = load();
  std::vector<std::vector<int32_t>> expected;
  {
    Generator g(*m);
    for (int i = 0; i < 4; ++i) {
      GenerateOptions o;
      o.max_tokens = 12;
      o.ignore_eos = true;
      g.reset();
      auto r = g.generate(prompt(5 + 9 * static_cast<size_t>(i), i), o);
      ASSERT_TRUE(r.ok()) << r.error().message;
      expected.push_back(r->tokens);
    }
  }
  Engine engine(*m, EngineOptions{4, 16});
  std::vector<std::shared_ptr<EventStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s = engine.submit(greedy(prompt(5 + 9 * static_cast<size_t>(i), i), 12));
    ASSERT_TRUE(s.ok()) << s.error().message;
    streams.push_back(*s);
  }
  for (int i = 0; i < 4; ++i) {
    auto c = drain(*streams[static_cast<size_t>(i)]);
    EXPECT_EQ(c.tokens, expected[static_cast<size_t>(i)]) << "request " << i;
    EXPECT_EQ(c.done.finish, FinishReason::Length);
    EXPECT_EQ(c.done.usage.completion_tokens, 12);
  }
}

// Counts the forwards of the model it wraps.
class CountingModel : public Model {
 public:
  explicit CountingModel(std::unique_ptr<Model> inner) : inner_(std::move(inner)) {}
  const ModelShape& shape() const override { return inner_->shape(); }
  Device& device() const override { return inner_->device(); }
  Result<Tensor> forward(std::span<SequenceBatch> batch, KvCache& cache, StepPlan& plan) override {
    ++forwards;
    return inner_->forward(batch, cache, plan);
  }
  int forwards = 0;

 private:
  std::unique_ptr<Model> inner_;
};

// The Generator feeds a prompt in the model's prefill chunks (45 tokens in chunks of 4: 12
// forwards, then one a generated token), and the tokens are those of one forward of the whole
// prompt: the chunk a device prefers changes speed, not output. A request's own chunk wins.
TEST_F(EngineTest, ThePrefillChunkChangesNoTokens) {
  auto m = load();
  auto* counting = new CountingModel(std::move(m->model));
  m->model.reset(counting);
  GenerateOptions o;
  o.max_tokens = 8;
  o.ignore_eos = true;
  Generator g(*m);
  m->prefill_chunk = 512;
  auto whole = g.generate(prompt(45, 3), o);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(counting->forwards, 1 + 7);
  g.reset();
  m->prefill_chunk = 4;
  counting->forwards = 0;
  auto chunked = g.generate(prompt(45, 3), o);
  ASSERT_TRUE(chunked.ok()) << chunked.error().message;
  EXPECT_EQ(counting->forwards, 12 + 7);
  EXPECT_EQ(chunked->tokens, whole->tokens);
  o.prefill_chunk = 15;
  g.reset();
  counting->forwards = 0;
  auto own = g.generate(prompt(45, 3), o);
  ASSERT_TRUE(own.ok()) << own.error().message;
  EXPECT_EQ(counting->forwards, 3 + 7);
  EXPECT_EQ(own->tokens, whole->tokens);
}

// The GPU's prefill chunk: 2,048 tokens for an 8B-class shape (its activations, ~256 KiB a token,
// fit the 768 MiB kept for them), halved for wider models until they fit, never below the CPU's
// 512; the CPU keeps 512.
TEST(PrefillChunk, FollowsTheActivationsOfTheShape) {
  ModelShape qwen3_8b;
  qwen3_8b.hidden = 4096;
  qwen3_8b.heads = 32;
  qwen3_8b.kv_heads = 8;
  qwen3_8b.head_dim = 128;
  EXPECT_EQ(prefill_chunk_tokens(qwen3_8b, 12288, true), 2048);
  EXPECT_EQ(prefill_chunk_tokens(qwen3_8b, 12288, false), 512);
  ModelShape llama_70b = qwen3_8b;
  llama_70b.hidden = 8192;
  llama_70b.heads = 64;
  EXPECT_EQ(prefill_chunk_tokens(llama_70b, 28672, true), 1024);
  ModelShape huge = llama_70b;
  huge.hidden = 16384;
  EXPECT_EQ(prefill_chunk_tokens(huge, 0, true), 512);  // unknown width: 4 x hidden
}

TEST_F(EngineTest, FollowUpReusesTheCachedPrefix) {
  auto m = load();
  Engine engine(*m, EngineOptions{2, 64});
  auto first_prompt = prompt(40, 3);
  auto first = drain(**engine.submit(greedy(first_prompt, 8)));
  EXPECT_EQ(first.done.usage.cached_tokens, 0);
  // The next turn: the whole first exchange plus more text.
  auto next_prompt = first_prompt;
  next_prompt.insert(next_prompt.end(), first.tokens.begin(), first.tokens.end());
  auto extra = prompt(10, 9);
  next_prompt.insert(next_prompt.end(), extra.begin(), extra.end());
  auto second = drain(**engine.submit(greedy(next_prompt, 8)));
  EXPECT_GE(second.done.usage.cached_tokens, 40);

  auto fresh_model = load();
  Engine fresh(*fresh_model, EngineOptions{2, 64});
  auto reference = drain(**fresh.submit(greedy(next_prompt, 8)));
  EXPECT_EQ(reference.done.usage.cached_tokens, 0);
  EXPECT_EQ(second.tokens, reference.tokens);
}

TEST_F(EngineTest, StopStringsEndTheStreamWithoutTheStopText) {
  auto m = load();
  Engine engine(*m, EngineOptions{1, 64});
  auto all = drain(**engine.submit(greedy(prompt(12, 4), 24)));
  ASSERT_GE(all.text.size(), 6u);
  // Use a piece of the actual output as the stop string.
  const std::string stop = all.text.substr(3, 2);
  auto r = greedy(prompt(12, 4), 24);
  r.options.stop = {stop};
  auto stopped = drain(**engine.submit(r));
  EXPECT_EQ(stopped.text, all.text.substr(0, all.text.find(stop)));
  EXPECT_EQ(stopped.done.finish, FinishReason::Stop);
  EXPECT_EQ(stopped.done.stop_sequence, stop);
}

TEST_F(EngineTest, CancelAndShutdownEndStreams) {
  auto m = load();
  auto engine = std::make_unique<Engine>(*m, EngineOptions{2, 64});
  auto s = *engine->submit(greedy(prompt(8, 5), 400));
  auto first = s->next();
  ASSERT_TRUE(first.has_value());
  s->cancel();
  auto c = drain(*s);
  EXPECT_EQ(c.done.type, Event::Type::Done);
  EXPECT_EQ(c.done.finish, FinishReason::Cancelled);

  auto long_running = *engine->submit(greedy(prompt(8, 6), 400));
  ASSERT_TRUE(long_running->next().has_value());
  engine->shutdown();
  auto d = drain(*long_running);
  EXPECT_EQ(d.done.finish, FinishReason::Cancelled);
  EXPECT_FALSE(engine->submit(greedy(prompt(8, 6), 4)).ok());
}

TEST_F(EngineTest, BadRequestsFailAtSubmit) {
  auto m = load(64);
  Engine engine(*m, EngineOptions{1, 64});
  EXPECT_FALSE(engine.submit(greedy({}, 4)).ok());
  EXPECT_FALSE(engine.submit(greedy({999999}, 4)).ok());
  EXPECT_FALSE(engine.submit(greedy(prompt(100, 1), 4)).ok());  // longer than the context
  auto r = greedy(prompt(4, 1), 4);
  r.options.sampling.temperature = -1;
  EXPECT_FALSE(engine.submit(r).ok());
}

TEST_F(EngineTest, AFullQueueRefusesWithOverloaded) {
  auto m = load();
  Engine engine(*m, EngineOptions{1, 64, 1});
  auto first = engine.submit(greedy(prompt(8, 1), 300));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->next().has_value());  // running now
  auto second = engine.submit(greedy(prompt(8, 2), 4));
  ASSERT_TRUE(second.ok());  // waits for the slot
  auto third = engine.submit(greedy(prompt(8, 3), 4));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().code, kErrorOverloaded);
  (*first)->cancel();
  EXPECT_EQ(drain(**second).done.finish, FinishReason::Length);
  const EngineMetrics metrics = engine.metrics();
  EXPECT_EQ(metrics.requests, 2u);
  EXPECT_EQ(metrics.rejected, 1u);
  EXPECT_GE(metrics.generated_tokens, 4u);
  EXPECT_GT(metrics.kv_blocks_total, 0);
}

TEST_F(EngineTest, LogprobsAreADistribution) {
  auto m = load();
  Engine engine(*m, EngineOptions{1, 64});
  auto r = greedy(prompt(6, 2), 3);
  r.top_logprobs = 5;
  auto s = *engine.submit(r);
  int seen = 0;
  while (auto e = s->next()) {
    for (const auto& t : e->tokens) {
      ASSERT_EQ(t.top.size(), 5u);
      EXPECT_EQ(t.top[0].token, t.chosen.token);  // greedy picks the most likely
      EXPECT_LE(t.chosen.logprob, 0.0f);
      for (size_t i = 1; i < t.top.size(); ++i) EXPECT_LE(t.top[i].logprob, t.top[i - 1].logprob);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 3);
}

// Temperature sampling picks where the logits are (sample/'s ops in the step plan), whether or
// not the request also wants the row back for logprobs: both take the same draws from the same
// seed and must pick the same tokens, and the Generator's path picks them too.
TEST_F(EngineTest, SampledTokensAreTheSameWhereverTheyArePicked) {
  auto m = load();
  for (auto [temperature, top_p, top_k] :
       {std::tuple{0.8f, 1.0f, 0}, {1.2f, 0.9f, 0}, {0.7f, 1.0f, 20}}) {
    auto sampled = [&](bool logprobs) {
      Engine engine(*m, EngineOptions{1, 64});
      auto r = greedy(prompt(7, 4), 24);
      r.options.sampling.temperature = temperature;
      r.options.sampling.top_p = top_p;
      r.options.sampling.top_k = top_k;
      r.options.sampling.seed = 11;
      if (logprobs) r.top_logprobs = 2;
      return drain(**engine.submit(r)).tokens;
    };
    const auto on_device = sampled(false), on_host = sampled(true);
    ASSERT_EQ(on_device.size(), 24u);
    EXPECT_EQ(on_device, on_host) << "temperature " << temperature;
    Generator g(*m);
    GenerateOptions go;
    go.max_tokens = 24;
    go.ignore_eos = true;
    go.sampling.temperature = temperature;
    go.sampling.top_p = top_p;
    go.sampling.top_k = top_k;
    go.sampling.seed = 11;
    auto alone = g.generate(prompt(7, 4), go);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(alone->tokens, on_device) << "temperature " << temperature;
  }
}

}  // namespace
}  // namespace tern

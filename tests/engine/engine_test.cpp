// The engine on a tiny random model: concurrent requests give exactly the tokens each would get
// alone on the CLI's one slot, a follow-up request reuses the cached prefix without changing its
// output, cancellation and shutdown end streams with a final event, bad requests fail at submit,
// and scoring gives every position's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
    std::vector<float> logprobs;  // the chosen tokens' (when asked for)
    std::string text;
    Event done;
  };
  static Collected drain(EventStream& s) {
    Collected c;
    while (auto e = s.next()) {
      if (e->type == Event::Type::Text) {
        for (const auto& t : e->tokens) {
          c.tokens.push_back(t.chosen.token);
          c.logprobs.push_back(t.chosen.logprob);
        }
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

  // What `tern run` and `tern chat` drive: the engine with one slot.
  static EngineOptions one_slot() { return EngineOptions{.parallel = 1}; }

  static std::string path_;
};
std::string EngineTest::path_;

TEST_F(EngineTest, ConcurrentRequestsMatchSingleSequenceGeneration) {
  auto m = load();
  std::vector<std::vector<int32_t>> expected;
  {
    Engine alone(*m, one_slot());
    for (int i = 0; i < 4; ++i) {
      auto r = alone.generate(greedy(prompt(5 + 9 * static_cast<size_t>(i), i), 12));
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->finish, FinishReason::Length);
      EXPECT_EQ(r->reused_tokens, 0);
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

// The engine feeds a prompt in the model's prefill chunks (45 tokens in chunks of 4: 12
// forwards, then one a generated token), and the tokens are those of one forward of the whole
// prompt: the chunk a device prefers changes speed, not output. The engine's own budget wins.
TEST_F(EngineTest, ThePrefillChunkChangesNoTokens) {
  auto m = load();
  auto* counting = new CountingModel(std::move(m->model));
  m->model.reset(counting);
  auto run = [&](int64_t step_tokens) {
    Engine engine(*m, EngineOptions{.parallel = 1, .step_tokens = step_tokens});
    counting->forwards = 0;
    auto r = engine.generate(greedy(prompt(45, 3), 8));
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  };
  m->prefill_chunk = 512;
  const auto whole = run(0);
  EXPECT_EQ(counting->forwards, 1 + 7);
  m->prefill_chunk = 4;
  const auto chunked = run(0);
  EXPECT_EQ(counting->forwards, 12 + 7);
  EXPECT_EQ(chunked, whole);
  const auto own = run(15);
  EXPECT_EQ(counting->forwards, 3 + 7);
  EXPECT_EQ(own, whole);
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
// seed and must pick the same tokens; `tern run`'s path (Engine::generate, one slot) picks them
// too, and so does the server's engine with other requests in the batch.
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
    auto request = greedy(prompt(7, 4), 24);
    request.options.sampling.temperature = temperature;
    request.options.sampling.top_p = top_p;
    request.options.sampling.top_k = top_k;
    request.options.sampling.seed = 11;
    GenerateResult cli;
    {
      Engine engine(*m, one_slot());
      auto got = engine.generate(request);
      ASSERT_TRUE(got.ok()) << got.error().message;
      cli = std::move(*got);
    }
    EXPECT_EQ(cli.tokens, on_device) << "temperature " << temperature;
    Engine server(*m, EngineOptions{4, 64});
    auto others = *server.submit_all({greedy(prompt(30, 1), 30), greedy(prompt(9, 2), 30)});
    auto served = drain(**server.submit(request));
    EXPECT_EQ(served.tokens, cli.tokens) << "temperature " << temperature;
    EXPECT_EQ(served.text, cli.text) << "temperature " << temperature;
    for (auto& s : others) drain(*s);
  }
}

// Engine::generate is a client of the stream: the text, tokens and finish of the events, the
// prefill and decode time of the Done event's timing; returning false from the text callback
// cancels.
TEST_F(EngineTest, GenerateCollectsTheStream) {
  auto m = load();
  Engine engine(*m, one_slot());
  auto streamed = drain(**engine.submit(greedy(prompt(20, 7), 10)));
  EXPECT_GT(streamed.done.timing.prefill_seconds(), 0.0);
  EXPECT_GT(streamed.done.timing.decode_seconds(), 0.0);
  EXPECT_LE(streamed.done.timing.submitted, streamed.done.timing.admitted);
  std::string pieces;
  auto got = engine.generate(greedy(prompt(20, 7), 10), [&](const std::string& piece) {
    pieces += piece;
    return true;
  });
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->tokens, streamed.tokens);
  EXPECT_EQ(got->text, streamed.text);
  EXPECT_EQ(pieces, got->text);
  EXPECT_EQ(got->finish, FinishReason::Length);
  EXPECT_EQ(got->prompt_tokens, 20);
  EXPECT_GT(got->reused_tokens, 0);  // the same prompt again: from the prefix cache
  EXPECT_GT(got->prefill_seconds, 0.0);
  EXPECT_GT(got->decode_seconds, 0.0);

  int calls = 0;
  auto cancelled =
      engine.generate(greedy(prompt(20, 8), 300), [&](const std::string&) { return ++calls < 2; });
  ASSERT_TRUE(cancelled.ok()) << cancelled.error().message;
  EXPECT_EQ(cancelled->finish, FinishReason::Cancelled);
  EXPECT_EQ(calls, 2);
  EXPECT_LT(cancelled->tokens.size(), 300u);
  EXPECT_FALSE(engine.generate(greedy({}, 4)).ok());
}

// Scoring gives the next-token logits of every position, as the scheduler computes them in its
// prefill chunks: the same rows in any chunking, the first generated token's row is the one the
// generation sampled from, a greedy continuation is the argmax along itself, and log-probabilities
// are the rows' log-softmax. A cached prefix is never used for it.
TEST_F(EngineTest, ScoreGivesEveryPositionsLogits) {
  auto m = load();
  const auto vocab = static_cast<size_t>(m->model->shape().vocab);
  const auto p = prompt(21, 5);
  Engine engine(*m, one_slot());
  auto first = greedy(p, 6);
  first.top_logprobs = 0;
  auto generated = drain(**engine.submit(first));
  ASSERT_EQ(generated.tokens.size(), 6u);
  std::vector<int32_t> seq = p;
  seq.insert(seq.end(), generated.tokens.begin(), generated.tokens.end());
  auto logits = engine.score(seq);
  ASSERT_TRUE(logits.ok()) << logits.error().message;
  ASSERT_EQ(logits->size(), seq.size() * vocab);
  for (size_t k = 0; k < generated.tokens.size(); ++k) {
    const size_t row = p.size() - 1 + k;
    const auto* begin = logits->data() + row * vocab;
    EXPECT_EQ(std::max_element(begin, begin + vocab) - begin, generated.tokens[k]) << "token " << k;
  }

  Engine chunked(*m, EngineOptions{.parallel = 1, .step_tokens = 4});
  auto in_chunks = chunked.score(seq);
  ASSERT_TRUE(in_chunks.ok()) << in_chunks.error().message;
  ASSERT_EQ(in_chunks->size(), logits->size());
  for (size_t i = 0; i < logits->size(); ++i)
    ASSERT_NEAR((*in_chunks)[i], (*logits)[i], 1e-3f) << "row " << i / vocab;

  auto logprobs = engine.score(seq, true);
  ASSERT_TRUE(logprobs.ok()) << logprobs.error().message;
  ASSERT_EQ(logprobs->size(), logits->size());
  for (size_t row = 0; row < seq.size(); ++row) {
    const auto lp =
        Sampler::log_softmax(std::span<const float>(logits->data() + row * vocab, vocab));
    double total = 0;
    for (size_t v = 0; v < vocab; ++v) {
      total += std::exp(static_cast<double>((*logprobs)[row * vocab + v]));
      ASSERT_FLOAT_EQ((*logprobs)[row * vocab + v], lp[v]);
    }
    EXPECT_NEAR(total, 1.0, 1e-4) << "row " << row;
  }
  const size_t last = p.size() - 1;  // the first generated token's distribution
  EXPECT_NEAR((*logprobs)[last * vocab + static_cast<size_t>(generated.tokens[0])],
              generated.logprobs[0], 1e-3f);

  EXPECT_FALSE(engine.score({}).ok());
  EXPECT_FALSE(engine.score({999999}).ok());
  EXPECT_FALSE(engine.score(prompt(513, 1)).ok());  // longer than the context
  EXPECT_EQ(engine.metrics().requests, 3u);
}

}  // namespace
}  // namespace tern

// The two real models installed by the set-up: every tensor of every layer is present with the
// type and the shape the model's own metadata implies, and the tokenizer metadata is complete.
// The python interop test cross-checks the full tensor table against PyPI gguf as well.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "config/model_info.h"
#include "config/tokenizer_spec.h"
#include "io/gguf_file.h"

namespace tern {
namespace {

Result<GgufFile> open_real_model(const char* env) {
  const char* path = std::getenv(env);
  if (path == nullptr || *path == '\0') return make_error("{} is not set", env);
  return GgufFile::open(path);
}

uint64_t meta_uint(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.metadata().find(key);
  EXPECT_NE(v, nullptr) << key;
  return v && v->as_uint() ? *v->as_uint() : 0;
}

using Shapes = std::map<std::string, std::vector<uint64_t>>;

void expect_layers(const GgufFile& f, uint64_t layers, const Shapes& per_layer) {
  for (uint64_t l = 0; l < layers; ++l) {
    for (const auto& [suffix, shape] : per_layer) {
      std::string name = "blk." + std::to_string(l) + "." + suffix;
      const GgufTensor* t = f.find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->shape, shape) << name;
    }
  }
}

TEST(RealModels, SmolLM2TensorsMatchItsConfig) {
  auto f = open_real_model("TERN_SMOLLM2_GGUF");
  if (!f) GTEST_SKIP() << f.error().message << " (scripts/test.sh sets it)";
  auto info = model_info_from_gguf(*f);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->architecture, "llama");
  EXPECT_EQ(info->quantization, "Q4_1");
  const uint64_t n_embd = meta_uint(*f, "llama.embedding_length");
  const uint64_t n_ff = meta_uint(*f, "llama.feed_forward_length");
  const uint64_t n_head = meta_uint(*f, "llama.attention.head_count");
  const uint64_t n_kv = meta_uint(*f, "llama.attention.head_count_kv");
  const uint64_t layers = meta_uint(*f, "llama.block_count");
  const uint64_t vocab = meta_uint(*f, "llama.vocab_size");
  EXPECT_EQ(n_embd, 576u);
  EXPECT_EQ(layers, 30u);
  const uint64_t head_dim = n_embd / n_head;
  expect_layers(*f, layers,
                {{"attn_norm.weight", {n_embd}},
                 {"attn_q.weight", {n_embd, n_head * head_dim}},
                 {"attn_k.weight", {n_embd, n_kv * head_dim}},
                 {"attn_v.weight", {n_embd, n_kv * head_dim}},
                 {"attn_output.weight", {n_head * head_dim, n_embd}},
                 {"ffn_norm.weight", {n_embd}},
                 {"ffn_gate.weight", {n_embd, n_ff}},
                 {"ffn_up.weight", {n_embd, n_ff}},
                 {"ffn_down.weight", {n_ff, n_embd}}});
  EXPECT_EQ(f->find_tensor("token_embd.weight")->shape, (std::vector<uint64_t>{n_embd, vocab}));
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, TensorType::Q8_0);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, TensorType::Q4_1);
  EXPECT_EQ(f->find_tensor("blk.0.attn_norm.weight")->type, TensorType::F32);
  EXPECT_EQ(f->tensors().size(), 2 + 9 * layers);  // + token_embd, output_norm (tied output)

  auto spec = tokenizer_spec_from_gguf(*f);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->model, "gpt2");
  EXPECT_EQ(spec->pre, "smollm");
  EXPECT_EQ(spec->tokens.size(), vocab);
  EXPECT_EQ(spec->merges.size(), 48900u);
  EXPECT_EQ(spec->tokens[*spec->eos_id], "<|im_end|>");
  EXPECT_FALSE(spec->add_bos);
  EXPECT_NE(spec->chat_template.find("<|im_start|>"), std::string::npos);
}

TEST(RealModels, Gemma3TensorsMatchItsConfig) {
  auto f = open_real_model("TERN_GEMMA3_GGUF");
  if (!f) GTEST_SKIP() << f.error().message << " (scripts/test.sh sets it)";
  auto info = model_info_from_gguf(*f);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->architecture, "gemma3");
  EXPECT_EQ(info->quantization, "Q4_K_M");
  const uint64_t n_embd = meta_uint(*f, "gemma3.embedding_length");
  const uint64_t n_ff = meta_uint(*f, "gemma3.feed_forward_length");
  const uint64_t n_head = meta_uint(*f, "gemma3.attention.head_count");
  const uint64_t n_kv = meta_uint(*f, "gemma3.attention.head_count_kv");
  const uint64_t head_dim = meta_uint(*f, "gemma3.attention.key_length");
  const uint64_t layers = meta_uint(*f, "gemma3.block_count");
  EXPECT_EQ(layers, 18u);
  expect_layers(*f, layers,
                {{"attn_norm.weight", {n_embd}},
                 {"attn_q.weight", {n_embd, n_head * head_dim}},
                 {"attn_k.weight", {n_embd, n_kv * head_dim}},
                 {"attn_v.weight", {n_embd, n_kv * head_dim}},
                 {"attn_q_norm.weight", {head_dim}},
                 {"attn_k_norm.weight", {head_dim}},
                 {"attn_output.weight", {n_head * head_dim, n_embd}},
                 {"post_attention_norm.weight", {n_embd}},
                 {"ffn_norm.weight", {n_embd}},
                 {"ffn_gate.weight", {n_embd, n_ff}},
                 {"ffn_up.weight", {n_embd, n_ff}},
                 {"ffn_down.weight", {n_ff, n_embd}},
                 {"post_ffw_norm.weight", {n_embd}}});
  // Q4_K_M mixes types: the per-tensor choice is part of the file and must survive reading.
  std::map<TensorType, int> types;
  for (const auto& t : f->tensors()) types[t.type]++;
  EXPECT_GT(types[TensorType::Q4_K], 0);
  EXPECT_GT(types[TensorType::Q6_K], 0);
  EXPECT_GT(types[TensorType::F32], 0);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->shape, (std::vector<uint64_t>{n_embd, 262144}));

  auto spec = tokenizer_spec_from_gguf(*f);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->model, "llama");
  EXPECT_EQ(spec->tokens.size(), 262144u);
  EXPECT_EQ(spec->scores.size(), 262144u);
  EXPECT_EQ(spec->tokens[*spec->bos_id], "<bos>");
  EXPECT_EQ(spec->tokens[*spec->eos_id], "<eos>");
  EXPECT_TRUE(spec->add_bos);
  EXPECT_FALSE(spec->add_space_prefix);
}

}  // namespace
}  // namespace tern

// Hugging Face safetensors directories opened as GGUF: the tiny random checkpoints of
// tests/data/models (made by tools/fixtures/make_arch_fixtures.py) give transformers' logits, both
// opened directly and converted to a GGUF file; names, shapes, Llama's q/k permutation, Gemma's
// +1 norms and llama3 rope factors are checked exactly; sharded directories, config.json variants
// and bad directories are built here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/quant.h"
#include "backend/cpu_device/cpu_device.h"
#include "config/hf_config.h"
#include "config/hf_model.h"
#include "engine/hf_import.h"
#include "hf_test_files.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kModels = std::string(TERN_TEST_DATA_DIR) + "/models";

using testing_files::read_text;
using testing_files::StTensor;
using testing_files::TempDir;
using testing_files::write_safetensors;
using testing_files::write_text;

// Logits for every token of `ids`, one pass.
std::vector<float> run(const GgufFile& file, const std::vector<int32_t>& ids) {
  CpuDevice device(2);
  auto model = load_model(file, device);
  EXPECT_TRUE(model.ok()) << model.error().message;
  if (!model.ok()) return {};
  auto cache = KvCache::create(device, (*model)->kv_config(256, TensorType::F32, 16));
  EXPECT_TRUE(cache.ok());
  SequenceKv seq;
  EXPECT_TRUE(cache->reserve(seq, static_cast<int64_t>(ids.size())));
  SequenceBatch b{ids, &seq, true};
  std::vector<float> logits;
  auto ok = forward_logits(**model, {&b, 1}, *cache, logits);
  EXPECT_TRUE(ok.ok()) << ok.error().message;
  return logits;
}

std::vector<int32_t> fixture_ids(const std::string& arch) {
  return json::parse(read_text(kModels + "/" + arch + "/input_ids.json"))
      .get<std::vector<int32_t>>();
}

std::vector<float> fixture_logits(const std::string& arch) {
  std::string raw = read_text(kModels + "/" + arch + "/logits.f32");
  std::vector<float> out(raw.size() / 4);
  std::memcpy(out.data(), raw.data(), out.size() * 4);
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, OpensWithTransformersLogits) {
  const std::string arch = GetParam();
  auto file = open_hf_model(kModels + "/" + arch);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(*file->metadata().find("general.architecture")->as_string(), arch);
  auto logits = run(*file, fixture_ids(arch));
  auto want = fixture_logits(arch);
  EXPECT_LT(max_abs_diff(logits, want), 2e-4f) << arch;
}

TEST_P(HfFixture, ConvertedGgufGivesTheSameLogits) {
  const std::string arch = GetParam();
  TempDir tmp("convert-" + arch);
  const std::string out = (tmp.path() / "model.gguf").string();
  uint64_t last_done = 0, last_total = 0;
  auto ok = write_gguf_from_hf(kModels + "/" + arch, out, TensorType::F32,
                               [&](uint64_t done, uint64_t total) {
                                 last_done = done;
                                 last_total = total;
                               });
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(last_done, last_total);
  auto gguf = GgufFile::open(out);
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  auto hf = open_hf_model(kModels + "/" + arch);
  ASSERT_TRUE(hf.ok());
  // Same tensors, same bytes, same metadata. (Not for qwen3moe: the import stacks each layer's
  // experts into one tensor; tests/engine/hf_import_moe_test checks those bytes.)
  const bool stacks_experts = arch == "qwen3moe";
  if (!stacks_experts) {
    ASSERT_EQ(gguf->tensors().size(), hf->tensors().size());
  }
  for (const auto& t : hf->tensors()) {
    if (stacks_experts && t.name.find("_exps.") != std::string::npos) continue;
    const GgufTensor* g = gguf->find_tensor(t.name);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(g->shape, t.shape) << t.name;
    EXPECT_EQ(g->type, TensorType::F32);
    ASSERT_EQ(g->size_bytes, t.size_bytes) << t.name;
    EXPECT_EQ(std::memcmp(g->data, t.data, t.size_bytes), 0) << t.name;
  }
  for (const auto& [key, value] : hf->metadata().entries()) {
    const GgufValue* v = gguf->metadata().find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->to_display(), value.to_display()) << key;
  }
  const auto ids = fixture_ids(arch);
  EXPECT_EQ(run(*gguf, ids), run(*hf, ids));

  // Quantized: close to the reference, not equal.
  const std::string q8 = (tmp.path() / "q8.gguf").string();
  ASSERT_TRUE(write_gguf_from_hf(kModels + "/" + arch, q8, TensorType::Q8_0).ok());
  auto quantized = GgufFile::open(q8);
  ASSERT_TRUE(quantized.ok()) << quantized.error().message;
  EXPECT_EQ(quantized->find_tensor("token_embd.weight")->type, TensorType::Q8_0);
  EXPECT_EQ(quantized->find_tensor("output_norm.weight")->type, TensorType::F32);
  // Q8_0 weights and 8-bit activations: RMS error a few percent of the logits' RMS (measured: about
  // 1-3%; the tiny random models amplify rounding more than trained ones).
  const auto want = fixture_logits(arch);
  const auto got = run(*quantized, ids);
  ASSERT_EQ(got.size(), want.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 0.05) << arch;
  RecordProperty("q8_relative_rms_error", std::to_string(std::sqrt(err / norm)));
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfFixture,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3moe", "gemma3"));

TEST(HfModel, NamesShapesAndTransformsAreExact) {
  // Llama: q/k rows permuted to interleaved pairs, everything else the same bytes.
  const std::string llama = kModels + "/llama";
  auto st = SafetensorsFile::open(llama + "/model.safetensors");
  ASSERT_TRUE(st.ok());
  auto file = open_hf_model(llama);
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto config = read_hf_config(llama + "/config.json");
  ASSERT_TRUE(config.ok());
  const int64_t d = config->head_dim;
  for (const char* which : {"q", "k"}) {
    const SafetensorsTensor* src =
        st->find(fmt::format("model.layers.1.self_attn.{}_proj.weight", which));
    const GgufTensor* dst = file->find_tensor(fmt::format("blk.1.attn_{}.weight", which));
    ASSERT_NE(src, nullptr);
    ASSERT_NE(dst, nullptr);
    EXPECT_EQ(dst->shape, (std::vector<uint64_t>{src->shape[1], src->shape[0]}));
    const uint64_t row = src->shape[1] * 4;
    for (uint64_t r = 0; r < src->shape[0]; ++r) {
      const uint64_t head = r / static_cast<uint64_t>(d), in = r % static_cast<uint64_t>(d);
      const uint64_t src_row =
          head * static_cast<uint64_t>(d) + (in % 2) * static_cast<uint64_t>(d / 2) + in / 2;
      EXPECT_EQ(std::memcmp(dst->data + r * row, src->data + src_row * row, row), 0) << which << r;
    }
  }
  const GgufTensor* v = file->find_tensor("blk.0.attn_v.weight");
  // Zero copy: the same bytes of the file.
  EXPECT_EQ(v->offset, st->find("model.layers.0.self_attn.v_proj.weight")->offset);
  EXPECT_NE(file->find_tensor("output.weight"), nullptr);  // not tied
  // llama3 rope factors, as transformers' _compute_llama3_parameters.
  const GgufTensor* freqs = file->find_tensor("rope_freqs.weight");
  ASSERT_NE(freqs, nullptr);
  ASSERT_EQ(freqs->elements(), static_cast<uint64_t>(d / 2));
  std::vector<float> f(static_cast<size_t>(d / 2));
  std::memcpy(f.data(), freqs->data, f.size() * 4);
  EXPECT_EQ(f[0], 1.0f);      // high frequency: kept
  EXPECT_EQ(f.back(), 8.0f);  // low frequency: divided by factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);

  // Gemma 3: norms + 1 in F32, tied output absent, names of the sandwich norms.
  const std::string gemma = kModels + "/gemma3";
  auto gst = SafetensorsFile::open(gemma + "/model.safetensors");
  auto gfile = open_hf_model(gemma);
  ASSERT_TRUE(gfile.ok()) << gfile.error().message;
  EXPECT_EQ(gfile->find_tensor("output.weight"), nullptr);
  const std::pair<const char*, const char*> norms[] = {
      {"model.layers.2.input_layernorm.weight", "blk.2.attn_norm.weight"},
      {"model.layers.2.post_attention_layernorm.weight", "blk.2.post_attention_norm.weight"},
      {"model.layers.2.pre_feedforward_layernorm.weight", "blk.2.ffn_norm.weight"},
      {"model.layers.2.post_feedforward_layernorm.weight", "blk.2.post_ffw_norm.weight"},
      {"model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"},
      {"model.layers.2.self_attn.k_norm.weight", "blk.2.attn_k_norm.weight"},
      {"model.norm.weight", "output_norm.weight"}};
  for (const auto& [hf, gg] : norms) {
    const SafetensorsTensor* s = gst->find(hf);
    const GgufTensor* g = gfile->find_tensor(gg);
    ASSERT_NE(s, nullptr) << hf;
    ASSERT_NE(g, nullptr) << gg;
    ASSERT_EQ(g->elements(), s->elements());
    for (uint64_t i = 0; i < s->elements(); ++i) {
      float a, b;
      std::memcpy(&a, s->data + i * 4, 4);
      std::memcpy(&b, g->data + i * 4, 4);
      EXPECT_EQ(b, a + 1.0f) << gg << i;
    }
  }
  const GgufMetadata& md = gfile->metadata();
  EXPECT_EQ(md.find("gemma3.attention.sliding_window")->as_uint(), 16u);
  EXPECT_EQ(md.find("gemma3.attention.sliding_window_pattern")->as_uint(), 4u);
  EXPECT_EQ(md.find("gemma3.rope.freq_base_swa")->as_float(), 10000.0);
  EXPECT_EQ(md.find("gemma3.rope.freq_base")->as_float(), 1000000.0);
  EXPECT_EQ(md.find("gemma3.attention.query_pre_attn_scalar"), nullptr);  // = head_dim

  // Qwen2: biases, untouched (rotate-half rope).
  auto qfile = open_hf_model(kModels + "/qwen2");
  auto qst = SafetensorsFile::open(kModels + "/qwen2/model.safetensors");
  ASSERT_TRUE(qfile.ok());
  EXPECT_EQ(qfile->find_tensor("blk.0.attn_q.bias")->offset,
            qst->find("model.layers.0.self_attn.q_proj.bias")->offset);
  EXPECT_EQ(qfile->find_tensor("blk.0.attn_q.weight")->offset,
            qst->find("model.layers.0.self_attn.q_proj.weight")->offset);
}

TEST(HfModel, ShardedDirectoryMatchesTheSingleFile) {
  const std::string src = kModels + "/qwen3";
  TempDir tmp("sharded");
  auto st = SafetensorsFile::open(src + "/model.safetensors");
  ASSERT_TRUE(st.ok());
  std::vector<std::pair<std::string, StTensor>> parts[2];
  json weight_map = json::object();
  size_t i = 0;
  for (const auto& t : st->tensors()) {
    const size_t shard = i++ % 2;
    parts[shard].push_back({t.name, {t.dtype, t.shape, {t.data, t.data + t.size_bytes}}});
    weight_map[t.name] = fmt::format("model-{:05d}-of-00002.safetensors", shard + 1);
  }
  write_safetensors(tmp.path() / "model-00001-of-00002.safetensors", parts[0]);
  write_safetensors(tmp.path() / "model-00002-of-00002.safetensors", parts[1]);
  write_text(tmp.path() / "model.safetensors.index.json",
             json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  fs::copy_file(src + "/config.json", tmp.path() / "config.json");
  write_text(
      tmp.path() / "tokenizer_config.json",
      R"({"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"{{ x }}"}]})");
  auto file = open_hf_model(tmp.path().string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->paths().size(), 2u);
  EXPECT_EQ(*file->metadata().find("tokenizer.chat_template")->as_string(), "{{ x }}");
  const auto ids = fixture_ids("qwen3");
  EXPECT_LT(max_abs_diff(run(*file, ids), fixture_logits("qwen3")), 2e-4f);

  // chat_template.jinja wins over tokenizer_config.json.
  write_text(tmp.path() / "chat_template.jinja", "J");
  EXPECT_EQ(*read_hf_chat_template(tmp.path().string()), "J");

  // The index names a tensor its shard lacks; a shard name escaping the directory.
  weight_map["model.extra.weight"] = "model-00001-of-00002.safetensors";
  write_text(tmp.path() / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  auto missing = open_hf_model(tmp.path().string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("model.extra.weight"), std::string::npos);
  weight_map.erase("model.extra.weight");
  weight_map["model.norm.weight"] = "../model.safetensors";
  write_text(tmp.path() / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  EXPECT_FALSE(open_hf_model(tmp.path().string()).ok());
}

// A tiny llama directory with the given config changes and extra tensors.
struct TinyDir {
  explicit TinyDir(const std::string& name) : tmp(name) {}
  TempDir tmp;
  json config = {
      {"model_type", "llama"},   {"vocab_size", 32},         {"hidden_size", 8},
      {"num_hidden_layers", 1},  {"num_attention_heads", 2}, {"num_key_value_heads", 1},
      {"intermediate_size", 16}, {"rms_norm_eps", 1e-5},     {"tie_word_embeddings", true},
      {"rope_theta", 10000.0}};
  std::vector<std::pair<std::string, StTensor>> tensors;

  void add(const std::string& name, std::vector<uint64_t> shape, const std::string& dtype = "F32") {
    uint64_t n = 1;
    for (auto s : shape) n *= s;
    const uint64_t size = dtype == "F32" ? 4 : (dtype == "I64" ? 8 : 2);
    std::vector<uint8_t> bytes(n * size);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 % 61);
    tensors.push_back({name, {dtype, shape, bytes}});
  }
  void add_model() {
    add("model.embed_tokens.weight", {32, 8});
    add("model.norm.weight", {8});
    const std::string p = "model.layers.0.";
    add(p + "input_layernorm.weight", {8});
    add(p + "post_attention_layernorm.weight", {8});
    add(p + "self_attn.q_proj.weight", {8, 8});
    add(p + "self_attn.k_proj.weight", {4, 8});
    add(p + "self_attn.v_proj.weight", {4, 8});
    add(p + "self_attn.o_proj.weight", {8, 8});
    add(p + "mlp.gate_proj.weight", {16, 8}, "BF16");
    add(p + "mlp.up_proj.weight", {16, 8}, "F16");
    add(p + "mlp.down_proj.weight", {8, 16});
    add(p + "self_attn.rotary_emb.inv_freq", {2});  // ignored buffer
  }
  Result<GgufFile> open() {
    write_text(tmp.path() / "config.json", config.dump());
    write_safetensors(tmp.path() / "model.safetensors", tensors);
    return open_hf_model(tmp.path().string());
  }
};

TEST(HfModel, TinyLlamaLoadsAndRuns) {
  TinyDir dir("tiny");
  dir.add_model();
  auto file = dir.open();
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate.weight")->type, TensorType::BF16);
  EXPECT_EQ(file->find_tensor("blk.0.ffn_up.weight")->type, TensorType::F16);
  EXPECT_EQ(file->find_tensor("rope_freqs.weight"), nullptr);
  EXPECT_EQ(file->tensors().front().name, "token_embd.weight");
  EXPECT_TRUE(is_hf_model_dir(dir.tmp.path().string()));
  EXPECT_FALSE(hf_tokenizer_json_path(dir.tmp.path().string()).has_value());
  auto logits = run(*file, {1, 2, 3});
  EXPECT_EQ(logits.size(), 3u * 32u);
  for (float x : logits) EXPECT_TRUE(std::isfinite(x));
}

TEST(HfModel, BadDirectoriesGiveErrorsThatNameTheProblem) {
  auto expect_error = [](TinyDir& dir, const std::string& needle) {
    auto file = dir.open();
    ASSERT_FALSE(file.ok()) << needle;
    EXPECT_NE(file.error().message.find(needle), std::string::npos) << file.error().message;
  };
  {
    TinyDir dir("unknown");
    dir.add_model();
    dir.add("model.layers.0.mystery.weight", {8});
    expect_error(dir, "model.layers.0.mystery.weight");
  }
  {
    TinyDir dir("dtype");
    dir.add_model();
    dir.tensors[1].second.dtype = "I64";
    dir.tensors[1].second.bytes.resize(64);
    expect_error(dir, "dtype I64");
  }
  {
    TinyDir dir("untied");
    dir.add_model();
    dir.config["tie_word_embeddings"] = false;
    expect_error(dir, "lm_head.weight");
  }
  {
    TinyDir dir("yarn");
    dir.add_model();
    dir.config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    expect_error(dir, "rope_type 'yarn'");
  }
  {
    TinyDir dir("arch");
    dir.add_model();
    dir.config["model_type"] = "mamba";
    expect_error(dir, "'mamba'");
  }
  {
    TinyDir dir("bias");
    dir.add_model();
    dir.config["attention_bias"] = true;
    expect_error(dir, "attention_bias");
  }
  {
    TinyDir dir("layer");
    dir.add_model();
    dir.add("model.layers.x.input_layernorm.weight", {8});
    expect_error(dir, "model.layers.x");
  }
  TempDir empty("empty");
  EXPECT_FALSE(open_hf_model(empty.path().string()).ok());
  write_text(empty.path() / "config.json", "{}");
  EXPECT_FALSE(open_hf_model(empty.path().string()).ok());
  EXPECT_FALSE(open_hf_model((empty.path() / "nope").string()).ok());
}

// A byte-level BPE tokenizer.json in the Qwen2 layout: 26 letters, the space, a few merges and
// two added tokens.
json tiny_tokenizer_json() {
  json vocab = json::object();
  int id = 0;
  for (char ch = 'a'; ch <= 'z'; ++ch) vocab[std::string(1, ch)] = id++;
  vocab["\u0120"] = id++;  // "Ġ", the byte-level space
  const std::vector<std::string> merges = {"h e",        "l l",         "he ll",
                                           "hell o",     "\u0120 w",    "o r",
                                           "\u0120w or", "\u0120wor l", "\u0120worl d"};
  for (const std::string& m : merges) {
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    vocab[joined] = id++;
  }
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
          {"added_tokens",
           {{{"id", 40}, {"content", "<|endoftext|>"}, {"special", true}},
            {{"id", 41}, {"content", "<|im_start|>"}, {"special", true}},
            {{"id", 42}, {"content", "<think>"}, {"special", false}}}},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", text::patterns::kQwen2}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", false},
               {"use_regex", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

TEST(HfImport, ConvertsAByteLevelTokenizer) {
  TinyDir dir("tokenizer");
  dir.add_model();
  ASSERT_TRUE(dir.open().ok());
  const fs::path root = dir.tmp.path();
  write_text(root / "tokenizer.json", tiny_tokenizer_json().dump());
  write_text(root / "tokenizer_config.json",
             R"({"bos_token":"<|endoftext|>","eos_token":{"content":"<|im_start|>"},)"
             R"("add_bos_token":true,"chat_template":"{{ messages }}"})");
  const std::string out = (root / "tok.gguf").string();
  auto ok = write_gguf_from_hf(root.string(), out, std::nullopt);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  auto gguf = GgufFile::open(out);
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  auto spec = tokenizer_spec_from_gguf(*gguf);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->model, "gpt2");
  EXPECT_EQ(spec->pre, "qwen2");
  ASSERT_EQ(spec->tokens.size(), 43u);  // ids up to 42; the model's 32 rows are fewer
  EXPECT_EQ(spec->tokens[37], "[PAD37]");
  EXPECT_EQ(spec->kinds[37], TokenKind::Unused);
  EXPECT_EQ(spec->kinds[40], TokenKind::Control);
  EXPECT_EQ(spec->kinds[42], TokenKind::UserDefined);
  EXPECT_EQ(spec->merges.size(), 9u);
  EXPECT_EQ(spec->bos_id, 40);
  EXPECT_EQ(spec->eos_id, 41);
  EXPECT_TRUE(spec->add_bos);
  EXPECT_EQ(spec->chat_template, "{{ messages }}");
  auto from_gguf = Tokenizer::from_spec(*spec);
  auto from_json = Tokenizer::from_hf_json((root / "tokenizer.json").string());
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.error().message;
  ASSERT_TRUE(from_json.ok()) << from_json.error().message;
  for (const char* text :
       {"hello world", "<|im_start|>hello<think> world<|endoftext|>", "hhe ll"}) {
    auto a = (*from_gguf)->encode(text, true, true);
    EXPECT_EQ(a, (*from_json)->encode(text, true, true)) << text;
    EXPECT_EQ(a.front(), 40) << text;
  }
  EXPECT_EQ((*from_gguf)->encode("hello world", false, false), (std::vector<int32_t>{30, 35}));

  // Weights only; and tokenizers this converter does not handle are named.
  ASSERT_TRUE(write_gguf_from_hf(root.string(), out, std::nullopt, {}, false).ok());
  EXPECT_EQ(GgufFile::open(out)->metadata().find("tokenizer.ggml.tokens"), nullptr);
  json sp = tiny_tokenizer_json();
  sp["model"]["byte_fallback"] = true;
  write_text(root / "tokenizer.json", sp.dump());
  auto e1 = write_gguf_from_hf(root.string(), out, std::nullopt);
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.error().message.find("byte_fallback"), std::string::npos) << e1.error().message;
  json other = tiny_tokenizer_json();
  other["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  write_text(root / "tokenizer.json", other.dump());
  auto e2 = write_gguf_from_hf(root.string(), out, std::nullopt);
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.error().message.find("\\\\w+"), std::string::npos) << e2.error().message;
  EXPECT_FALSE(write_gguf_from_hf(root.string(), out, TensorType::Q5_K, {}, false).ok());
}

TEST(HfConfig, TranslatesEachArchitectureAndBothRopeSpellings) {
  // transformers 4.x spelling of llama3 scaling gives the same factors as 5.x rope_parameters.
  json v4 = json::parse(read_text(kModels + "/llama/config.json"));
  json params = v4["rope_parameters"];
  v4.erase("rope_parameters");
  v4["rope_theta"] = params["rope_theta"];
  params.erase("rope_theta");
  v4["rope_scaling"] = params;
  auto a = parse_hf_config(v4.dump(), "v4");
  auto b = read_hf_config(kModels + "/llama/config.json");
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(a->rope_freqs, b->rope_freqs);
  EXPECT_EQ(a->metadata.find("llama.rope.freq_base")->as_float(), 500000.0);
  EXPECT_TRUE(a->permute_qk);

  // Linear scaling.
  json lin = v4;
  lin["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto l = parse_hf_config(lin.dump(), "lin");
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ(*l->metadata.find("llama.rope.scaling.type")->as_string(), "linear");
  EXPECT_EQ(l->metadata.find("llama.rope.scaling.factor")->as_float(), 2.0);
  EXPECT_TRUE(l->rope_freqs.empty());

  // Gemma 3 in the 4.x spelling (Gemma 3 1B's config.json): pattern 6, local base, scalar.
  json g = {{"architectures", {"Gemma3ForCausalLM"}},
            {"model_type", "gemma3_text"},
            {"vocab_size", 262144},
            {"hidden_size", 1152},
            {"num_hidden_layers", 26},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 1},
            {"head_dim", 256},
            {"intermediate_size", 6912},
            {"max_position_embeddings", 32768},
            {"query_pre_attn_scalar", 256},
            {"rope_local_base_freq", 10000},
            {"rope_theta", 1000000},
            {"rope_scaling", nullptr},
            {"sliding_window", 512},
            {"sliding_window_pattern", 6},
            {"final_logit_softcapping", nullptr},
            {"attn_logit_softcapping", nullptr},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"torch_dtype", "bfloat16"}};
  auto g1 = parse_hf_config(g.dump(), "g");
  ASSERT_TRUE(g1.ok()) << g1.error().message;
  EXPECT_EQ(g1->architecture, "gemma3");
  EXPECT_TRUE(g1->tied_embeddings);
  EXPECT_TRUE(g1->norm_plus_one);
  EXPECT_EQ(g1->dtype, "bfloat16");
  EXPECT_EQ(g1->metadata.find("gemma3.attention.sliding_window_pattern")->as_uint(), 6u);
  EXPECT_EQ(g1->metadata.find("gemma3.rope.freq_base_swa")->as_float(), 10000.0);
  EXPECT_EQ(g1->metadata.find("gemma3.attention.query_pre_attn_scalar"), nullptr);
  // A query scale Tern's rule would not give is written for gemma3.cpp to read.
  g["query_pre_attn_scalar"] = 144;
  g["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  auto g2 = parse_hf_config(g.dump(), "g");
  ASSERT_TRUE(g2.ok()) << g2.error().message;
  EXPECT_EQ(g2->metadata.find("gemma3.attention.query_pre_attn_scalar")->as_float(), 144.0);
  EXPECT_EQ(*g2->metadata.find("gemma3.rope.scaling.type")->as_string(), "linear");
  g["final_logit_softcapping"] = 30.0;
  auto g3 = parse_hf_config(g.dump(), "g");
  ASSERT_FALSE(g3.ok());
  EXPECT_NE(g3.error().message.find("final_logit_softcapping"), std::string::npos);
  g["final_logit_softcapping"] = nullptr;
  g["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_FALSE(parse_hf_config(g.dump(), "g").ok());  // 2 entries for 26 layers
  g["hidden_activation"] = "gelu";
  EXPECT_FALSE(parse_hf_config(g.dump(), "g").ok());

  // Qwen3: head_dim other than hidden / heads.
  auto q = read_hf_config(kModels + "/qwen3/config.json");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->metadata.find("qwen3.attention.key_length")->as_uint(), 32u);
  EXPECT_EQ(q->metadata.find("qwen3.rope.freq_base")->as_float(), 1000000.0);
  EXPECT_FALSE(q->permute_qk);
  EXPECT_FALSE(parse_hf_config("{not json", "x").ok());
}

}  // namespace
}  // namespace tern

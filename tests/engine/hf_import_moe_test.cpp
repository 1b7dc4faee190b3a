// `tern import` of a Qwen3-MoE Hugging Face directory (tests/data/models/qwen3moe, made by
// transformers): the hub's per-expert matrices become llama.cpp's stacked 3-D
// blk.L.ffn_{gate,up,down}_exps.weight (ne = {cols, rows, experts}, expert 0 first), kept,
// converted to F16 or quantized to Q8_0 expert by expert; the qwen3moe.* keys are written; the
// imported file gives transformers' logits; a missing expert or experts of different shapes are
// errors; transformers 5's fused layout imports to the same tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/quant.h"
#include "backend/cpu_device/cpu_device.h"
#include "base/fp16.h"
#include "config/hf_model.h"
#include "engine/hf_import.h"
#include "hf_test_files.h"
#include "io/gguf_file.h"
#include "io/safetensors.h"
#include "models/model.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kFixture = std::string(TERN_TEST_DATA_DIR) + "/models/qwen3moe";
constexpr uint64_t kExperts = 8, kHidden = 64, kExpertFfn = 32;

using testing_files::read_text;
using testing_files::StTensor;
using testing_files::StTensors;
using testing_files::write_safetensors;
using testing_files::write_text;

StTensors fixture_tensors() {
  auto st = SafetensorsFile::open(kFixture + "/model.safetensors");
  EXPECT_TRUE(st.ok());
  StTensors out;
  if (!st.ok()) return out;
  for (const auto& t : st->tensors()) {
    out.push_back({t.name, {t.dtype, t.shape, {t.data, t.data + t.size_bytes}}});
  }
  return out;
}

StTensor& find(StTensors& tensors, const std::string& name) {
  for (auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  ADD_FAILURE() << name;
  static StTensor none;
  return none;
}

// A temporary directory that can hold a model: the fixture's config.json and given tensors.
class TempDir : public testing_files::TempDir {
 public:
  explicit TempDir(const std::string& name) : testing_files::TempDir("moe-import-" + name) {}
  std::string model(const StTensors& tensors) const {
    fs::copy_file(kFixture + "/config.json", path() / "config.json",
                  fs::copy_options::overwrite_existing);
    write_safetensors(path() / "model.safetensors", tensors);
    return path().string();
  }
};

std::string expert_name(int layer, int expert, const char* which) {
  return fmt::format("model.layers.{}.mlp.experts.{}.{}_proj.weight", layer, expert, which);
}

// Each expert's matrix, expert 0 first: the bytes of the stacked F32 tensor.
std::vector<uint8_t> stacked_f32(StTensors& tensors, int layer, const char* which) {
  std::vector<uint8_t> out;
  for (int e = 0; e < static_cast<int>(kExperts); ++e) {
    const StTensor& t = find(tensors, expert_name(layer, e, which));
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  }
  return out;
}

std::vector<float> logits_of(const GgufFile& file) {
  const auto ids = json::parse(read_text(kFixture + "/input_ids.json")).get<std::vector<int32_t>>();
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

std::vector<float> fixture_logits() {
  std::string raw = read_text(kFixture + "/logits.f32");
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

TEST(HfImportMoe, StacksExpertsIntoLlamaCppTensors) {
  TempDir tmp("f32");
  const std::string out = (tmp.path() / "moe.gguf").string();
  auto ok = write_gguf_from_hf(kFixture, out, std::nullopt);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  auto gguf = GgufFile::open(out);
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  StTensors st = fixture_tensors();

  for (int layer : {0, 2}) {
    for (const auto& [which, shape] :
         {std::pair<const char*, std::vector<uint64_t>>{"gate", {kHidden, kExpertFfn, kExperts}},
          {"up", {kHidden, kExpertFfn, kExperts}},
          {"down", {kExpertFfn, kHidden, kExperts}}}) {
      const std::string name = fmt::format("blk.{}.ffn_{}_exps.weight", layer, which);
      const GgufTensor* t = gguf->find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->shape, shape) << name;
      EXPECT_EQ(t->type, TensorType::F32);
      const auto want = stacked_f32(st, layer, which);
      ASSERT_EQ(t->size_bytes, want.size()) << name;
      EXPECT_EQ(std::memcmp(t->data, want.data(), want.size()), 0) << name;
      for (uint64_t e = 0; e < kExperts; ++e) {
        EXPECT_EQ(gguf->find_tensor(fmt::format("blk.{}.ffn_{}_exps.{}.weight", layer, which, e)),
                  nullptr);
      }
    }
    const GgufTensor* router = gguf->find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", layer));
    ASSERT_NE(router, nullptr);
    EXPECT_EQ(router->shape, (std::vector<uint64_t>{kHidden, kExperts}));
  }
  // Layer 1 is dense; the 3 x 8 expert tensors of layers 0 and 2 became 3 each.
  EXPECT_NE(gguf->find_tensor("blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(gguf->find_tensor("blk.1.ffn_gate_exps.weight"), nullptr);
  EXPECT_EQ(gguf->tensors().size(), st.size() - 2 * 3 * (kExperts - 1));
  // In layer order, as llama.cpp's converter writes them.
  int64_t last_layer = -1;
  for (const auto& t : gguf->tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    const int64_t layer = std::stoll(t.name.substr(4));
    EXPECT_GE(layer, last_layer) << t.name;
    last_layer = layer;
  }

  const GgufMetadata& md = gguf->metadata();
  EXPECT_EQ(*md.find("general.architecture")->as_string(), "qwen3moe");
  EXPECT_EQ(md.find("qwen3moe.expert_count")->as_uint(), kExperts);
  EXPECT_EQ(md.find("qwen3moe.expert_count")->type, GgufValueType::UInt32);
  EXPECT_EQ(md.find("qwen3moe.expert_used_count")->as_uint(), 2u);
  EXPECT_EQ(md.find("qwen3moe.expert_feed_forward_length")->as_uint(), kExpertFfn);
  EXPECT_EQ(md.find("qwen3moe.expert_weights_norm")->as_bool(), true);
  EXPECT_EQ(md.find("qwen3moe.feed_forward_length")->as_uint(), 128u);
  EXPECT_EQ(md.find("qwen3moe.embedding_length")->as_uint(), kHidden);
  EXPECT_EQ(md.find("qwen3moe.block_count")->as_uint(), 3u);
  EXPECT_EQ(md.find("qwen3moe.attention.key_length")->as_uint(), 32u);
  EXPECT_EQ(md.find("qwen3moe.rope.freq_base")->as_float(), 1000000.0);

  // The imported file and the directory itself both give transformers' logits.
  const auto want = fixture_logits();
  EXPECT_LT(max_abs_diff(logits_of(*gguf), want), 2e-4f);
  auto hf = open_hf_model(kFixture);
  ASSERT_TRUE(hf.ok()) << hf.error().message;
  EXPECT_LT(max_abs_diff(logits_of(*hf), want), 2e-4f);
}

TEST(HfImportMoe, ConvertsAndQuantizesExpertByExpert) {
  TempDir tmp("quant");
  StTensors st = fixture_tensors();
  const auto gate = stacked_f32(st, 2, "gate");
  const size_t rows = kExperts * kExpertFfn;

  const std::string f16 = (tmp.path() / "f16.gguf").string();
  ASSERT_TRUE(write_gguf_from_hf(kFixture, f16, TensorType::F16).ok());
  auto half = GgufFile::open(f16);
  ASSERT_TRUE(half.ok()) << half.error().message;
  const GgufTensor* h = half->find_tensor("blk.2.ffn_gate_exps.weight");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->type, TensorType::F16);
  EXPECT_EQ(h->shape, (std::vector<uint64_t>{kHidden, kExpertFfn, kExperts}));
  ASSERT_EQ(h->size_bytes, rows * kHidden * 2);
  for (size_t i = 0; i < rows * kHidden; ++i) {
    float f;
    uint16_t got;
    std::memcpy(&f, gate.data() + i * 4, 4);
    std::memcpy(&got, h->data + i * 2, 2);
    ASSERT_EQ(got, float_to_fp16(f)) << i;
  }
  EXPECT_EQ(half->find_tensor("blk.0.ffn_norm.weight")->type, TensorType::F32);

  const std::string q8 = (tmp.path() / "q8.gguf").string();
  ASSERT_TRUE(write_gguf_from_hf(kFixture, q8, TensorType::Q8_0).ok());
  auto quantized = GgufFile::open(q8);
  ASSERT_TRUE(quantized.ok()) << quantized.error().message;
  const GgufTensor* q = quantized->find_tensor("blk.2.ffn_gate_exps.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, TensorType::Q8_0);
  EXPECT_EQ(q->shape, (std::vector<uint64_t>{kHidden, kExpertFfn, kExperts}));
  const size_t row_bytes = kHidden / 32 * 34;
  ASSERT_EQ(q->size_bytes, rows * row_bytes);
  std::vector<uint8_t> want(row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<float> row(kHidden);
    std::memcpy(row.data(), gate.data() + r * kHidden * 4, kHidden * 4);
    ASSERT_EQ(cpu::quantize_row(TensorType::Q8_0, row.data(), want.data(), kHidden), row_bytes);
    ASSERT_EQ(std::memcmp(q->data + r * row_bytes, want.data(), row_bytes), 0) << r;
  }
  // Q8_0 weights and 8-bit activations stay close to transformers.
  const auto ref = fixture_logits();
  const auto got = logits_of(*quantized);
  ASSERT_EQ(got.size(), ref.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 0.05);
}

TEST(HfImportMoe, AMissingExpertOrADifferentShapeIsAnError) {
  auto expect_error = [](const StTensors& tensors, const std::string& needle) {
    TempDir tmp("bad");
    const std::string dir = tmp.model(tensors);
    auto ok = write_gguf_from_hf(dir, (tmp.path() / "out.gguf").string(), std::nullopt);
    ASSERT_FALSE(ok.ok()) << needle;
    EXPECT_NE(ok.error().message.find(needle), std::string::npos) << ok.error().message;
    EXPECT_FALSE(fs::exists(tmp.path() / "out.gguf"));
  };
  {
    StTensors st = fixture_tensors();
    std::erase_if(st, [](const auto& t) { return t.first == expert_name(2, 5, "up"); });
    expect_error(st, "'blk.2.ffn_up_exps.weight': expert 5 of 8 is missing");
  }
  {
    StTensors st = fixture_tensors();
    std::erase_if(st, [](const auto& t) { return t.first == expert_name(0, 7, "down"); });
    expect_error(st, "'blk.0.ffn_down_exps.weight': expert 7 of 8 is missing");
  }
  {
    StTensors st = fixture_tensors();
    StTensor& t = find(st, expert_name(0, 3, "gate"));
    t.shape = {16, 64};
    t.bytes.resize(16 * 64 * 4);
    expect_error(st,
                 "'blk.0.ffn_gate_exps.weight': expert 3 is F32 64x16, but expert 0 is F32 64x32");
  }
  {
    StTensors st = fixture_tensors();
    StTensor& t = find(st, expert_name(0, 1, "gate"));
    std::vector<uint8_t> half(t.bytes.size() / 2);
    for (size_t i = 0; i < half.size() / 2; ++i) {
      float f;
      std::memcpy(&f, t.bytes.data() + i * 4, 4);
      const uint16_t h = float_to_fp16(f);
      std::memcpy(half.data() + i * 2, &h, 2);
    }
    t.dtype = "F16";
    t.bytes = half;
    expect_error(st, "expert 1 is F16 64x32, but expert 0 is F32 64x32");
  }
}

TEST(HfImportMoe, FusedTransformers5LayoutImportsToTheSameTensors) {
  // model.layers.L.mlp.experts.gate_up_proj [E, 2 ff, hidden] and down_proj [E, hidden, ff].
  StTensors st = fixture_tensors();
  StTensors fused;
  for (auto& [name, t] : st) {
    if (name.find(".mlp.experts.") == std::string::npos) fused.push_back({name, t});
  }
  for (int layer : {0, 2}) {
    StTensor gate_up{"F32", {kExperts, 2 * kExpertFfn, kHidden}, {}};
    StTensor down{"F32", {kExperts, kHidden, kExpertFfn}, stacked_f32(st, layer, "down")};
    for (int e = 0; e < static_cast<int>(kExperts); ++e) {
      for (const char* which : {"gate", "up"}) {
        const auto& b = find(st, expert_name(layer, e, which)).bytes;
        gate_up.bytes.insert(gate_up.bytes.end(), b.begin(), b.end());
      }
    }
    fused.push_back({fmt::format("model.layers.{}.mlp.experts.gate_up_proj", layer), gate_up});
    fused.push_back({fmt::format("model.layers.{}.mlp.experts.down_proj", layer), down});
  }
  TempDir tmp("fused");
  const std::string dir = tmp.model(fused);
  for (std::optional<TensorType> quant :
       {std::optional<TensorType>(), std::optional(TensorType::Q8_0)}) {
    const std::string a = (tmp.path() / "per_expert.gguf").string();
    const std::string b = (tmp.path() / "fused.gguf").string();
    ASSERT_TRUE(write_gguf_from_hf(kFixture, a, quant).ok());
    auto ok = write_gguf_from_hf(dir, b, quant);
    ASSERT_TRUE(ok.ok()) << ok.error().message;
    auto ga = GgufFile::open(a);
    auto gb = GgufFile::open(b);
    ASSERT_TRUE(ga.ok() && gb.ok());
    ASSERT_EQ(ga->tensors().size(), gb->tensors().size());
    for (const auto& t : ga->tensors()) {
      const GgufTensor* u = gb->find_tensor(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      EXPECT_EQ(u->shape, t.shape) << t.name;
      EXPECT_EQ(u->type, t.type) << t.name;
      ASSERT_EQ(u->size_bytes, t.size_bytes) << t.name;
      EXPECT_EQ(std::memcmp(u->data, t.data, t.size_bytes), 0) << t.name;
    }
  }
}

}  // namespace
}  // namespace tern

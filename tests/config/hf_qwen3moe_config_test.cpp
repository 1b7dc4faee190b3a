// Qwen3-MoE from Hugging Face: config.json's expert keys as qwen3moe.* GGUF metadata (both
// spellings of the expert count, the dense-layer rules, the errors), the tensor names of the
// router and the per-expert matrices, the fixture opened as a GgufFile (per-expert 2-D tensors
// in place), and transformers 5's fused expert layout split into GGUF's stacked tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/hf_config.h"
#include "config/hf_model.h"
#include "hf_test_files.h"
#include "io/safetensors.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kFixture = std::string(TERN_TEST_DATA_DIR) + "/models/qwen3moe";

using testing_files::read_text;
using testing_files::write_text;

// Qwen3-30B-A3B's config.json (transformers 4 spelling: num_experts, rope_theta), shrunk.
json a3b_config() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}},
          {"model_type", "qwen3_moe"},
          {"attention_bias", false},
          {"decoder_sparse_step", 1},
          {"hidden_act", "silu"},
          {"hidden_size", 2048},
          {"intermediate_size", 6144},
          {"max_position_embeddings", 40960},
          {"max_window_layers", 48},
          {"mlp_only_layers", json::array()},
          {"moe_intermediate_size", 768},
          {"norm_topk_prob", true},
          {"num_attention_heads", 32},
          {"num_experts", 128},
          {"num_experts_per_tok", 8},
          {"num_hidden_layers", 48},
          {"num_key_value_heads", 4},
          {"output_router_logits", false},
          {"rms_norm_eps", 1e-06},
          {"rope_scaling", nullptr},
          {"rope_theta", 1000000.0},
          {"router_aux_loss_coef", 0.001},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"use_sliding_window", false},
          {"vocab_size", 151936}};
}

uint64_t u(const HfConfig& c, const std::string& key) {
  const GgufValue* v = c.metadata.find(key);
  EXPECT_NE(v, nullptr) << key;
  return v != nullptr ? v->as_uint().value_or(0) : 0;
}

TEST(HfQwen3MoeConfig, WritesQwen3KeysAndTheExpertKeys) {
  auto c = parse_hf_config(a3b_config().dump(), "a3b");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "qwen3moe");
  EXPECT_EQ(*c->metadata.find("general.architecture")->as_string(), "qwen3moe");
  EXPECT_EQ(u(*c, "qwen3moe.vocab_size"), 151936u);
  EXPECT_EQ(u(*c, "qwen3moe.context_length"), 40960u);
  EXPECT_EQ(u(*c, "qwen3moe.embedding_length"), 2048u);
  EXPECT_EQ(u(*c, "qwen3moe.block_count"), 48u);
  EXPECT_EQ(u(*c, "qwen3moe.feed_forward_length"), 6144u);
  EXPECT_EQ(u(*c, "qwen3moe.attention.head_count"), 32u);
  EXPECT_EQ(u(*c, "qwen3moe.attention.head_count_kv"), 4u);
  EXPECT_EQ(u(*c, "qwen3moe.attention.key_length"), 128u);  // head_dim absent: 128, as qwen3
  EXPECT_EQ(u(*c, "qwen3moe.attention.value_length"), 128u);
  EXPECT_EQ(u(*c, "qwen3moe.rope.dimension_count"), 128u);
  EXPECT_EQ(c->metadata.find("qwen3moe.attention.layer_norm_rms_epsilon")->as_float(),
            static_cast<double>(1e-6f));
  EXPECT_EQ(c->metadata.find("qwen3moe.rope.freq_base")->as_float(), 1000000.0);
  EXPECT_EQ(u(*c, "qwen3moe.expert_count"), 128u);
  EXPECT_EQ(u(*c, "qwen3moe.expert_used_count"), 8u);
  EXPECT_EQ(u(*c, "qwen3moe.expert_feed_forward_length"), 768u);
  EXPECT_EQ(c->metadata.find("qwen3moe.expert_count")->type, GgufValueType::UInt32);
  EXPECT_EQ(c->metadata.find("qwen3moe.expert_weights_norm")->as_bool(), true);
  EXPECT_EQ(c->metadata.find("qwen3moe.expert_weights_norm")->type, GgufValueType::Bool);
  EXPECT_EQ(c->experts, 128);
  EXPECT_EQ(c->experts_used, 8);
  EXPECT_EQ(c->expert_ffn, 768);
  EXPECT_TRUE(c->expert_weights_norm);
  EXPECT_EQ(c->dense_layers, std::vector<bool>(48, false));
  EXPECT_FALSE(c->permute_qk);
  EXPECT_FALSE(c->tied_embeddings);
  EXPECT_EQ(c->metadata.find("qwen3moe.expert_layers"), nullptr);  // dense layers need no key

  // The architectures list alone names it too; norm_topk_prob defaults to false.
  json j = a3b_config();
  j.erase("model_type");
  j.erase("norm_topk_prob");
  auto by_arch = parse_hf_config(j.dump(), "arch");
  ASSERT_TRUE(by_arch.ok()) << by_arch.error().message;
  EXPECT_EQ(by_arch->architecture, "qwen3moe");
  EXPECT_EQ(by_arch->metadata.find("qwen3moe.expert_weights_norm")->as_bool(), false);
}

TEST(HfQwen3MoeConfig, ReadsTheTransformers5Fixture) {
  // transformers 5: num_local_experts, rope_parameters, one dense layer (mlp_only_layers).
  auto c = read_hf_config(kFixture + "/config.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "qwen3moe");
  EXPECT_EQ(u(*c, "qwen3moe.expert_count"), 8u);
  EXPECT_EQ(u(*c, "qwen3moe.expert_used_count"), 2u);
  EXPECT_EQ(u(*c, "qwen3moe.expert_feed_forward_length"), 32u);
  EXPECT_EQ(u(*c, "qwen3moe.feed_forward_length"), 128u);
  EXPECT_EQ(u(*c, "qwen3moe.attention.key_length"), 32u);
  EXPECT_EQ(c->metadata.find("qwen3moe.rope.freq_base")->as_float(), 1000000.0);
  EXPECT_EQ(c->metadata.find("qwen3moe.expert_weights_norm")->as_bool(), true);
  EXPECT_EQ(c->dense_layers, (std::vector<bool>{false, true, false}));
}

TEST(HfQwen3MoeConfig, DenseLayersFollowTransformersRules) {
  json j = a3b_config();
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {0};
  auto c = parse_hf_config(j.dump(), "step");
  ASSERT_TRUE(c.ok()) << c.error().message;
  // Sparse when (l + 1) % 2 == 0 and not listed.
  EXPECT_EQ(c->dense_layers, (std::vector<bool>{true, false, true, false, true, false}));
  // Both spellings, agreeing, are fine.
  j["num_local_experts"] = 128;
  EXPECT_TRUE(parse_hf_config(j.dump(), "both").ok());
}

TEST(HfQwen3MoeConfig, RejectsWhatTernDoesNotRun) {
  auto expect_error = [](const json& j, const std::string& needle) {
    auto c = parse_hf_config(j.dump(), "bad");
    ASSERT_FALSE(c.ok()) << needle;
    EXPECT_NE(c.error().message.find(needle), std::string::npos) << c.error().message;
  };
  auto with = [](const char* key, json value) {
    json j = a3b_config();
    if (value.is_null()) {
      j.erase(key);
    } else {
      j[key] = std::move(value);
    }
    return j;
  };
  expect_error(with("use_sliding_window", true), "use_sliding_window");
  expect_error(with("attention_bias", true), "attention_bias");
  expect_error(with("mlp_bias", true), "mlp_bias");
  expect_error(with("hidden_act", "gelu"), "activation 'gelu'");
  expect_error(with("num_experts", 0), "'num_experts' must be positive");
  expect_error(with("num_experts", nullptr), "'num_local_experts' is missing");
  expect_error(with("num_experts_per_tok", 129), "more than the 128 experts");
  expect_error(with("num_experts_per_tok", nullptr), "'num_experts_per_tok' is missing");
  expect_error(with("moe_intermediate_size", nullptr), "'moe_intermediate_size' is missing");
  expect_error(with("norm_topk_prob", "yes"), "'norm_topk_prob' must be true or false");
  expect_error(with("decoder_sparse_step", 0), "'decoder_sparse_step' must be positive");
  expect_error(with("mlp_only_layers", {48}), "'mlp_only_layers' names layer 48");
  expect_error(with("mlp_only_layers", 3), "'mlp_only_layers' must be a list");
  expect_error(with("num_local_experts", 64), "'num_local_experts' is 64");
  json local = with("num_experts", nullptr);
  local["num_local_experts"] = -1;
  expect_error(local, "'num_local_experts' must be positive");
  // Router losses are training-only: ignored.
  EXPECT_TRUE(parse_hf_config(with("router_aux_loss_coef", 0.5).dump(), "aux").ok());
  EXPECT_TRUE(parse_hf_config(with("output_router_logits", true).dump(), "aux").ok());
}

TEST(HfQwen3MoeNames, RouterExpertsAndDenseLayers) {
  auto name = [](const std::string& hf) { return hf_to_gguf_tensor_name(hf, "qwen3moe"); };
  EXPECT_EQ(name("model.layers.3.mlp.gate.weight"), "blk.3.ffn_gate_inp.weight");
  EXPECT_EQ(name("model.layers.3.mlp.experts.0.gate_proj.weight"), "blk.3.ffn_gate_exps.0.weight");
  EXPECT_EQ(name("model.layers.3.mlp.experts.17.up_proj.weight"), "blk.3.ffn_up_exps.17.weight");
  EXPECT_EQ(name("model.layers.47.mlp.experts.127.down_proj.weight"),
            "blk.47.ffn_down_exps.127.weight");
  EXPECT_EQ(name("model.layers.3.mlp.experts.gate_up_proj"), "blk.3.ffn_gate_up_exps.weight");
  EXPECT_EQ(name("model.layers.3.mlp.experts.down_proj"), "blk.3.ffn_down_exps.weight");
  // Dense layers, attention and norms as qwen3.
  EXPECT_EQ(name("model.layers.1.mlp.gate_proj.weight"), "blk.1.ffn_gate.weight");
  EXPECT_EQ(name("model.layers.1.mlp.up_proj.weight"), "blk.1.ffn_up.weight");
  EXPECT_EQ(name("model.layers.1.mlp.down_proj.weight"), "blk.1.ffn_down.weight");
  EXPECT_EQ(name("model.layers.1.self_attn.q_norm.weight"), "blk.1.attn_q_norm.weight");
  EXPECT_EQ(name("model.layers.1.self_attn.k_norm.weight"), "blk.1.attn_k_norm.weight");
  EXPECT_EQ(name("model.layers.1.post_attention_layernorm.weight"), "blk.1.ffn_norm.weight");
  // Not names of this model.
  EXPECT_EQ(name("model.layers.3.mlp.experts.x.up_proj.weight"), std::nullopt);
  EXPECT_EQ(name("model.layers.3.mlp.experts.1.up_proj.bias"), std::nullopt);
  EXPECT_EQ(name("model.layers.3.mlp.experts.1"), std::nullopt);
  EXPECT_EQ(name("model.layers.3.mlp.experts.-1.up_proj.weight"), std::nullopt);
  EXPECT_EQ(name("model.layers.3.mlp.shared_expert.up_proj.weight"), std::nullopt);
  // The expert names belong to qwen3moe only.
  EXPECT_EQ(hf_to_gguf_tensor_name("model.layers.3.mlp.gate.weight", "qwen3"), std::nullopt);
  EXPECT_EQ(hf_to_gguf_tensor_name("model.layers.3.mlp.experts.0.up_proj.weight", "qwen3"),
            std::nullopt);

  auto split = split_expert_tensor_name("blk.3.ffn_gate_exps.17.weight");
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->stacked, "blk.3.ffn_gate_exps.weight");
  EXPECT_EQ(split->expert, 17);
  EXPECT_FALSE(split_expert_tensor_name("blk.3.ffn_gate_exps.weight"));
  EXPECT_FALSE(split_expert_tensor_name("blk.3.ffn_gate.weight"));
  EXPECT_FALSE(split_expert_tensor_name("blk.3.ffn_gate_exps.1x.weight"));
  EXPECT_FALSE(split_expert_tensor_name("blk.3.attn_q.0.weight"));
}

TEST(HfQwen3MoeModel, OpensThePerExpertFixtureInPlace) {
  auto st = SafetensorsFile::open(kFixture + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.error().message;
  auto file = open_hf_model(kFixture);
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(*file->metadata().find("general.architecture")->as_string(), "qwen3moe");
  for (int layer : {0, 2}) {
    const GgufTensor* router = file->find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", layer));
    ASSERT_NE(router, nullptr);
    EXPECT_EQ(router->shape, (std::vector<uint64_t>{64, 8}));
    for (int e = 0; e < 8; ++e) {
      for (const auto& [hf, gguf, shape] :
           {std::tuple<const char*, const char*, std::vector<uint64_t>>{"gate", "gate", {64, 32}},
            {"up", "up", {64, 32}},
            {"down", "down", {32, 64}}}) {
        const GgufTensor* g =
            file->find_tensor(fmt::format("blk.{}.ffn_{}_exps.{}.weight", layer, gguf, e));
        const SafetensorsTensor* s =
            st->find(fmt::format("model.layers.{}.mlp.experts.{}.{}_proj.weight", layer, e, hf));
        ASSERT_NE(g, nullptr) << layer << gguf << e;
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(g->shape, shape);
        EXPECT_EQ(g->offset, s->offset);  // zero copy
        ASSERT_EQ(g->size_bytes, s->size_bytes);
        EXPECT_EQ(std::memcmp(g->data, s->data, s->size_bytes), 0);
      }
    }
  }
  // Layer 1 is dense (mlp_only_layers).
  EXPECT_NE(file->find_tensor("blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(file->find_tensor("blk.1.ffn_gate_inp.weight"), nullptr);
  EXPECT_NE(file->find_tensor("blk.0.attn_q_norm.weight"), nullptr);
  // Experts in numeric order within their layer.
  std::vector<std::string> names;
  for (const auto& t : file->tensors()) names.push_back(t.name);
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n); };
  EXPECT_LT(at("blk.0.ffn_down_exps.2.weight"), at("blk.0.ffn_down_exps.3.weight"));
  EXPECT_LT(at("blk.0.ffn_down_exps.7.weight"), at("blk.0.ffn_gate_exps.0.weight"));
}

// A copy of the fixture rewritten with transformers 5's fused in-memory expert tensors.
struct FusedDir {
  fs::path dir = fs::temp_directory_path() / ("tern-moe-fused-" + std::to_string(::getpid()));
  FusedDir() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~FusedDir() { fs::remove_all(dir); }

  // Writes config.json and the safetensors file, the first `experts_written` experts fused.
  void write(const json& config, int experts_written = 8) {
    auto st = SafetensorsFile::open(kFixture + "/model.safetensors");
    ASSERT_TRUE(st.ok());
    json header = json::object();
    std::vector<uint8_t> data;
    auto put = [&](const std::string& name, std::vector<uint64_t> shape, const uint8_t* bytes,
                   size_t n) {
      header[name] = {
          {"dtype", "F32"}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + n}}};
      data.insert(data.end(), bytes, bytes + n);
    };
    for (const auto& t : st->tensors()) {
      if (t.name.find(".mlp.experts.") == std::string::npos)
        put(t.name, t.shape, t.data, t.size_bytes);
    }
    for (int layer : {0, 2}) {
      std::vector<uint8_t> gate_up, down;
      for (int e = 0; e < experts_written; ++e) {
        auto p = [&](const char* w) {
          return st->find(
              fmt::format("model.layers.{}.mlp.experts.{}.{}_proj.weight", layer, e, w));
        };
        for (const char* w : {"gate", "up"})
          gate_up.insert(gate_up.end(), p(w)->data, p(w)->data + p(w)->size_bytes);
        down.insert(down.end(), p("down")->data, p("down")->data + p("down")->size_bytes);
      }
      const auto n = static_cast<uint64_t>(experts_written);
      put(fmt::format("model.layers.{}.mlp.experts.gate_up_proj", layer), {n, 64, 64},
          gate_up.data(), gate_up.size());
      put(fmt::format("model.layers.{}.mlp.experts.down_proj", layer), {n, 64, 32}, down.data(),
          down.size());
    }
    std::string h = header.dump();
    std::string out(8, '\0');
    for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>(h.size() >> (8 * i));
    out += h;
    out.append(reinterpret_cast<const char*>(data.data()), data.size());
    write_text(dir / "model.safetensors", out);
    write_text(dir / "config.json", config.dump());
  }
};

TEST(HfQwen3MoeModel, FusedExpertsBecomeStackedTensors) {
  FusedDir fused;
  const json config = json::parse(read_text(kFixture + "/config.json"));
  fused.write(config);
  auto file = open_hf_model(fused.dir.string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  auto per_expert = open_hf_model(kFixture);
  ASSERT_TRUE(per_expert.ok());
  for (int layer : {0, 2}) {
    for (const auto& [which, shape] :
         {std::pair<const char*, std::vector<uint64_t>>{"gate", {64, 32, 8}},
          {"up", {64, 32, 8}},
          {"down", {32, 64, 8}}}) {
      const GgufTensor* g =
          file->find_tensor(fmt::format("blk.{}.ffn_{}_exps.weight", layer, which));
      ASSERT_NE(g, nullptr) << layer << which;
      EXPECT_EQ(g->shape, shape);
      EXPECT_EQ(g->type, TensorType::F32);
      ASSERT_EQ(g->size_bytes, 8u * 32 * 64 * 4);
      const uint64_t each = g->size_bytes / 8;
      for (int e = 0; e < 8; ++e) {
        const GgufTensor* p =
            per_expert->find_tensor(fmt::format("blk.{}.ffn_{}_exps.{}.weight", layer, which, e));
        ASSERT_NE(p, nullptr);
        ASSERT_EQ(p->size_bytes, each);
        EXPECT_EQ(std::memcmp(g->data + e * each, p->data, each), 0) << layer << which << e;
      }
    }
    EXPECT_EQ(file->find_tensor(fmt::format("blk.{}.ffn_gate_up_exps.weight", layer)), nullptr);
  }
  // The fused tensor's expert count must be config.json's.
  fused.write(config, 4);
  auto few = open_hf_model(fused.dir.string());
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.error().message.find("holds 4 experts, but config.json has 8"), std::string::npos)
      << few.error().message;
  // gate_up's rows must be 2 x moe_intermediate_size.
  json wider = config;
  wider["moe_intermediate_size"] = 16;
  fused.write(wider);
  auto bad = open_hf_model(fused.dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("expected 2 x moe_intermediate_size = 32"), std::string::npos)
      << bad.error().message;
}

TEST(HfQwen3MoeModel, AnExpertBeyondTheConfigIsAnError) {
  fs::path dir = fs::temp_directory_path() / ("tern-moe-count-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kFixture + "/model.safetensors", dir / "model.safetensors");
  json config = json::parse(read_text(kFixture + "/config.json"));
  config["num_local_experts"] = 6;
  config["num_experts_per_tok"] = 2;
  write_text(dir / "config.json", config.dump());
  auto file = open_hf_model(dir.string());
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.error().message.find("but config.json has 6 experts"), std::string::npos)
      << file.error().message;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tern

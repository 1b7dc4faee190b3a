#include "config/hf_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tern {
namespace {

using json = nlohmann::json;

// Typed reads of config.json keys with errors naming the file and key.
class Keys {
 public:
  Keys(const json& j, const std::string& label) : j_(j), label_(label) {}

  const json* find(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  Result<int64_t> integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return make_error("{}: '{}' is missing", label_, key);
    }
    return as_integer(*v, key);
  }
  Result<int64_t> positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    auto v = integer(key, fallback);
    if (v && *v <= 0) return make_error("{}: '{}' must be positive, got {}", label_, key, *v);
    return v;
  }
  Result<double> number(const char* key, std::optional<double> fallback = std::nullopt) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return make_error("{}: '{}' is missing", label_, key);
    }
    if (!v->is_number())
      return make_error("{}: '{}' must be a number, got {}", label_, key, v->dump());
    return v->get<double>();
  }
  Result<bool> boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return make_error("{}: '{}' must be true or false", label_, key);
    return v->get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    return v != nullptr && v->is_string() ? v->get<std::string>() : fallback;
  }
  Result<int64_t> as_integer(const json& v, const char* key) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    return make_error("{}: '{}' must be an integer, got {}", label_, key, v.dump());
  }
  // Keys whose non-null, non-false value would change the model in a way Tern does not run.
  Result<void> must_be_unset(const char* key, const char* why) const {
    const json* v = find(key);
    if (v == nullptr || (v->is_boolean() && !v->get<bool>())) return {};
    return make_error("{}: '{}' is {}; {}", label_, key, v->dump(), why);
  }
  const std::string& label() const { return label_; }

 private:
  const json& j_;
  const std::string& label_;
};

struct Rope {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 0;
};

// The rope settings of one layer type ("full_attention" / "sliding_attention"; empty for
// models with one rope), from rope_parameters (transformers 5) or rope_theta + rope_scaling.
Result<Rope> read_rope(const json& config, const Keys& keys, const std::string& layer_type,
                       double default_theta, const char* legacy_theta_key,
                       bool legacy_scaling_applies) {
  Rope rope;
  auto theta = keys.number(legacy_theta_key, default_theta);
  if (!theta) return theta.error();
  rope.theta = *theta;
  const json* params = nullptr;
  if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object()) {
    params = &*it;
    if (!layer_type.empty()) {
      auto nested = it->find(layer_type);
      params = nested != it->end() && nested->is_object() ? &*nested : nullptr;
    }
  } else if (legacy_scaling_applies) {
    auto scaling = config.find("rope_scaling");
    if (scaling != config.end() && scaling->is_object()) params = &*scaling;
  }
  if (params == nullptr) return rope;
  std::string where = layer_type.empty() ? std::string("rope parameters")
                                         : fmt::format("rope parameters of {}", layer_type);
  Keys p(*params, keys.label());
  rope.type = p.string_or("rope_type", p.string_or("type", "default"));
  auto t = p.number("rope_theta", rope.theta);
  if (!t) return t.error();
  rope.theta = *t;
  if (auto prf = p.number("partial_rotary_factor", 1.0); !prf || *prf != 1.0) {
    return make_error("{}: {}: partial_rotary_factor other than 1 is not supported", keys.label(),
                      where);
  }
  if (rope.type == "default") return rope;
  auto factor = p.number("factor");
  if (!factor) return factor.error();
  if (!(*factor > 0)) return make_error("{}: {}: factor must be positive", keys.label(), where);
  rope.factor = *factor;
  if (rope.type == "linear") return rope;
  if (rope.type == "llama3") {
    auto low = p.number("low_freq_factor");
    auto high = p.number("high_freq_factor");
    if (!low) return low.error();
    if (!high) return high.error();
    auto max_pos = keys.number("max_position_embeddings", 2048.0);
    if (!max_pos) return max_pos.error();
    auto orig = p.number("original_max_position_embeddings", *max_pos);
    if (!orig) return orig.error();
    if (!(*high > *low) || !(*low > 0) || !(*orig > 0)) {
      return make_error("{}: {}: llama3 scaling needs 0 < low_freq_factor < high_freq_factor",
                        keys.label(), where);
    }
    rope.low_freq_factor = *low;
    rope.high_freq_factor = *high;
    rope.original_context = *orig;
    return rope;
  }
  return make_error("{}: {}: rope_type '{}' is not supported (supported: default, linear, llama3)",
                    keys.label(), where, rope.type);
}

std::string gguf_architecture(const Keys& keys, const json& config) {
  std::string model_type = keys.string_or("model_type", "");
  if (model_type == "llama" || model_type == "qwen2" || model_type == "qwen3") return model_type;
  if (model_type == "qwen3_moe") return "qwen3moe";
  if (model_type == "gemma3_text") return "gemma3";
  if (model_type.empty()) {
    if (auto it = config.find("architectures"); it != config.end() && it->is_array()) {
      for (const auto& a : *it) {
        if (!a.is_string()) continue;
        const std::string name = a.get<std::string>();
        if (name == "LlamaForCausalLM") return "llama";
        if (name == "Qwen2ForCausalLM") return "qwen2";
        if (name == "Qwen3ForCausalLM") return "qwen3";
        if (name == "Qwen3MoeForCausalLM") return "qwen3moe";
        if (name == "Gemma3ForCausalLM") return "gemma3";
      }
    }
  }
  return {};
}

// Qwen3-MoE's experts: the counts, each expert's MLP size, and which layers stay dense
// (transformers' rule: a layer is sparse unless listed in mlp_only_layers or (l + 1) is not a
// multiple of decoder_sparse_step). Router losses and output_router_logits only matter in
// training and are ignored.
Result<void> read_experts(const Keys& keys, HfConfig& c) {
  const std::string& label = keys.label();
  const char* count_key = keys.find("num_experts") ? "num_experts" : "num_local_experts";
  auto experts = keys.positive(count_key);
  if (!experts) return experts.error();
  if (keys.find("num_experts") && keys.find("num_local_experts")) {
    auto local = keys.integer("num_local_experts");
    if (!local) return local.error();
    if (*local != *experts) {
      return make_error("{}: 'num_experts' is {} but 'num_local_experts' is {}", label, *experts,
                        *local);
    }
  }
  auto used = keys.positive("num_experts_per_tok");
  if (!used) return used.error();
  if (*used > *experts) {
    return make_error("{}: 'num_experts_per_tok' is {}, more than the {} experts", label, *used,
                      *experts);
  }
  auto ffn = keys.positive("moe_intermediate_size");
  if (!ffn) return ffn.error();
  auto norm = keys.boolean("norm_topk_prob", false);
  if (!norm) return norm.error();
  auto step = keys.positive("decoder_sparse_step", 1);
  if (!step) return step.error();
  c.experts = *experts;
  c.experts_used = *used;
  c.expert_ffn = *ffn;
  c.expert_weights_norm = *norm;
  c.dense_layers.assign(static_cast<size_t>(c.layers), false);
  for (int64_t l = 0; l < c.layers; ++l) {
    c.dense_layers[static_cast<size_t>(l)] = (l + 1) % *step != 0;
  }
  if (const json* only = keys.find("mlp_only_layers")) {
    if (!only->is_array()) {
      return make_error("{}: 'mlp_only_layers' must be a list of layer indices", label);
    }
    for (const json& v : *only) {
      auto l = keys.as_integer(v, "mlp_only_layers");
      if (!l) return l.error();
      if (*l < 0 || *l >= c.layers) {
        return make_error("{}: 'mlp_only_layers' names layer {}; the model has {}", label, *l,
                          c.layers);
      }
      c.dense_layers[static_cast<size_t>(*l)] = true;
    }
  }
  const std::string& arch = c.architecture;
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  c.metadata.add(arch + ".expert_count", u32(c.experts));
  c.metadata.add(arch + ".expert_used_count", u32(c.experts_used));
  c.metadata.add(arch + ".expert_feed_forward_length", u32(c.expert_ffn));
  c.metadata.add(arch + ".expert_weights_norm", GgufValue::boolean(c.expert_weights_norm));
  return {};
}

}  // namespace

std::vector<float> llama3_rope_divisors(int64_t head_dim, double theta, double factor,
                                        double low_freq_factor, double high_freq_factor,
                                        double original_context) {
  const double low_freq_wavelen = original_context / low_freq_factor;
  const double high_freq_wavelen = original_context / high_freq_factor;
  std::vector<float> divisors;
  for (int64_t i = 0; i < head_dim; i += 2) {
    // transformers computes the frequencies in float32.
    const auto inv_freq = static_cast<float>(
        1.0 /
        std::pow(theta, static_cast<double>(static_cast<float>(i) / static_cast<float>(head_dim))));
    const double wavelen = 2.0 * M_PI / inv_freq;
    double divisor = 1.0;
    if (wavelen > low_freq_wavelen) {
      divisor = factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth =
          (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      divisor = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    divisors.push_back(static_cast<float>(divisor));
  }
  return divisors;
}

Result<HfConfig> parse_hf_config(std::string_view json_text, const std::string& label) {
  json config = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return make_error("{}: not a JSON object", label);
  }
  Keys keys(config, label);
  HfConfig c;
  c.model_type = keys.string_or("model_type", "");
  c.architecture = gguf_architecture(keys, config);
  if (c.architecture.empty()) {
    if (config.contains("text_config")) {
      return make_error(
          "{}: model_type '{}' is a multimodal model; Tern loads text-only "
          "checkpoints (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
          "Qwen3MoeForCausalLM, Gemma3ForCausalLM)",
          label, c.model_type);
    }
    return make_error(
        "{}: model_type '{}' is not supported (supported: llama, qwen2, qwen3, "
        "qwen3_moe, gemma3_text)",
        label, c.model_type);
  }
  const std::string& arch = c.architecture;
  const bool gemma = arch == "gemma3";
  const bool moe = arch == "qwen3moe";

  auto get = [&](int64_t& out, const char* key, std::optional<int64_t> fallback = std::nullopt) {
    auto v = keys.positive(key, fallback);
    if (!v) return Result<void>(v.error());
    out = *v;
    return Result<void>();
  };
  TERN_TRY(get(c.vocab, "vocab_size"));
  TERN_TRY(get(c.hidden, "hidden_size"));
  TERN_TRY(get(c.layers, "num_hidden_layers"));
  TERN_TRY(get(c.heads, "num_attention_heads"));
  TERN_TRY(get(c.kv_heads, "num_key_value_heads", c.heads));
  TERN_TRY(get(c.ffn, "intermediate_size"));
  TERN_TRY(get(c.context_length, "max_position_embeddings", 2048));
  const int64_t default_head_dim =
      gemma ? 256 : (arch == "qwen3" || moe ? 128 : c.hidden / c.heads);
  TERN_TRY(get(c.head_dim, "head_dim", default_head_dim));
  if (c.heads % c.kv_heads != 0) {
    return make_error("{}: {} attention heads cannot be grouped over {} key/value heads", label,
                      c.heads, c.kv_heads);
  }
  auto eps = keys.number("rms_norm_eps", 1e-6);
  if (!eps) return eps.error();
  c.norm_eps = *eps;
  auto tied = keys.boolean("tie_word_embeddings", gemma);
  if (!tied) return tied.error();
  c.tied_embeddings = *tied;
  c.dtype = keys.string_or("torch_dtype", keys.string_or("dtype", ""));
  if (const json* bos = keys.find("bos_token_id"); bos && bos->is_number_integer()) {
    c.bos_id = bos->get<int64_t>();
  }
  if (const json* eos = keys.find("eos_token_id")) {
    if (eos->is_number_integer()) c.eos_ids.push_back(eos->get<int64_t>());
    if (eos->is_array()) {
      for (const auto& e : *eos) {
        if (e.is_number_integer()) c.eos_ids.push_back(e.get<int64_t>());
      }
    }
  }

  // What Tern's implementation of each architecture does not run.
  const std::string act = keys.string_or(gemma ? "hidden_activation" : "hidden_act",
                                         gemma ? "gelu_pytorch_tanh" : "silu");
  if (act != (gemma ? "gelu_pytorch_tanh" : "silu")) {
    return make_error("{}: activation '{}' is not supported for {} (expected {})", label, act, arch,
                      gemma ? "gelu_pytorch_tanh" : "silu");
  }
  TERN_TRY(keys.must_be_unset("mlp_bias", "MLP biases are not supported"));
  if (arch != "qwen2") {
    TERN_TRY(keys.must_be_unset("attention_bias", "attention biases are not supported"));
  }
  if (arch == "qwen2" || arch == "qwen3" || moe) {
    TERN_TRY(keys.must_be_unset("use_sliding_window", "sliding-window Qwen is not supported"));
  }
  if (gemma) {
    TERN_TRY(keys.must_be_unset("final_logit_softcapping", "logit soft-capping is not supported"));
    TERN_TRY(keys.must_be_unset("attn_logit_softcapping", "logit soft-capping is not supported"));
    TERN_TRY(keys.must_be_unset("use_bidirectional_attention",
                                "bidirectional attention is not supported"));
  }

  GgufMetadata& md = c.metadata;
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  md.add("general.architecture", GgufValue::string(arch));
  md.add(key("vocab_size"), u32(c.vocab));
  md.add(key("context_length"), u32(c.context_length));
  md.add(key("embedding_length"), u32(c.hidden));
  md.add(key("block_count"), u32(c.layers));
  md.add(key("feed_forward_length"), u32(c.ffn));
  md.add(key("attention.head_count"), u32(c.heads));
  md.add(key("attention.head_count_kv"), u32(c.kv_heads));
  md.add(key("attention.key_length"), u32(c.head_dim));
  md.add(key("attention.value_length"), u32(c.head_dim));
  md.add(key("attention.layer_norm_rms_epsilon"), GgufValue::f32(static_cast<float>(c.norm_eps)));
  md.add(key("rope.dimension_count"), u32(c.head_dim));
  if (moe) TERN_TRY(read_experts(keys, c));

  auto add_rope = [&](const Rope& rope, const char* base_key) -> Result<void> {
    md.add(key(base_key), GgufValue::f32(static_cast<float>(rope.theta)));
    if (rope.type == "linear") {
      md.add(key("rope.scaling.type"), GgufValue::string("linear"));
      md.add(key("rope.scaling.factor"), GgufValue::f32(static_cast<float>(rope.factor)));
    } else if (rope.type == "llama3") {
      if (arch != "llama") {
        return make_error("{}: llama3 rope scaling is only supported for llama", label);
      }
      c.rope_freqs = llama3_rope_divisors(c.head_dim, rope.theta, rope.factor, rope.low_freq_factor,
                                          rope.high_freq_factor, rope.original_context);
    }
    return {};
  };

  if (!gemma) {
    auto rope = read_rope(config, keys, "", 10000.0, "rope_theta", true);
    if (!rope) return rope.error();
    TERN_TRY(add_rope(*rope, "rope.freq_base"));
    c.permute_qk = arch == "llama";
    return c;
  }

  // Gemma 3: sliding-window layers with their own rope, every Nth layer global.
  c.norm_plus_one = true;
  auto global = read_rope(config, keys, "full_attention", 1000000.0, "rope_theta", true);
  if (!global) return global.error();
  auto local = read_rope(config, keys, "sliding_attention", 10000.0, "rope_local_base_freq", false);
  if (!local) return local.error();
  if (local->type != "default") {
    return make_error("{}: rope scaling on sliding-window layers is not supported", label);
  }
  TERN_TRY(add_rope(*global, "rope.freq_base"));
  md.add(key("rope.freq_base_swa"), GgufValue::f32(static_cast<float>(local->theta)));

  std::vector<bool> sliding(static_cast<size_t>(c.layers));
  if (const json* types = keys.find("layer_types")) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.layers)) {
      return make_error("{}: 'layer_types' must list {} layer types", label, c.layers);
    }
    for (size_t l = 0; l < sliding.size(); ++l) {
      const json& t = (*types)[l];
      if (t == "sliding_attention") {
        sliding[l] = true;
      } else if (t != "full_attention") {
        return make_error(
            "{}: layer_types[{}] is {}; expected sliding_attention or "
            "full_attention",
            label, l, t.dump());
      }
    }
  } else {
    auto pattern = keys.positive("sliding_window_pattern", std::nullopt);
    if (!pattern) pattern = keys.positive("_sliding_window_pattern", 6);
    if (!pattern) return pattern.error();
    for (size_t l = 0; l < sliding.size(); ++l) {
      sliding[l] = (static_cast<int64_t>(l) + 1) % *pattern != 0;
    }
  }
  // Tern's gemma3 makes layer l global when (l + 1) % pattern == 0: find that pattern.
  int64_t pattern = 0;
  bool any_sliding = false;
  for (size_t l = 0; l < sliding.size(); ++l) {
    any_sliding = any_sliding || sliding[l];
    if (!sliding[l] && pattern == 0) pattern = static_cast<int64_t>(l) + 1;
  }
  if (pattern == 0) pattern = c.layers + 1;  // no global layer at all
  for (size_t l = 0; l < sliding.size(); ++l) {
    if (sliding[l] != ((static_cast<int64_t>(l) + 1) % pattern != 0) && any_sliding) {
      return make_error("{}: layer_types do not follow one global layer every N layers", label);
    }
  }
  if (any_sliding) {
    auto window = keys.positive("sliding_window");
    if (!window) return window.error();
    md.add(key("attention.sliding_window"), u32(*window));
    md.add(key("attention.sliding_window_pattern"), u32(pattern));
  }
  auto scalar = keys.number("query_pre_attn_scalar", 256.0);
  if (!scalar) return scalar.error();
  if (!(*scalar > 0)) return make_error("{}: 'query_pre_attn_scalar' must be positive", label);
  // Tern's gemma3 scales queries by 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for 62 layers.
  const double tern_rule =
      c.layers == 62 ? static_cast<double>(c.hidden / c.heads) : static_cast<double>(c.head_dim);
  if (*scalar != tern_rule) {
    md.add(key("attention.query_pre_attn_scalar"), GgufValue::f32(static_cast<float>(*scalar)));
  }
  return c;
}

Result<HfConfig> read_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("{}: cannot open", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error("{}: read failed", path);
  return parse_hf_config(text.str(), path);
}

}  // namespace tern

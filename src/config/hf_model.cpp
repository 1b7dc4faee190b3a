#include "config/hf_model.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/fp16.h"
#include "io/safetensors.h"

namespace tern {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("{}: cannot open", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error("{}: read failed", path);
  return text.str();
}

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The safetensors files of the model: the shards named by the index, or model.safetensors.
Result<std::vector<std::string>> shard_files(const std::string& dir,
                                             std::map<std::string, std::string>& weight_map) {
  const std::string index_path = join(dir, "model.safetensors.index.json");
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    auto text = read_text(index_path);
    if (!text) return text.error();
    json index = json::parse(*text, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return make_error("{}: not a safetensors index (no weight_map object)", index_path);
    }
    std::set<std::string> files;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return make_error("{}: weight_map entry '{}' is not a file name", index_path, it.key());
      }
      std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        return make_error(
            "{}: weight_map names '{}' for '{}'; shards must be plain file names in "
            "the directory",
            index_path, file, it.key());
      }
      weight_map[it.key()] = file;
      files.insert(file);
    }
    if (files.empty()) return make_error("{}: weight_map is empty", index_path);
    return std::vector<std::string>(files.begin(), files.end());
  }
  if (fs::exists(join(dir, "model.safetensors"), ec)) {
    return std::vector<std::string>{"model.safetensors"};
  }
  return make_error("{}: no model.safetensors or model.safetensors.index.json", dir);
}

enum class Role { Plain, Norm, PermuteQ, PermuteK };

Role role_of(const std::string& gguf_name) {
  auto is = [&](std::string_view s) { return ends_with(gguf_name, s); };
  if (is("_norm.weight") || is("post_ffw_norm.weight")) return Role::Norm;
  if (is("attn_q.weight") || is("attn_q.bias")) return Role::PermuteQ;
  if (is("attn_k.weight") || is("attn_k.bias")) return Role::PermuteK;
  return Role::Plain;
}

float element_to_float(TensorType type, const uint8_t* p) {
  switch (type) {
    case TensorType::F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return fp16_to_float(h);
    }
    case TensorType::BF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return bf16_to_float(b);
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

// Sort key: embeddings, rope factors, layers in order, then the output head (as GGUF files list
// them); a layer's per-expert tensors in expert order.
std::tuple<int, int64_t, std::string, int64_t> order_key(const std::string& name) {
  if (name.rfind("token_embd.", 0) == 0) return {0, 0, name, 0};
  if (name.rfind("rope_freqs.", 0) == 0) return {1, 0, name, 0};
  if (name.rfind("blk.", 0) == 0) {
    int64_t layer = 0;
    std::from_chars(name.data() + 4, name.data() + name.size(), layer);
    if (auto expert = split_expert_tensor_name(name)) {
      return {2, layer, expert->stacked, expert->expert};
    }
    return {2, layer, name, 0};
  }
  return {3, 0, name, 0};
}

// Qwen3-MoE tensors of one layer's mlp (the part after "model.layers.L."), or "" if not one.
std::string moe_tensor_name(std::string_view suffix) {
  if (suffix == "mlp.gate.weight") return "ffn_gate_inp.weight";
  if (suffix == "mlp.experts.gate_up_proj") return "ffn_gate_up_exps.weight";
  if (suffix == "mlp.experts.down_proj") return "ffn_down_exps.weight";
  static constexpr std::string_view kExperts = "mlp.experts.";
  if (suffix.substr(0, kExperts.size()) != kExperts) return {};
  suffix.remove_prefix(kExperts.size());
  uint64_t expert = 0;
  auto [next, ec] = std::from_chars(suffix.data(), suffix.data() + suffix.size(), expert);
  if (ec != std::errc() || next == suffix.data() || next == suffix.data() + suffix.size() ||
      *next != '.') {
    return {};
  }
  const std::string_view proj(next + 1,
                              static_cast<size_t>(suffix.data() + suffix.size() - next - 1));
  for (const char* which : {"gate", "up", "down"}) {
    if (proj == fmt::format("{}_proj.weight", which)) {
      return fmt::format("ffn_{}_exps.{}.weight", which, expert);
    }
  }
  return {};
}

}  // namespace

std::optional<ExpertTensorName> split_expert_tensor_name(std::string_view name) {
  // blk.L.ffn_X_exps.E.weight
  if (name.substr(0, 4) != "blk." || !ends_with(name, ".weight")) return std::nullopt;
  const std::string_view body = name.substr(0, name.size() - 7);  // blk.L.ffn_X_exps.E
  const size_t dot = body.rfind('.');
  if (dot == std::string_view::npos || dot + 1 == body.size()) return std::nullopt;
  const std::string_view index = body.substr(dot + 1);
  int64_t expert = 0;
  auto [next, ec] = std::from_chars(index.data(), index.data() + index.size(), expert);
  if (ec != std::errc() || next != index.data() + index.size() || expert < 0) return std::nullopt;
  const std::string_view base = body.substr(0, dot);  // blk.L.ffn_X_exps
  if (!ends_with(base, "_exps")) return std::nullopt;
  return ExpertTensorName{std::string(base) + ".weight", expert};
}

std::optional<std::string> hf_to_gguf_tensor_name(const std::string& hf_name,
                                                  const std::string& architecture) {
  static const std::map<std::string, std::string, std::less<>> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  if (auto it = kTop.find(hf_name); it != kTop.end()) return it->second;
  if (hf_name == "model.rotary_emb.inv_freq") return std::string();
  static const std::string kLayers = "model.layers.";
  if (hf_name.rfind(kLayers, 0) != 0) return std::nullopt;
  const char* begin = hf_name.data() + kLayers.size();
  const char* end = hf_name.data() + hf_name.size();
  uint64_t layer = 0;
  auto [next, ec] = std::from_chars(begin, end, layer);
  if (ec != std::errc() || next == begin || next == end || *next != '.') return std::nullopt;
  std::string_view suffix(next + 1, static_cast<size_t>(end - next - 1));
  const bool gemma = architecture == "gemma3";
  static const std::map<std::string, std::string, std::less<>> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  std::string mapped;
  if (auto it = kLayer.find(suffix); it != kLayer.end()) {
    mapped = it->second;
  } else if (suffix == "post_attention_layernorm.weight") {
    mapped = gemma ? "post_attention_norm.weight" : "ffn_norm.weight";
  } else if (gemma && suffix == "pre_feedforward_layernorm.weight") {
    mapped = "ffn_norm.weight";
  } else if (gemma && suffix == "post_feedforward_layernorm.weight") {
    mapped = "post_ffw_norm.weight";
  } else if (suffix == "self_attn.rotary_emb.inv_freq") {
    return std::string();
  } else if (std::string moe = architecture == "qwen3moe" ? moe_tensor_name(suffix) : "";
             !moe.empty()) {
    mapped = std::move(moe);
  } else {
    return std::nullopt;
  }
  return fmt::format("blk.{}.{}", layer, mapped);
}

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(join(path, "config.json"), ec);
}

std::optional<std::string> hf_tokenizer_json_path(const std::string& dir) {
  std::error_code ec;
  std::string path = join(dir, "tokenizer.json");
  if (fs::exists(path, ec)) return path;
  return std::nullopt;
}

Result<std::string> read_hf_chat_template(const std::string& dir) {
  std::error_code ec;
  const std::string jinja = join(dir, "chat_template.jinja");
  if (fs::exists(jinja, ec)) return read_text(jinja);
  const std::string config_path = join(dir, "tokenizer_config.json");
  if (!fs::exists(config_path, ec)) return std::string();
  auto text = read_text(config_path);
  if (!text) return text.error();
  json config = json::parse(*text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return make_error("{}: not a JSON object", config_path);
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return make_error("{}: chat_template lists no template named \"default\"", config_path);
  }
  return make_error("{}: chat_template must be a string or a list of named templates", config_path);
}

Result<GgufFile> open_hf_model(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return make_error("{}: not a directory", dir);
  auto config = read_hf_config(join(dir, "config.json"));
  if (!config) return config.error();
  const HfConfig& c = *config;

  std::map<std::string, std::string> weight_map;
  auto files = shard_files(dir, weight_map);
  if (!files) return files.error();

  std::vector<std::string> paths;
  std::vector<std::shared_ptr<MappedFile>> maps;
  std::vector<std::vector<uint8_t>> owned;
  std::vector<GgufTensor> tensors;
  std::set<std::string> seen_hf, seen_gguf;
  bool has_lm_head = false;

  for (size_t fi = 0; fi < files->size(); ++fi) {
    const std::string path = join(dir, (*files)[fi]);
    auto st = SafetensorsFile::open(path);
    if (!st) return st.error();
    for (const SafetensorsTensor& t : st->tensors()) {
      if (!seen_hf.insert(t.name).second) {
        return make_error("{}: tensor '{}' also appears in an earlier shard", path, t.name);
      }
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it != weight_map.end() && it->second != (*files)[fi]) {
          return make_error("{}: tensor '{}' is listed in the index under {}", path, t.name,
                            it->second);
        }
      }
      auto gguf_name = hf_to_gguf_tensor_name(t.name, c.architecture);
      if (!gguf_name) {
        return make_error("{}: tensor '{}' is not part of a {} model Tern knows", path, t.name,
                          c.architecture);
      }
      if (gguf_name->empty()) continue;  // rotary inv_freq buffer: recomputed from the config
      if (*gguf_name == "output.weight") {
        has_lm_head = true;
        if (c.tied_embeddings) continue;
      }
      auto type = safetensors_gguf_type(t.dtype);
      if (!type) {
        return make_error("{}: tensor '{}' has dtype {}; Tern loads F32, F16 and BF16 weights",
                          path, t.name, t.dtype);
      }
      // Qwen3-MoE experts: one 2-D tensor each (the hub), or all of a layer's in one 3-D tensor
      // (transformers 5's fused layout).
      const bool stacked = ends_with(*gguf_name, "_exps.weight");
      if (stacked ? t.shape.size() != 3 : (t.shape.empty() || t.shape.size() > 2)) {
        return make_error("{}: tensor '{}' has {} dimensions; expected {}", path, t.name,
                          t.shape.size(), stacked ? "3 (experts, rows, columns)" : "1 or 2");
      }
      if (auto expert = split_expert_tensor_name(*gguf_name);
          expert && expert->expert >= c.experts) {
        return make_error("{}: tensor '{}' is expert {}, but config.json has {} experts", path,
                          t.name, expert->expert, c.experts);
      }
      if (stacked && t.shape[0] != static_cast<uint64_t>(c.experts)) {
        return make_error("{}: tensor '{}' holds {} experts, but config.json has {}", path, t.name,
                          t.shape[0], c.experts);
      }
      GgufTensor g;
      g.name = *gguf_name;
      g.shape.assign(t.shape.rbegin(), t.shape.rend());
      g.type = *type;
      g.offset = t.offset;
      g.size_bytes = t.size_bytes;
      g.split_index = static_cast<uint32_t>(fi);
      g.data = t.data;
      auto add = [&](GgufTensor&& tensor) -> Result<void> {
        if (!seen_gguf.insert(tensor.name).second) {
          return make_error("{}: two tensors map to '{}'", path, tensor.name);
        }
        tensors.push_back(std::move(tensor));
        return {};
      };

      if (ends_with(g.name, "ffn_gate_up_exps.weight")) {
        // [E, 2 ff, hidden]: expert e's rows 0..ff-1 are its gate, ff..2ff-1 its up. GGUF keeps
        // gate and up apart, each [E, ff, hidden] (ne = {hidden, ff, E}), so both are rebuilt.
        const uint64_t experts = t.shape[0], ff = static_cast<uint64_t>(c.expert_ffn);
        if (t.shape[1] != 2 * ff) {
          return make_error(
              "{}: tensor '{}' has {} rows per expert; expected 2 x moe_intermediate_size = {}",
              path, t.name, t.shape[1], 2 * ff);
        }
        const uint64_t row_bytes = t.shape[2] * t.element_size;
        const std::string prefix = g.name.substr(0, g.name.size() - strlen("gate_up_exps.weight"));
        for (uint64_t half = 0; half < 2; ++half) {
          std::vector<uint8_t> buffer(experts * ff * row_bytes);
          for (uint64_t e = 0; e < experts; ++e) {
            std::memcpy(buffer.data() + e * ff * row_bytes,
                        t.data + (e * 2 * ff + half * ff) * row_bytes, ff * row_bytes);
          }
          GgufTensor part = g;
          part.name = prefix + (half == 0 ? "gate" : "up") + "_exps.weight";
          part.shape = {t.shape[2], ff, experts};
          part.size_bytes = buffer.size();
          part.data = buffer.data();
          part.offset = 0;
          owned.push_back(std::move(buffer));
          TERN_TRY(add(std::move(part)));
        }
        continue;
      }

      const Role role = role_of(g.name);
      if (role == Role::Norm && c.norm_plus_one) {
        // Gemma's RMSNorm multiplies by (1 + w); GGUF stores the sum, in F32.
        const uint64_t n = t.elements();
        std::vector<uint8_t> buffer(n * sizeof(float));
        for (uint64_t i = 0; i < n; ++i) {
          float v = element_to_float(*type, t.data + i * t.element_size) + 1.0f;
          std::memcpy(buffer.data() + i * sizeof(float), &v, sizeof(float));
        }
        g.type = TensorType::F32;
        g.size_bytes = buffer.size();
        g.data = buffer.data();
        g.offset = 0;
        owned.push_back(std::move(buffer));
      } else if ((role == Role::PermuteQ || role == Role::PermuteK) && c.permute_qk) {
        // Rows of each head reordered from rotate-half (x0..x(d/2-1), y0..) to interleaved pairs
        // (x0, y0, x1, y1, ...): out row h*d + 2j + i = in row h*d + i*d/2 + j.
        const int64_t heads = role == Role::PermuteQ ? c.heads : c.kv_heads;
        const uint64_t rows = t.shape[0];
        const uint64_t row_bytes = t.size_bytes / std::max<uint64_t>(rows, 1);
        if (rows != static_cast<uint64_t>(heads * c.head_dim) || c.head_dim % 2 != 0) {
          return make_error("{}: tensor '{}' has {} rows; expected {} heads x {}", path, t.name,
                            rows, heads, c.head_dim);
        }
        const uint64_t d = static_cast<uint64_t>(c.head_dim), half = d / 2;
        std::vector<uint8_t> buffer(t.size_bytes);
        for (uint64_t h = 0; h < static_cast<uint64_t>(heads); ++h) {
          for (uint64_t j = 0; j < half; ++j) {
            for (uint64_t i = 0; i < 2; ++i) {
              std::memcpy(buffer.data() + (h * d + 2 * j + i) * row_bytes,
                          t.data + (h * d + i * half + j) * row_bytes, row_bytes);
            }
          }
        }
        g.data = buffer.data();
        g.offset = 0;
        owned.push_back(std::move(buffer));
      }
      TERN_TRY(add(std::move(g)));
    }
    paths.push_back(path);
    maps.push_back(st->mapping());
  }
  for (const auto& [name, file] : weight_map) {
    if (!seen_hf.count(name)) {
      return make_error("{}: the index lists tensor '{}' but {} does not hold it",
                        join(dir, "model.safetensors.index.json"), name, file);
    }
  }
  if (!c.tied_embeddings && !has_lm_head) {
    return make_error(
        "{}: config.json says the embeddings are not tied, but lm_head.weight is "
        "missing",
        dir);
  }
  if (!c.rope_freqs.empty()) {
    std::vector<uint8_t> buffer(c.rope_freqs.size() * sizeof(float));
    std::memcpy(buffer.data(), c.rope_freqs.data(), buffer.size());
    GgufTensor g;
    g.name = "rope_freqs.weight";
    g.shape = {c.rope_freqs.size()};
    g.type = TensorType::F32;
    g.size_bytes = buffer.size();
    g.data = buffer.data();
    owned.push_back(std::move(buffer));
    tensors.push_back(std::move(g));
  }
  std::stable_sort(tensors.begin(), tensors.end(), [](const GgufTensor& a, const GgufTensor& b) {
    return order_key(a.name) < order_key(b.name);
  });

  GgufMetadata metadata = c.metadata;
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
  metadata.add("general.name", GgufValue::string(name));
  auto chat_template = read_hf_chat_template(dir);
  if (!chat_template) return chat_template.error();
  if (!chat_template->empty()) {
    metadata.add("tokenizer.chat_template", GgufValue::string(std::move(*chat_template)));
  }
  return GgufFile::from_parts(3, std::move(metadata), std::move(tensors), std::move(paths),
                              std::move(maps), std::move(owned));
}

}  // namespace tern

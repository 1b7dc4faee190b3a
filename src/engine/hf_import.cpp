#include "engine/hf_import.h"

#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "backend/cpu/quant.h"
#include "config/hf_model.h"
#include "config/tokenizer_spec.h"
#include "io/gguf_file.h"
#include "text/pretokenizer.h"

namespace tern {
namespace {

bool importable(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_K:
    case TensorType::Q6_K:
      return true;
    default:
      return false;
  }
}

using json = nlohmann::json;

Result<json> read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("{}: cannot open", path);
  std::ostringstream text;
  text << in.rdbuf();
  json doc = json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error("{}: not a JSON object", path);
  return doc;
}

std::string string_or(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// The GGUF pre-tokenizer name of a byte-level pre_tokenizer, or an error showing it.
Result<std::string> pre_tokenizer_name(const json& pre, const std::string& path) {
  const std::string type = string_or(pre, "type", "");
  if (type == "ByteLevel" && pre.value("use_regex", true)) return std::string("gpt2");
  if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2) {
    const json& a = pre["pretokenizers"][0];
    const json& b = pre["pretokenizers"][1];
    const std::string b_type = string_or(b, "type", "");
    if (string_or(a, "type", "") == "Digits" && a.value("individual_digits", false) &&
        b_type == "ByteLevel" && b.value("use_regex", true)) {
      return std::string("smollm");
    }
    if (string_or(a, "type", "") == "Split" && a.contains("pattern") && a["pattern"].is_object() &&
        b_type == "ByteLevel" && !b.value("use_regex", true)) {
      const std::string regex = string_or(a["pattern"], "Regex", "");
      if (regex == text::patterns::kLlama3) return std::string("llama-bpe");
      if (regex == text::patterns::kQwen2) return std::string("qwen2");
      if (regex == text::patterns::kQwen35) return std::string("qwen35");
    }
  }
  std::string shown = pre.dump();
  if (shown.size() > 300) shown = shown.substr(0, 300) + "...";
  return make_error(
      "{}: pre_tokenizer {} matches none of the byte-level families Tern converts "
      "(gpt2, smollm, llama-bpe, qwen2, qwen35)",
      path, shown);
}

// Converts `src`'s rows into `out` (all of them, rows() of them, `target` bytes each).
Result<void> convert_rows(const GgufTensor& src, TensorType target, std::span<uint8_t> out) {
  const int64_t cols = static_cast<int64_t>(src.shape[0]);
  const uint64_t rows = src.rows();
  const uint64_t src_row_bytes = src.size_bytes / std::max<uint64_t>(rows, 1);
  const uint64_t out_row_bytes = out.size() / std::max<uint64_t>(rows, 1);
  std::vector<float> row(static_cast<size_t>(cols));
  for (uint64_t r = 0; r < rows; ++r) {
    cpu::dequantize_row(src.type, src.data + r * src_row_bytes, row.data(), cols);
    size_t n = cpu::quantize_row(target, row.data(), out.data() + r * out_row_bytes, cols);
    if (n != out_row_bytes) {
      return make_error("tensor '{}': quantizing a row to {} gave {} bytes, expected {}", src.name,
                        tensor_type_name(target), n, out_row_bytes);
    }
  }
  return {};
}

// The type a tensor is written as.
TensorType target_type(const GgufTensor& t, std::optional<TensorType> quant) {
  if (t.shape.size() == 1) return TensorType::F32;
  if (!quant) return t.type;
  if (t.shape[0] % tensor_type_info(*quant).block_elements != 0) return TensorType::F16;
  return *quant;
}

// One tensor to write: a tensor of the model, or (Qwen3-MoE) a layer's per-expert 2-D tensors
// stacked into GGUF's 3-D blk.L.ffn_X_exps.weight, expert 0 first.
struct Output {
  std::string name;
  std::vector<const GgufTensor*> parts;
};

// The model's tensors in order, each group of per-expert tensors replaced by one stacked tensor
// where its first expert was; an error if an expert is missing or the experts' shapes differ.
Result<std::vector<Output>> plan_outputs(const GgufFile& model) {
  std::vector<Output> outputs;
  std::map<std::string, size_t> stacked;  // stacked name -> index in outputs
  std::map<std::string, std::map<int64_t, const GgufTensor*>> experts;
  for (const GgufTensor& t : model.tensors()) {
    auto expert = split_expert_tensor_name(t.name);
    if (!expert) {
      outputs.push_back({t.name, {&t}});
      continue;
    }
    if (stacked.emplace(expert->stacked, outputs.size()).second) {
      outputs.push_back({expert->stacked, {}});
    }
    experts[expert->stacked][expert->expert] = &t;
  }
  std::optional<uint64_t> expert_count;
  if (const GgufValue* arch = model.metadata().find("general.architecture")) {
    if (const GgufValue* n = model.metadata().find(*arch->as_string() + ".expert_count")) {
      expert_count = n->as_uint();
    }
  }
  for (auto& [name, by_index] : experts) {
    if (model.find_tensor(name) != nullptr) {
      return make_error("'{}' is both a stacked tensor and split per expert ('{}')", name,
                        by_index.begin()->second->name);
    }
    const uint64_t n = expert_count.value_or(static_cast<uint64_t>(by_index.rbegin()->first) + 1);
    std::vector<const GgufTensor*>& parts = outputs[stacked[name]].parts;
    for (uint64_t e = 0; e < n; ++e) {
      auto it = by_index.find(static_cast<int64_t>(e));
      if (it == by_index.end()) {
        return make_error("'{}': expert {} of {} is missing", name, e, n);
      }
      const GgufTensor& first = *by_index.begin()->second;
      if (it->second->shape != first.shape || it->second->type != first.type) {
        return make_error("'{}': expert {} is {} {}, but expert {} is {} {}", name, e,
                          tensor_type_name(it->second->type), fmt::join(it->second->shape, "x"),
                          by_index.begin()->first, tensor_type_name(first.type),
                          fmt::join(first.shape, "x"));
      }
      parts.push_back(it->second);
    }
    if (by_index.size() != n) {
      return make_error("'{}': expert {} is beyond the model's {} experts", name,
                        by_index.rbegin()->first, n);
    }
    if (parts.front()->shape.size() != 2) {
      return make_error("'{}': each expert must be a matrix, got {} dimensions", name,
                        parts.front()->shape.size());
    }
  }
  return outputs;
}

}  // namespace

Result<void> add_hf_tokenizer(GgufWriter& writer, const std::string& dir, uint64_t vocab_size) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  auto doc = read_json(path);
  if (!doc) return doc.error();
  const json& model = (*doc)["model"];
  if (!model.is_object() || string_or(model, "type", "") != "BPE" ||
      model.value("byte_fallback", false) || !model.contains("vocab") ||
      !model["vocab"].is_object()) {
    return make_error(
        "{}: only byte-level BPE tokenizers are converted (this one has model type "
        "'{}'{}); convert without the tokenizer and load tokenizer.json instead",
        path, model.is_object() ? string_or(model, "type", "?") : "?",
        model.is_object() && model.value("byte_fallback", false)
            ? ", byte_fallback: SentencePiece-style"
            : "");
  }
  auto pre = pre_tokenizer_name(doc->value("pre_tokenizer", json()), path);
  if (!pre) return pre.error();

  std::map<std::string, int64_t> ids;
  std::map<int64_t, std::pair<std::string, TokenKind>> by_id;
  int64_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0) {
      return make_error("{}: vocab entry '{}' has no valid id", path, it.key());
    }
    const int64_t id = it.value().get<int64_t>();
    by_id[id] = {it.key(), TokenKind::Normal};
    ids[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  if (auto added = doc->find("added_tokens"); added != doc->end() && added->is_array()) {
    for (const auto& a : *added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string()) {
        return make_error("{}: an added_tokens entry lacks id or content", path);
      }
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0) return make_error("{}: added token with id {}", path, id);
      const std::string content = a["content"].get<std::string>();
      by_id[id] = {content,
                   a.value("special", false) ? TokenKind::Control : TokenKind::UserDefined};
      ids[content] = id;
      max_id = std::max(max_id, id);
    }
  }
  const uint64_t n = std::max<uint64_t>(static_cast<uint64_t>(max_id + 1), vocab_size);
  if (n > 10'000'000) return make_error("{}: token id {} is implausibly large", path, max_id);
  std::vector<GgufValue> tokens, kinds;
  tokens.reserve(n);
  kinds.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    auto it = by_id.find(static_cast<int64_t>(i));
    if (it == by_id.end()) {
      tokens.push_back(GgufValue::string(fmt::format("[PAD{}]", i)));
      kinds.push_back(GgufValue::i32(static_cast<int32_t>(TokenKind::Unused)));
    } else {
      tokens.push_back(GgufValue::string(it->second.first));
      kinds.push_back(GgufValue::i32(static_cast<int32_t>(it->second.second)));
    }
  }
  std::vector<GgufValue> merges;
  if (auto m = model.find("merges"); m != model.end() && m->is_array()) {
    merges.reserve(m->size());
    for (const auto& merge : *m) {
      if (merge.is_string()) {
        merges.push_back(GgufValue::string(merge.get<std::string>()));
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        merges.push_back(
            GgufValue::string(merge[0].get<std::string>() + " " + merge[1].get<std::string>()));
      } else {
        return make_error("{}: a merge is neither \"a b\" nor [a, b]", path);
      }
    }
  }
  writer.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  writer.set("tokenizer.ggml.pre", GgufValue::string(*pre));
  writer.set("tokenizer.ggml.tokens", GgufValue::array(GgufValueType::String, std::move(tokens)));
  writer.set("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::Int32, std::move(kinds)));
  writer.set("tokenizer.ggml.merges", GgufValue::array(GgufValueType::String, std::move(merges)));

  // Special tokens: tokenizer_config.json names them; config.json's ids are the fallback.
  json tcfg = json::object(), mcfg = json::object();
  if (fs::exists(fs::path(dir) / "tokenizer_config.json")) {
    auto t = read_json((fs::path(dir) / "tokenizer_config.json").string());
    if (!t) return t.error();
    tcfg = std::move(*t);
  }
  if (auto m = read_json((fs::path(dir) / "config.json").string())) mcfg = std::move(*m);
  auto token_id = [&](const char* name_key, const char* id_key) -> std::optional<int64_t> {
    if (auto it = tcfg.find(name_key); it != tcfg.end()) {
      std::string name = it->is_string() ? it->get<std::string>()
                                         : (it->is_object() ? string_or(*it, "content", "") : "");
      if (auto id = ids.find(name); !name.empty() && id != ids.end()) return id->second;
    }
    if (auto it = mcfg.find(id_key); it != mcfg.end() && it->is_number_integer()) {
      return it->get<int64_t>();
    }
    if (auto it = mcfg.find(id_key);
        it != mcfg.end() && it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
      return (*it)[0].get<int64_t>();
    }
    return std::nullopt;
  };
  auto set_id = [&](const char* key, std::optional<int64_t> id) {
    if (id && *id >= 0 && static_cast<uint64_t>(*id) < n) {
      writer.set(key, GgufValue::u32(static_cast<uint32_t>(*id)));
    }
  };
  auto bos = token_id("bos_token", "bos_token_id");
  set_id("tokenizer.ggml.bos_token_id", bos);
  set_id("tokenizer.ggml.eos_token_id", token_id("eos_token", "eos_token_id"));
  set_id("tokenizer.ggml.padding_token_id", token_id("pad_token", "pad_token_id"));
  // add_bos: tokenizer_config.json says, else the post-processor adds a token before $A.
  bool add_bos = false, add_eos = false;
  std::function<void(const json&)> scan = [&](const json& pp) {
    if (!pp.is_object()) return;
    if (string_or(pp, "type", "") == "Sequence" && pp.contains("processors")) {
      for (const auto& q : pp["processors"]) scan(q);
      return;
    }
    if (string_or(pp, "type", "") != "TemplateProcessing" || !pp.contains("single")) return;
    bool seen_sequence = false;
    for (const auto& item : pp["single"]) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        (seen_sequence ? add_eos : add_bos) = true;
      }
    }
  };
  scan(doc->value("post_processor", json()));
  if (auto it = tcfg.find("add_bos_token"); it != tcfg.end() && it->is_boolean()) {
    add_bos = it->get<bool>();
  }
  if (auto it = tcfg.find("add_eos_token"); it != tcfg.end() && it->is_boolean()) {
    add_eos = it->get<bool>();
  }
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(add_bos));
  writer.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(add_eos));
  return {};
}

Result<void> write_gguf_from_hf(const std::string& dir, const std::string& out_path,
                                std::optional<TensorType> quant,
                                const GgufWriter::Progress& progress, bool tokenizer) {
  if (quant && (!importable(*quant) || !cpu::can_quantize(*quant))) {
    return make_error("cannot convert to {}: choose F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K",
                      tensor_type_name(*quant));
  }
  auto opened = open_hf_model(dir);
  if (!opened) return opened.error();
  // The writer fills tensors from the model's mappings at write time; keep them alive until then.
  auto model = std::make_shared<GgufFile>(std::move(*opened));
  GgufWriter writer;
  for (const auto& [key, value] : model->metadata().entries()) writer.set(key, value);
  if (tokenizer && hf_tokenizer_json_path(dir)) {
    const GgufValue* arch = model->metadata().find("general.architecture");
    const GgufValue* vocab = model->metadata().find(*arch->as_string() + ".vocab_size");
    TERN_TRY(add_hf_tokenizer(writer, dir, vocab ? vocab->as_uint().value_or(0) : 0));
  }

  auto outputs = plan_outputs(*model);
  if (!outputs) return outputs.error();
  for (Output& o : *outputs) {
    const GgufTensor& t = *o.parts.front();
    const TensorType target = target_type(t, quant);
    if (o.parts.size() == 1 && o.name == t.name) {
      if (target == t.type) {
        TERN_TRY(writer.add_tensor(t.name, t.type, t.shape, t.bytes()));
        continue;
      }
      const GgufTensor* src = &t;
      auto fill = [model, src, target](std::span<uint8_t> out) {
        return convert_rows(*src, target, out);
      };
      TERN_TRY(writer.add_tensor(t.name, target, t.shape, fill));
      continue;
    }
    // Experts stacked: ne = {cols, rows, experts}; the bytes are each expert's, in order.
    std::vector<uint64_t> shape = t.shape;
    shape.push_back(o.parts.size());
    auto fill = [model, parts = o.parts, target](std::span<uint8_t> out) -> Result<void> {
      const size_t each = out.size() / parts.size();
      for (size_t e = 0; e < parts.size(); ++e) {
        std::span<uint8_t> slice = out.subspan(e * each, each);
        if (target == parts[e]->type) {
          std::memcpy(slice.data(), parts[e]->data, parts[e]->size_bytes);
        } else {
          TERN_TRY(convert_rows(*parts[e], target, slice));
        }
      }
      return {};
    };
    TERN_TRY(writer.add_tensor(o.name, target, std::move(shape), fill));
  }
  return writer.write(out_path, progress);
}

}  // namespace tern

#include "config/tokenizer_spec.h"

#include <algorithm>

namespace tern {
namespace {

Result<std::vector<std::string>> string_array(const GgufMetadata& md, const char* key,
                                              bool required, const std::string& where) {
  const GgufValue* v = md.find(key);
  if (v == nullptr) {
    if (required) return make_error("{}: {} is missing", where, key);
    return std::vector<std::string>{};
  }
  const GgufArray* arr = v->as_array();
  if (arr == nullptr || arr->element_type != GgufValueType::String) {
    return make_error("{}: {} must be an array of strings", where, key);
  }
  std::vector<std::string> out;
  out.reserve(arr->items.size());
  for (const auto& item : arr->items) out.push_back(*item.as_string());
  return out;
}

}  // namespace

Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file) {
  const GgufMetadata& md = file.metadata();
  const std::string& where = file.paths()[0];
  TokenizerSpec spec;
  const GgufValue* model = md.find("tokenizer.ggml.model");
  if (model == nullptr || model->as_string() == nullptr) {
    return make_error("{}: tokenizer.ggml.model is missing; the file has no tokenizer", where);
  }
  spec.model = *model->as_string();
  if (const GgufValue* pre = md.find("tokenizer.ggml.pre"); pre && pre->as_string()) {
    spec.pre = *pre->as_string();
  }
  auto tokens = string_array(md, "tokenizer.ggml.tokens", true, where);
  if (!tokens) return tokens.error();
  spec.tokens = std::move(*tokens);
  const size_t vocab = spec.tokens.size();
  if (vocab == 0) return make_error("{}: tokenizer.ggml.tokens is empty", where);

  if (const GgufValue* scores = md.find("tokenizer.ggml.scores")) {
    const GgufArray* arr = scores->as_array();
    if (arr == nullptr || arr->items.size() != vocab) {
      return make_error("{}: tokenizer.ggml.scores must be an array of {} numbers", where, vocab);
    }
    for (const auto& s : arr->items) {
      auto f = s.as_float();
      if (!f) return make_error("{}: tokenizer.ggml.scores holds a non-number", where);
      spec.scores.push_back(static_cast<float>(*f));
    }
  }
  if (const GgufValue* kinds = md.find("tokenizer.ggml.token_type")) {
    const GgufArray* arr = kinds->as_array();
    if (arr == nullptr || arr->items.size() != vocab) {
      return make_error("{}: tokenizer.ggml.token_type must be an array of {} integers", where,
                        vocab);
    }
    for (const auto& k : arr->items) {
      auto i = k.as_int();
      if (!i || *i < 0 || *i > 6) {
        return make_error("{}: tokenizer.ggml.token_type holds {} (0..6 allowed)", where,
                          k.to_display());
      }
      spec.kinds.push_back(static_cast<TokenKind>(*i));
    }
  }
  auto merges = string_array(md, "tokenizer.ggml.merges", false, where);
  if (!merges) return merges.error();
  spec.merges = std::move(*merges);

  auto token_id = [&](const char* key, std::optional<int32_t>& out) -> Result<void> {
    const GgufValue* v = md.find(key);
    if (v == nullptr) return {};
    auto id = v->as_int();
    if (!id || *id < 0 || static_cast<uint64_t>(*id) >= vocab) {
      return make_error("{}: {} = {} is not a token id (vocabulary has {})", where, key,
                        v->to_display(), vocab);
    }
    out = static_cast<int32_t>(*id);
    return {};
  };
  TERN_TRY(token_id("tokenizer.ggml.bos_token_id", spec.bos_id));
  TERN_TRY(token_id("tokenizer.ggml.eos_token_id", spec.eos_id));
  TERN_TRY(token_id("tokenizer.ggml.eot_token_id", spec.eot_id));
  TERN_TRY(token_id("tokenizer.ggml.eom_token_id", spec.eom_id));
  TERN_TRY(token_id("tokenizer.ggml.unknown_token_id", spec.unknown_id));
  TERN_TRY(token_id("tokenizer.ggml.padding_token_id", spec.padding_id));
  for (const auto& id : {spec.eos_id, spec.eot_id, spec.eom_id}) {
    if (id && std::find(spec.end_of_generation_ids.begin(), spec.end_of_generation_ids.end(),
                        *id) == spec.end_of_generation_ids.end()) {
      spec.end_of_generation_ids.push_back(*id);
    }
  }

  auto flag = [&](const char* key, bool fallback) {
    const GgufValue* v = md.find(key);
    if (v == nullptr || !v->as_bool()) return fallback;
    return *v->as_bool();
  };
  const bool is_spm = spec.model == "llama";
  spec.add_bos = flag("tokenizer.ggml.add_bos_token", is_spm);
  spec.add_eos = flag("tokenizer.ggml.add_eos_token", false);
  spec.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", is_spm);
  if (const GgufValue* t = md.find("tokenizer.chat_template"); t && t->as_string()) {
    spec.chat_template = *t->as_string();
  }
  return spec;
}

}  // namespace tern

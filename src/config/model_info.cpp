#include "config/model_info.h"

#include <fmt/format.h>

#include <map>

namespace tern {
namespace {

// llama.cpp's `general.file_type` numbering (LLAMA_FTYPE_*), which GGUF writers record.
std::string file_type_name(uint64_t file_type) {
  static const std::map<uint64_t, std::string> kNames = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},       {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},      {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"},    {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"},    {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"},    {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"},    {31, "IQ1_M"},  {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4_MOE"},
  };
  auto it = kNames.find(file_type);
  return it == kNames.end() ? std::string() : it->second;
}

// Without general.file_type: the type holding most bytes of the 2-D weights.
std::string dominant_weight_type(const GgufFile& file) {
  std::map<TensorType, uint64_t> bytes;
  for (const auto& t : file.tensors()) {
    if (t.shape.size() >= 2) bytes[t.type] += t.size_bytes;
  }
  TensorType best = TensorType::F32;
  uint64_t most = 0;
  for (auto [type, n] : bytes) {
    if (n > most) {
      most = n;
      best = type;
    }
  }
  return most == 0 ? std::string() : std::string(tensor_type_name(best));
}

}  // namespace

Result<ModelInfo> model_info_from_gguf(const GgufFile& file) {
  const GgufMetadata& md = file.metadata();
  ModelInfo info;
  const GgufValue* arch = md.find("general.architecture");
  if (arch == nullptr || arch->as_string() == nullptr) {
    return make_error("{}: general.architecture is missing or not a string", file.paths()[0]);
  }
  info.architecture = *arch->as_string();
  if (const GgufValue* name = md.find("general.name"); name && name->as_string()) {
    info.name = *name->as_string();
  }
  if (const GgufValue* ft = md.find("general.file_type"); ft && ft->as_uint()) {
    info.quantization = file_type_name(*ft->as_uint());
  }
  if (info.quantization.empty()) info.quantization = dominant_weight_type(file);

  auto arch_uint = [&](const std::string& suffix) -> Result<std::optional<uint64_t>> {
    std::string key = info.architecture + "." + suffix;
    const GgufValue* v = md.find(key);
    if (v == nullptr) return std::optional<uint64_t>{};
    // Some keys (head_count_kv) may be per-layer arrays; report the first layer's value.
    if (const GgufArray* arr = v->as_array(); arr && !arr->items.empty()) {
      if (auto first = arr->items[0].as_uint()) return std::optional<uint64_t>{*first};
    }
    auto u = v->as_uint();
    if (!u)
      return make_error("{}: {} must be a non-negative integer, got {}", file.paths()[0], key,
                        v->to_display());
    return std::optional<uint64_t>{*u};
  };
  auto set = [&](std::optional<uint64_t>& field, const char* suffix) -> Result<void> {
    auto v = arch_uint(suffix);
    if (!v) return v.error();
    field = *v;
    return {};
  };
  TERN_TRY(set(info.context_length, "context_length"));
  TERN_TRY(set(info.embedding_length, "embedding_length"));
  TERN_TRY(set(info.block_count, "block_count"));
  TERN_TRY(set(info.head_count, "attention.head_count"));
  TERN_TRY(set(info.head_count_kv, "attention.head_count_kv"));
  TERN_TRY(set(info.feed_forward_length, "feed_forward_length"));
  TERN_TRY(set(info.vocab_size, "vocab_size"));
  if (!info.vocab_size) {
    if (const GgufValue* tokens = md.find("tokenizer.ggml.tokens"); tokens && tokens->as_array()) {
      info.vocab_size = tokens->as_array()->items.size();
    }
  }
  for (const auto& t : file.tensors()) info.parameter_count += t.elements();
  info.tensor_bytes = file.tensor_bytes();
  return info;
}

std::string format_parameter_count(uint64_t parameters) {
  double p = static_cast<double>(parameters);
  if (p >= 1e9) return fmt::format("{:.1f}B", p / 1e9);
  if (p >= 1e6) return fmt::format("{:.0f}M", p / 1e6);
  if (p >= 1e3) return fmt::format("{:.0f}K", p / 1e3);
  return std::to_string(parameters);
}

}  // namespace tern

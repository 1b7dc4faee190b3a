// The typed summary of a model file: parsed once from GGUF `general.*` and `<arch>.*` keys.
// Per-architecture hyper-parameters (heads, rope, norms) get their own typed Config in models/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"
#include "io/gguf_file.h"

namespace tern {

struct ModelInfo {
  std::string architecture;  // general.architecture: "llama", "qwen3", "gemma3", ...
  std::string name;          // general.name, or empty
  std::string quantization;  // "Q4_K_M", "Q8_0", "BF16", ... from general.file_type or the tensors
  uint64_t parameter_count = 0;
  uint64_t tensor_bytes = 0;
  std::optional<uint64_t> context_length;
  std::optional<uint64_t> embedding_length;
  std::optional<uint64_t> block_count;
  std::optional<uint64_t> head_count;
  std::optional<uint64_t> head_count_kv;
  std::optional<uint64_t> feed_forward_length;
  std::optional<uint64_t> vocab_size;
};

Result<ModelInfo> model_info_from_gguf(const GgufFile& file);

// "1.5B", "135M": parameter counts the way model cards write them.
std::string format_parameter_count(uint64_t parameters);

}  // namespace tern

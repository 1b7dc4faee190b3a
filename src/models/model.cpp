#include "models/model.h"

#include "models/llama.h"

namespace tern {

KvCacheConfig Model::kv_config(int64_t context_tokens, TensorType type, int64_t block_size) const {
  const ModelShape& s = shape();
  KvCacheConfig c;
  c.layers = s.layers;
  c.kv_heads = s.cached_kv_heads();
  c.head_dim = s.head_dim;
  c.block_size = block_size;
  c.blocks = (context_tokens + block_size - 1) / block_size;
  c.type = type;
  return c;
}

Result<std::unique_ptr<Model>> load_model(const GgufFile& file, Device& device,
                                          const TensorParallel& tp) {
  const GgufValue* arch = file.metadata().find("general.architecture");
  if (arch == nullptr || arch->as_string() == nullptr) {
    return make_error("{}: general.architecture is missing", file.paths()[0]);
  }
  const std::string& name = *arch->as_string();
  if (name == "llama") return load_llama(file, device, tp);
  if (name == "qwen2") return load_qwen2(file, device, tp);
  if (name == "qwen3") return load_qwen3(file, device, tp);
  if (name == "qwen3moe") return load_qwen3moe(file, device, tp);
  if (name == "gemma3") return load_gemma3(file, device, tp);
  return make_error(
      "{}: architecture '{}' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gemma3)",
      file.paths()[0], name);
}

}  // namespace tern

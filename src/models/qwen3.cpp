// Qwen3: the Llama decoder with a per-head RMSNorm on queries and keys before RoPE, no biases,
// rotate-half RoPE and an explicit head size (attention.key_length) that need not be
// hidden / heads.
#include "models/llama.h"

namespace tern {

Result<std::unique_ptr<Model>> load_qwen3(const GgufFile& file, Device& device,
                                          const TensorParallel& tp) {
  return load_llama_family(file, device, LlamaVariant{.qk_norm = true, .neox_rope = true}, tp);
}

}  // namespace tern

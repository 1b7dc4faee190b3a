// Qwen2 / Qwen2.5: the Llama decoder with biases on the q/k/v projections and rotate-half RoPE.
#include "models/llama.h"

namespace tern {

Result<std::unique_ptr<Model>> load_qwen2(const GgufFile& file, Device& device,
                                          const TensorParallel& tp) {
  return load_llama_family(file, device, LlamaVariant{.qkv_bias = true, .neox_rope = true}, tp);
}

}  // namespace tern

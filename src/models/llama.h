// The Llama decoder (SmolLM2, Llama 3.x) and the variants that differ from it only in a few
// switches: Qwen2 (q/k/v biases, NEOX rope) and Qwen3 (per-head q/k RMSNorm, NEOX rope).
#pragma once

#include <memory>

#include "models/model.h"
#include "models/transformer.h"

namespace tern {

struct LlamaVariant {
  bool qkv_bias = false;   // qwen2
  bool qk_norm = false;    // qwen3
  bool neox_rope = false;  // rotate halves (qwen) instead of interleaved pairs (GGUF llama)
};

Result<std::unique_ptr<Model>> load_llama_family(const GgufFile& file, Device& device,
                                                 const LlamaVariant& variant,
                                                 const TensorParallel& tp);

Result<std::unique_ptr<Model>> load_llama(const GgufFile& file, Device& device,
                                          const TensorParallel& tp = {});
Result<std::unique_ptr<Model>> load_qwen2(const GgufFile& file, Device& device,
                                          const TensorParallel& tp = {});
Result<std::unique_ptr<Model>> load_qwen3(const GgufFile& file, Device& device,
                                          const TensorParallel& tp = {});
Result<std::unique_ptr<Model>> load_gemma3(const GgufFile& file, Device& device,
                                           const TensorParallel& tp = {});

}  // namespace tern

// The Llama decoder (SmolLM2, Llama 3.x) and the variants that differ from it only in a few
// switches: Qwen2 (q/k/v biases, NEOX rope) and Qwen3 (per-head q/k RMSNorm, NEOX rope). Qwen3-MoE
// (qwen3moe.cpp) reads the same config.
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

// What a Llama-style decoder reads from `<arch>.*` metadata: its shape, MLP size (0 when the
// file has none), norm epsilon and attention (rope, scale, this rank's heads under `tp`).
struct DecoderConfig {
  ModelShape shape;
  int64_t ffn = 0;
  float norm_eps = 1e-5f;
  AttentionConfig attention;
};
Result<DecoderConfig> read_decoder_config(const GgufFile& file, const LlamaVariant& variant,
                                          const TensorParallel& tp);

Result<std::unique_ptr<Model>> load_llama_family(const GgufFile& file, Device& device,
                                                 const LlamaVariant& variant,
                                                 const TensorParallel& tp);

Result<std::unique_ptr<Model>> load_llama(const GgufFile& file, Device& device,
                                          const TensorParallel& tp = {});
Result<std::unique_ptr<Model>> load_qwen2(const GgufFile& file, Device& device,
                                          const TensorParallel& tp = {});
Result<std::unique_ptr<Model>> load_qwen3(const GgufFile& file, Device& device,
                                          const TensorParallel& tp = {});
Result<std::unique_ptr<Model>> load_qwen3moe(const GgufFile& file, Device& device,
                                             const TensorParallel& tp = {});
Result<std::unique_ptr<Model>> load_gemma3(const GgufFile& file, Device& device,
                                           const TensorParallel& tp = {});

}  // namespace tern

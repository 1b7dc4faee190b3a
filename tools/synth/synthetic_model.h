// Writes random-weight GGUF models of real architectures and shapes (Qwen3-8B, SmolLM2, tiny
// test shapes): the weights are random, everything else (metadata, tensor names, shapes, types,
// a byte-level tokenizer) is what a converted model of that shape has. For speed benchmarks at
// sizes no PyPI package ships, and for tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/tensor_type.h"

namespace tern::synth {

struct SyntheticShape {
  std::string architecture = "qwen3";  // llama, qwen2, qwen3, qwen3moe, gemma3
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 16;
  int64_t ffn = 128;
  int64_t vocab = 512;  // at least 262 (bytes + specials)
  int64_t context = 4096;
  float rope_theta = 1000000.0f;
  bool tied_embeddings = true;
  // qwen3moe: experts per layer, used per token, and each expert's MLP size (ffn is then the
  // size a dense layer would have, written as feed_forward_length as converted files do).
  int64_t experts = 0;
  int64_t experts_used = 0;
  int64_t expert_ffn = 0;
};

// "qwen3-8b", "qwen3-0.6b", "qwen3-30b-a3b", "smollm2-135m", "llama3-8b", "gemma3-270m",
// "tiny-llama", "tiny-qwen3moe", ...
Result<SyntheticShape> preset_shape(const std::string& name);
std::vector<std::string> preset_names();

struct SyntheticOptions {
  std::string quantization = "F32";  // F32, F16, BF16, Q8_0, Q4_0, Q4_K_M, Q6_K
  uint64_t seed = 1;
  float weight_scale = 0.02f;  // std of the random weights
  std::string chat_template;   // tokenizer.chat_template; empty: a minimal ChatML template
  // Q4_K and Q6_K tensors as random blocks (random_blocks.h) instead of quantized normal
  // weights: seconds instead of minutes for an 8B model; for speed tests.
  bool fast_k_quants = false;
};

Result<void> write_synthetic_model(const std::string& path, const SyntheticShape& shape,
                                   const SyntheticOptions& options, bool progress = false);

}  // namespace tern::synth

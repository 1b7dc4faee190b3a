// A Hugging Face config.json (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// Qwen3MoeForCausalLM, Gemma3ForCausalLM) translated into the GGUF-convention metadata Tern's
// models read
// (`general.architecture`, `<arch>.embedding_length`, `<arch>.attention.head_count`, ...).
//
// Both spellings transformers has used are understood: `rope_theta` + `rope_scaling` (4.x) and
// `rope_parameters` (5.x, per layer type for Gemma 3). Anything Tern cannot run exactly (yarn or
// dynamic rope, logit soft-capping, biases where the architecture has none, ...) is an error
// naming the key, never a silently different model.
//
// Qwen3-MoE (`qwen3moe`) adds expert_count (num_experts, or num_local_experts as transformers 5
// writes it), expert_used_count, expert_feed_forward_length and expert_weights_norm
// (norm_topk_prob). Its dense layers (mlp_only_layers, or not a multiple of decoder_sparse_step)
// need no key: they simply hold the dense ffn_gate/ffn_up/ffn_down tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "io/gguf_value.h"

namespace tern {

struct HfConfig {
  std::string architecture;  // GGUF name: "llama", "qwen2", "qwen3", "qwen3moe", "gemma3"
  std::string model_type;    // config.json's model_type
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn = 0;
  int64_t context_length = 0;
  double norm_eps = 1e-6;
  bool tied_embeddings = false;
  std::string dtype;              // torch_dtype / dtype ("bfloat16", ...); empty if absent
  std::optional<int64_t> bos_id;  // bos_token_id, when a single integer
  std::vector<int64_t> eos_ids;   // eos_token_id (an integer or a list)
  std::vector<float> rope_freqs;  // llama3 rope scaling: per-pair frequency divisors
  bool permute_qk = false;        // llama: q/k rows to GGUF's interleaved-pair rope layout
  bool norm_plus_one = false;     // gemma3: RMSNorm weights stored as w, used as 1 + w
  // qwen3moe: experts in the model and per token, each expert's MLP size, and which layers have
  // the dense MLP instead (empty for the other architectures).
  int64_t experts = 0;
  int64_t experts_used = 0;
  int64_t expert_ffn = 0;
  bool expert_weights_norm = false;
  std::vector<bool> dense_layers;
  GgufMetadata metadata;  // general.architecture and the <arch>.* keys
};

// `label` names the file in errors.
Result<HfConfig> parse_hf_config(std::string_view json_text, const std::string& label);
Result<HfConfig> read_hf_config(const std::string& path);

// transformers' llama3 rope scaling (_compute_llama3_parameters) as divisors of the default
// inverse frequencies: inv_freq_scaled[i] = inv_freq[i] / divisor[i], i < head_dim / 2.
std::vector<float> llama3_rope_divisors(int64_t head_dim, double theta, double factor,
                                        double low_freq_factor, double high_freq_factor,
                                        double original_context);

}  // namespace tern

// A Hugging Face model directory (config.json + model.safetensors, or model-0000i-of-0000N
// shards listed by model.safetensors.index.json) opened as the GgufFile Tern's models read:
// GGUF metadata from config.json, GGUF tensor names, GGUF shapes (ne[0] = the last PyTorch
// dimension, so the same bytes), data pointing into the safetensors mappings. Only tensors that
// GGUF stores differently are rebuilt in memory: Llama's q/k rows (GGUF's interleaved-pair rope
// layout), Gemma 3's RMSNorm weights (1 + w, F32) and Llama 3's rope scaling (rope_freqs.weight).
//
// Qwen3-MoE: the hub's per-expert matrices stay 2-D, one tensor per expert, named
// `blk.L.ffn_{gate,up,down}_exps.E.weight` (write_gguf_from_hf stacks them into GGUF's 3-D
// `blk.L.ffn_X_exps.weight`); the router is `blk.L.ffn_gate_inp.weight`. transformers 5's fused
// in-memory layout (`mlp.experts.gate_up_proj` [E, 2 ff, hidden], `mlp.experts.down_proj`
// [E, hidden, ff]) gives the stacked 3-D tensors directly: down_proj in place, gate and up rebuilt
// in memory (each expert's first ff rows are its gate, the rest its up).
//
// Lives in config/ rather than io/ because it needs the config.json translation (config may use
// io; io may not use config).
#pragma once

#include <optional>
#include <string>

#include "base/error.h"
#include "config/hf_config.h"
#include "io/gguf_file.h"

namespace tern {

// Whether `path` is a directory holding a config.json.
bool is_hf_model_dir(const std::string& path);

Result<GgufFile> open_hf_model(const std::string& dir);

// The directory's tokenizer.json, when it has one (load it with Tokenizer::from_hf_json).
std::optional<std::string> hf_tokenizer_json_path(const std::string& dir);

// The chat template: chat_template.jinja, else tokenizer_config.json's chat_template (a string,
// or a list of {name, template} from which "default" is taken). Empty when there is none.
Result<std::string> read_hf_chat_template(const std::string& dir);

// The GGUF name of a Hugging Face tensor name ("model.layers.3.mlp.up_proj.weight" ->
// "blk.3.ffn_up.weight"), empty for buffers to skip (rotary inv_freq), nullopt if unknown.
// For qwen3moe, "model.layers.L.mlp.experts.E.gate_proj.weight" -> "blk.L.ffn_gate_exps.E.weight",
// "model.layers.L.mlp.gate.weight" -> "blk.L.ffn_gate_inp.weight", and the fused
// "model.layers.L.mlp.experts.gate_up_proj" -> "blk.L.ffn_gate_up_exps.weight" (which
// open_hf_model splits into ffn_gate_exps.weight and ffn_up_exps.weight).
std::optional<std::string> hf_to_gguf_tensor_name(const std::string& hf_name,
                                                  const std::string& architecture);

// A per-expert GGUF name, "blk.L.ffn_X_exps.E.weight": the stacked tensor's name
// ("blk.L.ffn_X_exps.weight") and E. nullopt for every other name.
struct ExpertTensorName {
  std::string stacked;
  int64_t expert = 0;
};
std::optional<ExpertTensorName> split_expert_tensor_name(std::string_view gguf_name);

}  // namespace tern

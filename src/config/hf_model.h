// A Hugging Face model directory (config.json + model.safetensors, or model-0000i-of-0000N
// shards listed by model.safetensors.index.json) opened as the GgufFile Tern's models read:
// GGUF metadata from config.json, GGUF tensor names, GGUF shapes (ne[0] = the last PyTorch
// dimension, so the same bytes), data pointing into the safetensors mappings. Only tensors that
// GGUF stores differently are rebuilt in memory: Llama's q/k rows (GGUF's interleaved-pair rope
// layout), Gemma 3's RMSNorm weights (1 + w, F32) and Llama 3's rope scaling (rope_freqs.weight).
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
std::optional<std::string> hf_to_gguf_tensor_name(const std::string& hf_name,
                                                  const std::string& architecture);

}  // namespace tern

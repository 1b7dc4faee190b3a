// Converts a Hugging Face safetensors directory into a GGUF file Tern (and llama.cpp) can load:
// the metadata and tensors open_hf_model() builds, optionally quantized, written through
// GgufWriter (temp file + rename). 1-D tensors (norms, biases, rope factors) stay F32.
#pragma once

#include <optional>
#include <string>

#include "base/error.h"
#include "base/tensor_type.h"
#include "io/gguf_writer.h"

namespace tern {

// When the directory has a tokenizer.json and `tokenizer` is true, it is written as GGUF
// tokenizer.* keys: byte-level BPE ("gpt2") with the pre-tokenizer named from its regex
// (gpt2, smollm, llama-bpe, qwen2, qwen35), bos/eos/padding and add_bos/add_eos from
// tokenizer_config.json (or config.json). Other tokenizers (SentencePiece-style, e.g. Gemma) are
// an error naming what was found; pass tokenizer = false to convert weights and metadata only.
//
// `quant`: nullopt keeps each matrix in its stored type (F32/F16/BF16); F32, F16, BF16, Q8_0,
// Q4_0, Q4_K or Q6_K converts every matrix. A matrix whose rows are not a whole number of the
// type's blocks is written as F16 instead.
Result<void> write_gguf_from_hf(const std::string& dir, const std::string& out_path,
                                std::optional<TensorType> quant,
                                const GgufWriter::Progress& progress = {}, bool tokenizer = true);

// The tokenizer.* keys for the directory's tokenizer.json (see above); `vocab_size` pads the
// token list with unused "[PADi]" tokens up to the embedding rows.
Result<void> add_hf_tokenizer(GgufWriter& writer, const std::string& dir, uint64_t vocab_size);

}  // namespace tern

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

// `quant`: nullopt keeps each matrix in its stored type (F32/F16/BF16); F32, F16, BF16, Q8_0,
// Q4_0, Q4_K or Q6_K converts every matrix. A matrix whose rows are not a whole number of the
// type's blocks is written as F16 instead.
Result<void> write_gguf_from_hf(const std::string& dir, const std::string& out_path,
                                std::optional<TensorType> quant,
                                const GgufWriter::Progress& progress = {});

}  // namespace tern

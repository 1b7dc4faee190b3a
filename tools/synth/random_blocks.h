// Random K-quant blocks written directly (no float weights, no quantization search): values of
// about the given standard deviation around zero. For speed-test models, where quantizing
// billions of normal weights with the K-quant range search would take minutes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/tensor_type.h"

namespace tern::synth {

bool can_fill_random_blocks(TensorType type);  // Q4_K, Q6_K
// `blocks` consecutive blocks of `type` at `out`, from the random stream `seed`.
void fill_random_blocks(TensorType type, uint8_t* out, size_t blocks, float scale, uint64_t seed);

}  // namespace tern::synth

// A small GGUF file exercising every metadata type, nested arrays and several tensor types.
// Shared by the reader tests, the python interop test and the fuzzer's seed corpus.
#pragma once

#include <cstdint>
#include <vector>

#include "io/gguf_writer.h"

namespace tern::testing {

// Fills `writer` with the sample contents. `payload` keeps tensor bytes alive until written.
void fill_sample(GgufWriter& writer, std::vector<std::vector<uint8_t>>& payload);

}  // namespace tern::testing

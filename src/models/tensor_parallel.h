// How one rank's share of a model is cut from the GGUF file (Megatron-style tensor
// parallelism): q/k/v and gate/up are column-parallel (each rank computes its heads and its
// rows of the MLP: contiguous row ranges of the stored matrices, used in place), o and down are
// row-parallel (each rank multiplies its slice of their input columns, and the partial sums
// are all-reduced), the LM head is split by vocabulary rows (logits all-gathered). The token
// embedding stays whole on every rank: get_rows reads only the rows of the batch's tokens.
// Architecture files only pass the TensorParallel to the loader and the attention config;
// the cutting lives here, in weights.cpp and in transformer.cpp.
#pragma once

#include <cstdint>

#include "backend/comm/communicator.h"
#include "base/error.h"

namespace tern {

struct TensorParallel {
  Communicator* comm = nullptr;  // null or size 1: the whole model on this process
  int rank = 0;
  int size = 1;

  static TensorParallel over(Communicator& c) { return {&c, c.rank(), c.size()}; }
  bool split() const { return size > 1; }
  // The communicator row-parallel outputs are summed over, or null when there is one rank.
  Communicator* reducer() const { return split() ? comm : nullptr; }
};

// Rows or columns [begin, begin + count) of a dimension of `total`.
struct Slice {
  int64_t begin = 0;
  int64_t count = 0;
};

// This rank's equal share of `total` things named `what` ("attention heads", "MLP rows"); an
// error that names the model dimension when `total` does not divide by the rank count.
Result<Slice> even_share(int64_t total, const TensorParallel& tp, const char* what);

// This rank's share of a vocabulary: ceil(vocab / ranks) rows each, the last rank fewer.
Result<Slice> vocab_share(int64_t vocab, const TensorParallel& tp);

}  // namespace tern

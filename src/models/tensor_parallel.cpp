#include "models/tensor_parallel.h"

namespace tern {

Result<Slice> even_share(int64_t total, const TensorParallel& tp, const char* what) {
  if (total % tp.size != 0) {
    return make_error(
        "tensor parallelism over {} ranks needs the {} ({}) to divide by {}; use a --tp that "
        "divides {}",
        tp.size, what, total, tp.size, total);
  }
  const int64_t share = total / tp.size;
  return Slice{share * tp.rank, share};
}

Result<Slice> vocab_share(int64_t vocab, const TensorParallel& tp) {
  const int64_t chunk = (vocab + tp.size - 1) / tp.size;
  const int64_t begin = chunk * tp.rank;
  if (begin >= vocab) {
    return make_error("a vocabulary of {} tokens is too small to split over {} ranks", vocab,
                      tp.size);
  }
  return Slice{begin, std::min(chunk, vocab - begin)};
}

}  // namespace tern

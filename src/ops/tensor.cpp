#include "ops/tensor.h"

namespace tern {

Tensor Tensor::as_matrix(int64_t rows, int64_t cols) const {
  Tensor t = *this;
  t.ne = {cols, rows, 1, 1};
  return t;
}

Tensor Tensor::row_slice(int64_t begin, int64_t count) const {
  Tensor t = *this;
  t.data = static_cast<float*>(data) + begin * ne[0];
  t.ne = {ne[0], count, 1, 1};
  return t;
}

Tensor Tensor::as_heads(int64_t heads, int64_t head_dim) const {
  Tensor t = *this;
  t.ne = {head_dim, heads, elements() / (heads * head_dim), 1};
  return t;
}

}  // namespace tern

// A view of device or host memory with a GGUF type and shape: the operand of every op. Memory is
// owned elsewhere (a DeviceBuffer, the model file, a step plan's scratch).
#pragma once

#include <array>
#include <cstdint>

#include "base/tensor_type.h"

namespace tern {

// How a weight matrix's blocks are laid out: GGUF row-major, or rearranged by the device for its
// kernels (CPU: groups of 16 interleaved rows, backend/cpu/packed.h). Only the device that made
// a non-Rows layout reads it.
enum class WeightLayout : uint8_t { Rows, DevicePacked };

struct Tensor {
  void* data = nullptr;
  TensorType type = TensorType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is contiguous (row length), as in GGUF
  WeightLayout layout = WeightLayout::Rows;

  int64_t elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  float* f32() const { return static_cast<float*>(data); }
  // The same memory seen as [rows, cols] with rows * cols == elements (F32 only).
  Tensor as_matrix(int64_t rows, int64_t cols) const;
  // Rows [begin, begin + count) of a [rows, ne0] F32 view.
  Tensor row_slice(int64_t begin, int64_t count) const;
  // The same memory seen as [n, heads, head_dim] (per-head ops: norms, rope, attention).
  Tensor as_heads(int64_t heads, int64_t head_dim) const;
};

}  // namespace tern

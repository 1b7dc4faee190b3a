// What the CudaDevice's source files share (not part of its interface): the helpers that build
// launch signatures.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/kernels.h"

namespace tern {

namespace cuda_device_detail {

inline double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Launch signature words: pointers, sizes and floats as 64-bit values.
inline uint64_t u(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}
inline uint64_t u(int64_t v) {
  return static_cast<uint64_t>(v);
}
inline uint64_t u(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// Whether the floats [a, a + a_elems) and [b, b + b_elems) share no element (a fusion that moves
// one op's reads or writes next to another's needs them apart).
inline bool apart(const float* a, int64_t a_elems, const float* b, int64_t b_elems) {
  return a + a_elems <= b || b + b_elems <= a;
}

inline size_t row_bytes(TensorType type, int64_t cols) {
  const auto& info = tensor_type_info(type);
  return static_cast<size_t>(cols / info.block_elements) * info.block_bytes;
}

}  // namespace cuda_device_detail
}  // namespace tern

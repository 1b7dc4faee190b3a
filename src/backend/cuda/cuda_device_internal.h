// What the CudaDevice's source files share (not part of its interface): the queued ops' fusion
// records and the helpers that build launch signatures.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/kernels.h"

namespace tern {

struct CudaDevice::OpInfo {
  enum Kind { kOther, kAdd, kNorm, kGemv, kFloatGemv, kNormRope, kGlu, kAttention } kind = kOther;
  const float* a = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  int64_t n = 0;  // kAdd: elements
  // kNorm
  float* sum = nullptr;
  const float* weight = nullptr;
  float eps = 0;
  int64_t rows = 0, cols = 0;
  void* xq = nullptr;
  // kGemv (a = the F32 x, xq = its 8-bit copy)
  cuda::GemvQ8Multi multi;
  // kFloatGemv (a = x): the F32/F16/BF16 products of one token sharing x
  cuda::GemvFloatMulti floats;
  int64_t k = 0;
  bool quantize = false;
  int q8_group = 32;  // kNorm with xq, kGemv: the values an activation scale covers (q8_group)
  // kGlu (the kGemv fields of its gate and up products, out = act(gate) * up): gelu, and where
  // the launch also writes out's 8-bit copy (scales a group of out_q8_group values) when set.
  bool gelu = false;
  void* out_xq = nullptr;
  int out_q8_group = 256;
  // kAttention: a decode attention launch (its output's 8-bit copy may fuse into it).
  cuda::AttentionLaunch attention;
  // kNormRope: the per-head norm + rope of one tensor of heads (a layer's q), which the same
  // op on the next (its k) joins.
  cuda::NormRopeLaunch norm_rope;
};

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

// GGML tensor element types as GGUF files number them, with their block geometry.
// The numbering is part of the file format; removed ids stay unused.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tern {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;
  uint32_t block_elements;  // elements per block
  uint32_t block_bytes;     // bytes per block
};

// Geometry of a known type id, or nullopt for an id no GGUF writer assigns.
std::optional<TensorTypeInfo> tensor_type_info(uint32_t type_id);
const TensorTypeInfo& tensor_type_info(TensorType type);
std::optional<TensorType> tensor_type_from_name(std::string_view name);  // "Q4_K", case-insensitive

inline std::string_view tensor_type_name(TensorType type) {
  return tensor_type_info(type).name;
}

// Bytes of `elements` values of `type`; nullopt when elements is not a whole number of blocks.
std::optional<uint64_t> tensor_bytes(TensorType type, uint64_t elements);

}  // namespace tern

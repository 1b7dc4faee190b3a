#include "base/tensor_type.h"

#include <array>
#include <cctype>

namespace tern {
namespace {

constexpr std::array kTypes = {
    TensorTypeInfo{TensorType::F32, "F32", 1, 4},
    TensorTypeInfo{TensorType::F16, "F16", 1, 2},
    TensorTypeInfo{TensorType::Q4_0, "Q4_0", 32, 18},
    TensorTypeInfo{TensorType::Q4_1, "Q4_1", 32, 20},
    TensorTypeInfo{TensorType::Q5_0, "Q5_0", 32, 22},
    TensorTypeInfo{TensorType::Q5_1, "Q5_1", 32, 24},
    TensorTypeInfo{TensorType::Q8_0, "Q8_0", 32, 34},
    TensorTypeInfo{TensorType::Q8_1, "Q8_1", 32, 36},
    TensorTypeInfo{TensorType::Q2_K, "Q2_K", 256, 84},
    TensorTypeInfo{TensorType::Q3_K, "Q3_K", 256, 110},
    TensorTypeInfo{TensorType::Q4_K, "Q4_K", 256, 144},
    TensorTypeInfo{TensorType::Q5_K, "Q5_K", 256, 176},
    TensorTypeInfo{TensorType::Q6_K, "Q6_K", 256, 210},
    TensorTypeInfo{TensorType::Q8_K, "Q8_K", 256, 292},
    TensorTypeInfo{TensorType::IQ2_XXS, "IQ2_XXS", 256, 66},
    TensorTypeInfo{TensorType::IQ2_XS, "IQ2_XS", 256, 74},
    TensorTypeInfo{TensorType::IQ3_XXS, "IQ3_XXS", 256, 98},
    TensorTypeInfo{TensorType::IQ1_S, "IQ1_S", 256, 50},
    TensorTypeInfo{TensorType::IQ4_NL, "IQ4_NL", 32, 18},
    TensorTypeInfo{TensorType::IQ3_S, "IQ3_S", 256, 110},
    TensorTypeInfo{TensorType::IQ2_S, "IQ2_S", 256, 82},
    TensorTypeInfo{TensorType::IQ4_XS, "IQ4_XS", 256, 136},
    TensorTypeInfo{TensorType::I8, "I8", 1, 1},
    TensorTypeInfo{TensorType::I16, "I16", 1, 2},
    TensorTypeInfo{TensorType::I32, "I32", 1, 4},
    TensorTypeInfo{TensorType::I64, "I64", 1, 8},
    TensorTypeInfo{TensorType::F64, "F64", 1, 8},
    TensorTypeInfo{TensorType::IQ1_M, "IQ1_M", 256, 56},
    TensorTypeInfo{TensorType::BF16, "BF16", 1, 2},
    TensorTypeInfo{TensorType::TQ1_0, "TQ1_0", 256, 54},
    TensorTypeInfo{TensorType::TQ2_0, "TQ2_0", 256, 66},
    TensorTypeInfo{TensorType::MXFP4, "MXFP4", 32, 17},
    TensorTypeInfo{TensorType::NVFP4, "NVFP4", 64, 36},
    TensorTypeInfo{TensorType::Q1_0, "Q1_0", 128, 18},
};

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t type_id) {
  for (const auto& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == type_id) return info;
  }
  return std::nullopt;
}

const TensorTypeInfo& tensor_type_info(TensorType type) {
  for (const auto& info : kTypes) {
    if (info.type == type) return info;
  }
  return kTypes[0];  // unreachable for a valid enum value
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  for (const auto& info : kTypes) {
    if (info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == info.name[i];
    }
    if (same) return info.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> tensor_bytes(TensorType type, uint64_t elements) {
  const auto& info = tensor_type_info(type);
  if (elements % info.block_elements != 0) return std::nullopt;
  return elements / info.block_elements * info.block_bytes;
}

}  // namespace tern

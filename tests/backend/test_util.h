// Helpers shared by the backend tests: fixture files, random weights of every supported type.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "base/tensor_type.h"

namespace tern::testing {

// A token tree's ancestor masks (AttentionSequence::ancestors) from each new token's parent
// among the new tokens (-1: a child of the cached prefix); a token sees itself too.
inline std::vector<uint64_t> ancestor_masks(const std::vector<int32_t>& parents) {
  std::vector<uint64_t> m(parents.size());
  for (size_t i = 0; i < parents.size(); ++i)
    m[i] = (uint64_t{1} << i) | (parents[i] >= 0 ? m[static_cast<size_t>(parents[i])] : 0);
  return m;
}

// Node i's parent is (i - 1) / 2: a binary tree of n nodes rooted at node 0.
inline std::vector<int32_t> binary_tree(int32_t n) {
  std::vector<int32_t> parents(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) parents[static_cast<size_t>(i)] = i == 0 ? -1 : (i - 1) / 2;
  return parents;
}

inline std::vector<uint8_t> read_fixture(const std::string& name) {
  std::ifstream in(std::string(TERN_TEST_DATA_DIR) + "/quant/" + name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<float> as_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// Byte offsets of the fp16 scale fields of each block type.
inline std::vector<int> fp16_fields(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
      return {0};
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      return {0, 2};
    case TensorType::Q2_K:
      return {80, 82};
    case TensorType::Q3_K:
      return {108};
    case TensorType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// `rows` rows of `cols` random elements of `type` with sane scales (|d| ~ 1e-2, either sign).
inline std::vector<uint8_t> random_weights(TensorType type, int64_t rows, int64_t cols,
                                           std::mt19937& rng) {
  const auto& info = tensor_type_info(type);
  const size_t blocks = static_cast<size_t>(rows * cols / info.block_elements);
  std::vector<uint8_t> w(blocks * info.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (type == TensorType::F32) {
    for (size_t i = 0; i < blocks; ++i) {
      const float v = normal(rng);
      std::memcpy(&w[i * 4], &v, 4);
    }
    return w;
  }
  if (type == TensorType::F16 || type == TensorType::BF16) {
    for (size_t i = 0; i < blocks; ++i) {
      const float v = normal(rng);
      const uint16_t h = type == TensorType::F16 ? float_to_fp16(v) : float_to_bf16(v);
      std::memcpy(&w[i * 2], &h, 2);
    }
    return w;
  }
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  for (size_t i = 0; i < blocks; ++i) {
    for (int off : fp16_fields(type)) {
      const uint16_t h = float_to_fp16(normal(rng) * 0.01f);
      std::memcpy(&w[i * info.block_bytes + static_cast<size_t>(off)], &h, 2);
    }
  }
  return w;
}

}  // namespace tern::testing

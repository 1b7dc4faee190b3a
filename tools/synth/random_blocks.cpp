#include "random_blocks.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/quant.h"
#include "base/fp16.h"

namespace tern::synth {
namespace {

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Layout {
  int d_offset;     // fp16 super-block scale
  int min_offset;   // fp16 min scale, or -1
  float min_ratio;  // dmin / d that centres the values on zero
};

Layout layout(TensorType type) {
  if (type == TensorType::Q4_K) return {0, 2, 7.5f};  // x = d*sc*q - dmin*m, q in 0..15
  return {208, -1, 0.0f};                             // Q6_K: x = d*sc*(q - 32)
}

void fill(TensorType type, uint8_t* out, size_t blocks, float d, uint64_t seed) {
  const auto& info = tensor_type_info(type);
  const Layout l = layout(type);
  uint64_t state = seed;
  const size_t bytes = blocks * info.block_bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t r = splitmix(state);
    std::memcpy(out + i, &r, 8);
  }
  for (; i < bytes; ++i) out[i] = static_cast<uint8_t>(splitmix(state));
  const uint16_t hd = float_to_fp16(d), hm = float_to_fp16(d * l.min_ratio);
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* block = out + b * info.block_bytes;
    std::memcpy(block + l.d_offset, &hd, 2);
    if (l.min_offset >= 0) std::memcpy(block + l.min_offset, &hm, 2);
  }
}

// Standard deviation of the values of random blocks with d = 1.
float unit_std(TensorType type) {
  const auto& info = tensor_type_info(type);
  constexpr size_t kBlocks = 512;
  std::vector<uint8_t> blocks(kBlocks * info.block_bytes);
  fill(type, blocks.data(), kBlocks, 1.0f, 12345);
  std::vector<float> values(kBlocks * info.block_elements);
  cpu::dequantize_row(type, blocks.data(), values.data(), static_cast<int64_t>(values.size()));
  double sum = 0, sq = 0;
  for (float v : values) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(values.size());
  return static_cast<float>(std::sqrt(sq / n - (sum / n) * (sum / n)));
}

}  // namespace

bool can_fill_random_blocks(TensorType type) {
  return type == TensorType::Q4_K || type == TensorType::Q6_K;
}

void fill_random_blocks(TensorType type, uint8_t* out, size_t blocks, float scale, uint64_t seed) {
  static const float q4k = unit_std(TensorType::Q4_K);
  static const float q6k = unit_std(TensorType::Q6_K);
  const float unit = type == TensorType::Q4_K ? q4k : q6k;
  fill(type, out, blocks, scale / unit, seed);
}

}  // namespace tern::synth

// Packing GGUF row-major Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q6_K weights into the row-interleaved
// layout of packed.h, and the way back (one row to floats, through the original block so the values
// are bit-identical to dequantize_row's). Runs once per weight at model load; plain C++.
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/packed.h"
#include "backend/quant_blocks.h"

namespace tern::cpu {
namespace {

using namespace tern::quant;

constexpr int kR = static_cast<int>(kPackRows);

struct PackedQ8_0 {
  uint16_t d[kR];
  uint8_t q[8][kR][4];
};
struct PackedQ4_0 {
  uint16_t d[kR];
  uint8_t qs[4][kR][4];
};
struct PackedQ4_1 {
  uint16_t d[kR];
  uint16_t m[kR];
  uint8_t qs[4][kR][4];
};
struct PackedQ5_0 {
  uint16_t d[kR];
  uint8_t qs[4][kR][4];
  uint64_t hmask[8];
};
struct PackedQ4_K {
  uint16_t d[kR];
  uint16_t dmin[kR];
  uint8_t sc[8][kR];
  uint8_t mn[8][kR];
  uint8_t q[32][kR][4];
};
struct PackedQ6_K {
  uint16_t d[kR];
  int8_t sc[16][kR];
  uint8_t ql[32][kR][4];
  uint8_t qh[16][kR][4];
};
static_assert(sizeof(PackedQ8_0) == 16 * sizeof(BlockQ8_0));
static_assert(sizeof(PackedQ4_0) == 16 * sizeof(BlockQ4_0));
static_assert(sizeof(PackedQ4_1) == 16 * sizeof(BlockQ4_1));
static_assert(sizeof(PackedQ5_0) == 16 * sizeof(BlockQ5_0));
static_assert(sizeof(PackedQ4_K) == 16 * sizeof(BlockQ4_K) + 64);
static_assert(sizeof(PackedQ6_K) == 16 * sizeof(BlockQ6_K));

size_t group_block_bytes(TensorType type) {
  switch (type) {
    case TensorType::Q8_0:
      return sizeof(PackedQ8_0);
    case TensorType::Q4_0:
      return sizeof(PackedQ4_0);
    case TensorType::Q4_1:
      return sizeof(PackedQ4_1);
    case TensorType::Q5_0:
      return sizeof(PackedQ5_0);
    case TensorType::Q4_K:
      return sizeof(PackedQ4_K);
    case TensorType::Q6_K:
      return sizeof(PackedQ6_K);
    default:
      return 0;
  }
}

// Element e of a Q6_K block as its code 0..63 (quant_blocks.h: e = h*128 + r).
uint8_t q6_code(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128;
  const int low = (b.ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
  const int high = (b.qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
  return static_cast<uint8_t>(low | (high << 4));
}

void set_q6_code(BlockQ6_K& b, int e, uint8_t code) {
  const int h = e / 128, r = e % 128;
  b.ql[h * 64 + r % 64] |= static_cast<uint8_t>((code & 0xF) << (4 * (r / 64)));
  b.qh[h * 32 + r % 32] |= static_cast<uint8_t>((code >> 4) << (2 * (r / 32)));
}

// Elements of the low and high code vectors of Q6_K load L (packed.h).
int q6_lo_element(int L, int i) {
  const int p = L / 8, h = (L / 4) % 2, s = L % 4;
  return 64 * p + 16 * h + 4 * s + i;
}

uint32_t q5_high_bits(const BlockQ5_0& b) {
  return uint32_t{b.qh[0]} | uint32_t{b.qh[1]} << 8 | uint32_t{b.qh[2]} << 16 |
         uint32_t{b.qh[3]} << 24;
}

// Q4_0 / Q4_1: step s byte i of a row is the GGUF qs[4s + i] (low nibble element 4s + i, high
// nibble 16 + 4s + i); d (and Q4_1's m) a row.
template <typename Packed, typename Block>
void pack_q4(const uint8_t* const* row_blocks, void* out) {
  auto& p = *static_cast<Packed*>(out);
  for (int r = 0; r < kR; ++r) {
    const auto& b = *reinterpret_cast<const Block*>(row_blocks[r]);
    p.d[r] = b.d;
    if constexpr (requires { b.m; }) p.m[r] = b.m;
    for (int s = 0; s < 4; ++s) std::memcpy(p.qs[s][r], b.qs + 4 * s, 4);
  }
}

template <typename Packed, typename Block>
void unpack_q4(const void* in, int r, uint8_t* block) {
  const auto& p = *static_cast<const Packed*>(in);
  auto& b = *reinterpret_cast<Block*>(block);
  b.d = p.d[r];
  if constexpr (requires { b.m; }) b.m = p.m[r];
  for (int s = 0; s < 4; ++s) std::memcpy(b.qs + 4 * s, p.qs[s][r], 4);
}

void pack_block(TensorType type, const uint8_t* const* row_blocks, void* out) {
  if (type == TensorType::Q8_0) {
    auto& p = *static_cast<PackedQ8_0*>(out);
    for (int r = 0; r < kR; ++r) {
      const auto& b = *reinterpret_cast<const BlockQ8_0*>(row_blocks[r]);
      p.d[r] = b.d;
      for (int s = 0; s < 8; ++s)
        for (int i = 0; i < 4; ++i) p.q[s][r][i] = static_cast<uint8_t>(b.qs[4 * s + i]) ^ 0x80;
    }
  } else if (type == TensorType::Q4_0) {
    pack_q4<PackedQ4_0, BlockQ4_0>(row_blocks, out);
  } else if (type == TensorType::Q4_1) {
    pack_q4<PackedQ4_1, BlockQ4_1>(row_blocks, out);
  } else if (type == TensorType::Q5_0) {
    auto& p = *static_cast<PackedQ5_0*>(out);
    std::memset(p.hmask, 0, sizeof p.hmask);
    for (int r = 0; r < kR; ++r) {
      const auto& b = *reinterpret_cast<const BlockQ5_0*>(row_blocks[r]);
      p.d[r] = b.d;
      const uint32_t high = q5_high_bits(b);
      // Step s byte i: the GGUF qs[4s + i] (low nibble element 4s + i, high nibble 16 + 4s + i);
      // hmask[2s + h] bit 4r + i is bit 4 of element 16h + 4s + i.
      for (int s = 0; s < 4; ++s) {
        std::memcpy(p.qs[s][r], b.qs + 4 * s, 4);
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 4; ++i)
            if ((high >> (16 * h + 4 * s + i)) & 1)
              p.hmask[2 * s + h] |= uint64_t{1} << (4 * r + i);
      }
    }
  } else if (type == TensorType::Q4_K) {
    auto& p = *static_cast<PackedQ4_K*>(out);
    for (int r = 0; r < kR; ++r) {
      const auto& b = *reinterpret_cast<const BlockQ4_K*>(row_blocks[r]);
      p.d[r] = b.d;
      p.dmin[r] = b.dmin;
      for (int k = 0; k < 8; ++k) k_scale_min(b.scales, k, &p.sc[k][r], &p.mn[k][r]);
      // Load L byte i is the row's qs[4L + i]: low nibble element 64p + 4s + i, high nibble
      // 64p + 32 + 4s + i (L = 8p + s), which is the GGUF order already.
      for (int L = 0; L < 32; ++L) std::memcpy(p.q[L][r], b.qs + 4 * L, 4);
    }
  } else {
    auto& p = *static_cast<PackedQ6_K*>(out);
    std::memset(p.qh, 0, sizeof p.qh);
    for (int r = 0; r < kR; ++r) {
      const auto& b = *reinterpret_cast<const BlockQ6_K*>(row_blocks[r]);
      p.d[r] = b.d;
      for (int k = 0; k < 16; ++k) p.sc[k][r] = b.scales[k];
      for (int L = 0; L < 32; ++L) {
        for (int i = 0; i < 4; ++i) {
          const uint8_t lo = q6_code(b, q6_lo_element(L, i));
          const uint8_t hi = q6_code(b, q6_lo_element(L, i) + 32);
          p.ql[L][r][i] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
          p.qh[L / 2][r][i] |=
              static_cast<uint8_t>(((lo >> 4) | ((hi >> 4) << 2)) << (4 * (L % 2)));
        }
      }
    }
  }
}

// Row r's GGUF block from a packed group block.
void unpack_block(TensorType type, const void* in, int r, uint8_t* block) {
  if (type == TensorType::Q8_0) {
    const auto& p = *static_cast<const PackedQ8_0*>(in);
    auto& b = *reinterpret_cast<BlockQ8_0*>(block);
    b.d = p.d[r];
    for (int s = 0; s < 8; ++s)
      for (int i = 0; i < 4; ++i) b.qs[4 * s + i] = static_cast<int8_t>(p.q[s][r][i] ^ 0x80);
  } else if (type == TensorType::Q4_0) {
    unpack_q4<PackedQ4_0, BlockQ4_0>(in, r, block);
  } else if (type == TensorType::Q4_1) {
    unpack_q4<PackedQ4_1, BlockQ4_1>(in, r, block);
  } else if (type == TensorType::Q5_0) {
    const auto& p = *static_cast<const PackedQ5_0*>(in);
    auto& b = *reinterpret_cast<BlockQ5_0*>(block);
    b.d = p.d[r];
    uint32_t high = 0;
    for (int s = 0; s < 4; ++s) {
      std::memcpy(b.qs + 4 * s, p.qs[s][r], 4);
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 4; ++i)
          if ((p.hmask[2 * s + h] >> (4 * r + i)) & 1) high |= uint32_t{1} << (16 * h + 4 * s + i);
    }
    for (int k = 0; k < 4; ++k) b.qh[k] = static_cast<uint8_t>(high >> (8 * k));
  } else if (type == TensorType::Q4_K) {
    const auto& p = *static_cast<const PackedQ4_K*>(in);
    auto& b = *reinterpret_cast<BlockQ4_K*>(block);
    b.d = p.d[r];
    b.dmin = p.dmin[r];
    std::memset(b.scales, 0, sizeof b.scales);
    for (int k = 0; k < 8; ++k) {  // the inverse of k_scale_min
      const uint8_t sc = p.sc[k][r], mn = p.mn[k][r];
      if (k < 4) {
        b.scales[k] |= sc;
        b.scales[k + 4] |= mn;
      } else {
        b.scales[k + 4] = static_cast<uint8_t>((sc & 0xF) | ((mn & 0xF) << 4));
        b.scales[k - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
        b.scales[k] |= static_cast<uint8_t>((mn >> 4) << 6);
      }
    }
    for (int L = 0; L < 32; ++L) std::memcpy(b.qs + 4 * L, p.q[L][r], 4);
  } else {
    const auto& p = *static_cast<const PackedQ6_K*>(in);
    auto& b = *reinterpret_cast<BlockQ6_K*>(block);
    std::memset(&b, 0, sizeof b);
    b.d = p.d[r];
    for (int k = 0; k < 16; ++k) b.scales[k] = p.sc[k][r];
    for (int L = 0; L < 32; ++L) {
      for (int i = 0; i < 4; ++i) {
        const int bits = p.qh[L / 2][r][i] >> (4 * (L % 2));
        const uint8_t byte = p.ql[L][r][i];
        set_q6_code(b, q6_lo_element(L, i), static_cast<uint8_t>((byte & 0xF) | ((bits & 3) << 4)));
        set_q6_code(b, q6_lo_element(L, i) + 32,
                    static_cast<uint8_t>((byte >> 4) | (((bits >> 2) & 3) << 4)));
      }
    }
  }
}

}  // namespace

bool can_pack(TensorType type, int64_t rows, int64_t cols, CpuPath path) {
  const bool kernel = (path == CpuPath::Avx512 && detail::packed_avx512(type)) ||
                      (path == CpuPath::Avx2 && detail::packed_avx2(type));
  if (group_block_bytes(type) == 0 || !kernel) return false;
  const int64_t block = tensor_type_info(type).block_elements;
  return rows > 0 && rows % kPackRows == 0 && cols > 0 && cols % block == 0;
}

size_t packed_bytes(TensorType type, int64_t rows, int64_t cols) {
  const int64_t blocks = cols / tensor_type_info(type).block_elements;
  return static_cast<size_t>(rows / kPackRows) * static_cast<size_t>(blocks) *
         group_block_bytes(type);
}

void pack_rows(TensorType type, const void* w, int64_t rows, int64_t cols, void* dst,
               ThreadPool& pool) {
  const auto& info = tensor_type_info(type);
  const int64_t blocks = cols / info.block_elements;
  const size_t row_bytes = static_cast<size_t>(blocks) * info.block_bytes;
  const size_t gbytes = group_block_bytes(type);
  const auto* src = static_cast<const uint8_t*>(w);
  auto* out = static_cast<uint8_t*>(dst);
  pool.parallel_for(static_cast<size_t>(rows / kPackRows), [&](size_t begin, size_t end, size_t) {
    for (size_t g = begin; g < end; ++g) {
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* row_blocks[kR];
        for (int r = 0; r < kR; ++r) {
          row_blocks[r] = src + (g * kPackRows + static_cast<size_t>(r)) * row_bytes +
                          static_cast<size_t>(b) * info.block_bytes;
        }
        pack_block(type, row_blocks, out + (g * static_cast<size_t>(blocks) + b) * gbytes);
      }
    }
  });
}

void dequantize_packed_row(TensorType type, const void* packed, int64_t cols, int64_t r,
                           float* dst) {
  const auto& info = tensor_type_info(type);
  const int64_t blocks = cols / info.block_elements;
  const size_t gbytes = group_block_bytes(type);
  const auto* group = static_cast<const uint8_t*>(packed) +
                      static_cast<size_t>(r / kPackRows) * static_cast<size_t>(blocks) * gbytes;
  uint8_t block[sizeof(BlockQ6_K)];
  for (int64_t b = 0; b < blocks; ++b) {
    unpack_block(type, group + static_cast<size_t>(b) * gbytes, static_cast<int>(r % kPackRows),
                 block);
    dequantize_row(type, block, dst + b * info.block_elements, info.block_elements);
  }
}

}  // namespace tern::cpu

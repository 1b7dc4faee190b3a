// Device-side GGUF block decoding: the values of one 32-element chunk of a weight row, for every
// block type the CUDA backend supports (layouts: backend/quant_blocks.h). Products and sums use
// explicit round-to-nearest intrinsics, never fused multiply-adds, so the values equal the CPU
// dequantizer's bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "base/tensor_type.h"

namespace tern::cuda {

__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);  // every fp16 field is 2-byte aligned
}
__device__ __forceinline__ uint32_t load_u32_unaligned(const uint8_t* p) {
  const uint16_t* q = reinterpret_cast<const uint16_t*>(p);  // 2-byte aligned fields
  return static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16);
}

// Q4_K: the 6-bit scales and mins of sub-blocks 2 c2 and 2 c2 + 1 from the superblock's first
// 16 bytes (hd: d and dmin, then the 12 packed scale bytes), as bytes: the scales in bytes 0 and
// 1 of sc, the mins in bytes 0 and 1 of m. No branch on c2 (it varies across a warp's lanes in
// the row-pair products: a branch there ran both paths). For c2 < 2 a value is the low 6 bits of
// its byte; for c2 >= 2 its low four bits come from a nibble of the last four scale bytes and its
// high two from bits 6-7 of the first eight: ((w >> 2) & 0x30) per byte moves bits 6-7 to 4-5.
__device__ __forceinline__ void q4k_scale_words(const int4& hd, int c2, uint32_t& sc, uint32_t& m) {
  const uint32_t shift = 16 * (c2 & 1);
  const uint32_t w0 = static_cast<uint32_t>(hd.y) >> shift;
  const uint32_t w1 = static_cast<uint32_t>(hd.z) >> shift;
  const uint32_t w2 = static_cast<uint32_t>(hd.w) >> shift;
  const bool low = c2 < 2;
  const uint32_t keep = low ? 0x3F3Fu : 0x0F0Fu, high = low ? 0u : 0x3030u;
  sc = ((low ? w0 : w2) & keep) | ((w0 >> 2) & high);
  m = ((low ? w1 : w2 >> 4) & keep) | ((w1 >> 2) & high);
}
// The same four values as ints.
__device__ __forceinline__ void q4k_scales(const int4& hd, int c2, int& sc0, int& sc1, int& m0,
                                           int& m1) {
  uint32_t sc, m;
  q4k_scale_words(hd, c2, sc, m);
  sc0 = static_cast<int>(sc & 0xFF), sc1 = static_cast<int>(sc >> 8);
  m0 = static_cast<int>(m & 0xFF), m1 = static_cast<int>(m >> 8);
}

// Q4_K: the superblock's d and dmin (its first 4 bytes, two fp16) as floats.
__device__ __forceinline__ float2 q4k_d_dmin(const int4& hd) {
  return __half22float2(*reinterpret_cast<const __half2*>(&hd.x));
}

static __constant__ int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

template <TensorType T>
struct BlockTraits;
#define TERN_BLOCK(T, E, B)            \
  template <>                          \
  struct BlockTraits<TensorType::T> {  \
    static constexpr int elements = E; \
    static constexpr int bytes = B;    \
  };
TERN_BLOCK(Q4_0, 32, 18)
TERN_BLOCK(Q4_1, 32, 20)
TERN_BLOCK(Q5_0, 32, 22)
TERN_BLOCK(Q5_1, 32, 24)
TERN_BLOCK(Q8_0, 32, 34)
TERN_BLOCK(IQ4_NL, 32, 18)
TERN_BLOCK(Q2_K, 256, 84)
TERN_BLOCK(Q3_K, 256, 110)
TERN_BLOCK(Q4_K, 256, 144)
TERN_BLOCK(Q5_K, 256, 176)
TERN_BLOCK(Q6_K, 256, 210)
TERN_BLOCK(IQ4_XS, 256, 136)
#undef TERN_BLOCK

// Scale and min j of the 12 packed Q4_K/Q5_K scale bytes.
__device__ __forceinline__ void k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

__device__ __forceinline__ int q3k_scale(const uint8_t* s, int j) {
  const int low = (s[j % 8] >> (4 * (j / 8))) & 0xF;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// y[0..32) = elements [32 c, 32 c + 32) of a row of block type T starting at `row`.
template <TensorType T>
__device__ __forceinline__ void dequant_chunk(const uint8_t* row, int64_t c, float* y) {
  constexpr int kE = BlockTraits<T>::elements, kB = BlockTraits<T>::bytes;
  const uint8_t* b = row + (c * 32 / kE) * kB;
  const int cc = static_cast<int>(c % (kE / 32));  // chunk within a 256 super-block
  if constexpr (T == TensorType::Q4_0 || T == TensorType::IQ4_NL) {
    const float d = half_bits_to_float(load_u16(b));
    const uint8_t* qs = b + 2;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      if constexpr (T == TensorType::Q4_0) {
        y[l] = __fmul_rn(d, static_cast<float>((qs[l] & 0xF) - 8));
        y[l + 16] = __fmul_rn(d, static_cast<float>((qs[l] >> 4) - 8));
      } else {
        y[l] = __fmul_rn(d, static_cast<float>(kIq4Values[qs[l] & 0xF]));
        y[l + 16] = __fmul_rn(d, static_cast<float>(kIq4Values[qs[l] >> 4]));
      }
    }
  } else if constexpr (T == TensorType::Q4_1) {
    const float d = half_bits_to_float(load_u16(b)), m = half_bits_to_float(load_u16(b + 2));
    const uint8_t* qs = b + 4;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      y[l] = __fadd_rn(__fmul_rn(d, static_cast<float>(qs[l] & 0xF)), m);
      y[l + 16] = __fadd_rn(__fmul_rn(d, static_cast<float>(qs[l] >> 4)), m);
    }
  } else if constexpr (T == TensorType::Q5_0 || T == TensorType::Q5_1) {
    constexpr bool kAffine = T == TensorType::Q5_1;
    const float d = half_bits_to_float(load_u16(b));
    const float m = kAffine ? half_bits_to_float(load_u16(b + 2)) : 0.0f;
    const uint8_t* p = b + (kAffine ? 4 : 2);
    const uint32_t qh = load_u32_unaligned(p);
    const uint8_t* qs = p + 4;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int q0 = (qs[l] & 0xF) | static_cast<int>(((qh >> l) & 1u) << 4);
      const int q1 = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
      if constexpr (kAffine) {
        y[l] = __fadd_rn(__fmul_rn(d, static_cast<float>(q0)), m);
        y[l + 16] = __fadd_rn(__fmul_rn(d, static_cast<float>(q1)), m);
      } else {
        y[l] = __fmul_rn(d, static_cast<float>(q0 - 16));
        y[l + 16] = __fmul_rn(d, static_cast<float>(q1 - 16));
      }
    }
  } else if constexpr (T == TensorType::Q8_0) {
    const float d = half_bits_to_float(load_u16(b));
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) y[l] = __fmul_rn(static_cast<float>(qs[l]), d);
  } else if constexpr (T == TensorType::Q2_K) {
    const uint8_t* scales = b;
    const uint8_t* qs = b + 16;
    const float d = half_bits_to_float(load_u16(b + 80)),
                dmin = half_bits_to_float(load_u16(b + 82));
    const int h = cc / 4, k = cc % 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int j = cc * 2 + l / 16;
      const float dl = __fmul_rn(d, static_cast<float>(scales[j] & 0xF));
      const float ml = __fmul_rn(dmin, static_cast<float>(scales[j] >> 4));
      const int q = (qs[h * 32 + l] >> (2 * k)) & 3;
      y[l] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
  } else if constexpr (T == TensorType::Q3_K) {
    const uint8_t* hmask = b;
    const uint8_t* qs = b + 32;
    const uint8_t* scales = b + 96;
    const float d = half_bits_to_float(load_u16(b + 108));
    const int h = cc / 4, k = cc % 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const float dl = __fmul_rn(d, static_cast<float>(q3k_scale(scales, cc * 2 + l / 16)));
      const int low = (qs[h * 32 + l] >> (2 * k)) & 3;
      const int high = (hmask[l] >> cc) & 1;
      y[l] = __fmul_rn(dl, static_cast<float>(low - (high ? 0 : 4)));
    }
  } else if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
    constexpr bool kFive = T == TensorType::Q5_K;
    const float d = half_bits_to_float(load_u16(b)), dmin = half_bits_to_float(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (kFive ? 48 : 16);
    int sc, m;
    k_scale_min(scales, cc, sc, m);
    const float dl = __fmul_rn(d, static_cast<float>(sc));
    const float ml = __fmul_rn(dmin, static_cast<float>(m));
    const int c2 = cc / 2, s = cc % 2;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      int q = (qs[c2 * 32 + l] >> (4 * s)) & 0xF;
      if constexpr (kFive) q |= ((qh[l] >> cc) & 1) << 4;
      y[l] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
  } else if constexpr (T == TensorType::Q6_K) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = half_bits_to_float(load_u16(b + 208));
    const int h = cc / 4, g = cc % 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int low = (ql[h * 64 + (g % 2) * 32 + l] >> (4 * (g / 2))) & 0xF;
      const int high = (qh[h * 32 + l] >> (2 * g)) & 3;
      const float dl = __fmul_rn(d, static_cast<float>(scales[cc * 2 + l / 16]));
      y[l] = __fmul_rn(dl, static_cast<float>((low | (high << 4)) - 32));
    }
  } else if constexpr (T == TensorType::IQ4_XS) {
    const float d = half_bits_to_float(load_u16(b));
    const uint16_t scales_h = load_u16(b + 2);
    const uint8_t* scales_l = b + 4;
    const uint8_t* qs = b + 8;
    const int j = cc;
    const int low = (scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
    const int high = (scales_h >> (2 * j)) & 3;
    const float dl = __fmul_rn(d, static_cast<float>((low | (high << 4)) - 32));
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      y[l] = __fmul_rn(dl, static_cast<float>(kIq4Values[qs[j * 16 + l] & 0xF]));
      y[l + 16] = __fmul_rn(dl, static_cast<float>(kIq4Values[qs[j * 16 + l] >> 4]));
    }
  }
}

// Calls f.template operator()<T>() for the block type `type`; false when it is not one.
template <typename F>
bool dispatch_block_type(TensorType type, F&& f) {
  switch (type) {
#define TERN_CASE(T)                        \
  case TensorType::T:                       \
    f.template operator()<TensorType::T>(); \
    return true;
    TERN_CASE(Q4_0)
    TERN_CASE(Q4_1)
    TERN_CASE(Q5_0)
    TERN_CASE(Q5_1)
    TERN_CASE(Q8_0)
    TERN_CASE(IQ4_NL)
    TERN_CASE(Q2_K)
    TERN_CASE(Q3_K)
    TERN_CASE(Q4_K)
    TERN_CASE(Q5_K)
    TERN_CASE(Q6_K)
    TERN_CASE(IQ4_XS)
#undef TERN_CASE
    default:
      return false;
  }
}

}  // namespace tern::cuda

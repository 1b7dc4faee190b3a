// GGUF/GGML quantized block layouts, byte for byte as they sit in a GGUF file (little-endian).
// Every scale stored as `uint16_t` is an IEEE half. Element order inside a block is documented per
// type; the dequantizers in cpu/dequantize.cpp are the executable form of these comments.
#pragma once

#include <cstdint>

namespace tern::quant {

inline constexpr int kQK = 32;    // elements per block of the 32-block types
inline constexpr int kQKK = 256;  // elements per super-block of the K-quants and IQ4_XS

// Q4_0: x[i] = d * (q[i] - 8); q[i] = low nibble of qs[i] for i < 16, high nibble of qs[i-16].
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
// Q4_1: x[i] = d * q[i] + m; nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
// Q5_0: x[i] = d * (q[i] - 16); low 4 bits as Q4_0, bit 4 = bit i of the little-endian u32 qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
// Q5_1: x[i] = d * q[i] + m; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// Q8_0: x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
// IQ4_NL: x[i] = d * kIQ4Values[q[i]]; nibble order as Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};

// Q2_K: 16 sub-blocks of 16. x[e] = d * (sc[j] & 15) * q[e] - dmin * (sc[j] >> 4), j = e / 16;
// e = h*128 + k*32 + l (h < 2, k < 4, l < 32): q[e] = (qs[h*32 + l] >> 2k) & 3.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales (packed, see q3k_scale) biased by 32.
// e = h*128 + k*32 + l: low = (qs[h*32 + l] >> 2k) & 3, and 4 is subtracted unless bit (e/32) of
// hmask[e % 32] is set. x[e] = d * scale[e/16] * q[e].
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes (see k_scale_min).
// e = c*64 + s*32 + l: q[e] = (qs[c*32 + l] >> 4s) & 15. x[e] = d*sc[e/32]*q[e] - dmin*m[e/32].
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// Q5_K: as Q4_K plus bit 4 of q[e] = (qh[e % 32] >> (e / 32)) & 1.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// Q6_K: 16 sub-blocks of 16, int8 scales. e = h*128 + r: low 4 bits = ql[h*64 + r%64] >> 4*(r/64),
// high 2 bits = qh[h*32 + r%32] >> 2*(r/32). x[e] = d * scales[e/16] * (q[e] - 32).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// IQ4_XS: 8 sub-blocks of 32, 6-bit scales biased by 32: low 4 bits in scales_l (nibble j%2 of
// byte j/2), high 2 bits = (scales_h >> 2j) & 3. e = b*32 + s*16 + l: q = (qs[b*16 + l] >> 4s)
// & 15. x[e] = d * (scale[b] - 32) * kIQ4Values[q[e]].
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_XS) == 136);

// The 16 non-linear levels of IQ4_NL / IQ4_XS.
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// Scale and min j (< 8) of the 12-byte packed Q4_K/Q5_K scales: bytes 0-3 hold the low 6 bits of
// scales 0-3, bytes 4-7 those of mins 0-3; for j >= 4 the low 4 bits come from byte 8 + j-4
// (scale: low nibble, min: high nibble) and the top 2 bits from bits 6-7 of bytes j-4 / j.
static inline void k_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Signed scale j (< 16) of Q3_K: low 4 bits = nibble j/8 of byte j%8, top 2 bits = bits 2*(j/4)
// of byte 8 + j%4; minus 32.
static inline int q3k_scale(const uint8_t* s, int j) {
  int low = (s[j % 8] >> (4 * (j / 8))) & 0xF;
  int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace tern::quant

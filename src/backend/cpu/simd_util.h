// Internal helpers shared by the SIMD kernel files (dot_avx2.cpp, dot_avx512_q.cpp,
// dot_avx512_k.cpp). Include it ONLY from files built with at least -mavx2 -mfma -mf16c: every
// function here has internal linkage, so each SIMD file gets its own copy compiled with its own
// flags and nothing built for AVX-512 can be picked by the linker for code that runs elsewhere.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tern::cpu::detail {
namespace {

inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

// Software prefetch this many bytes ahead of the weight stream. The hardware streamer stops at
// 4 KiB page boundaries (weights are mmapped in small pages), which left the integer kernels at
// ~45% of read bandwidth on 2 cores; prefetching across pages takes them to ~0.8-1.0.
#ifndef TERN_PREFETCH_BYTES
#define TERN_PREFETCH_BYTES 4096
#endif
constexpr int64_t kPrefetchBytes = TERN_PREFETCH_BYTES;

inline void prefetch_lines(const void* p, int lines) {
  const char* c = static_cast<const char*>(p) + kPrefetchBytes;
  for (int k = 0; k < lines; ++k) _mm_prefetch(c + 64 * k, _MM_HINT_T0);
}

inline float hsum256(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Signed int8 . int8 over 32 lanes -> 8 int32 partial sums (|w| . x with w's signs: vpmaddubsw
// takes unsigned bytes first; 2 x 128 x 127 stays inside int16).
inline __m256i dot_i8(__m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// 4 activation bytes in every 32-bit lane.
inline __m256i broadcast4(const int8_t* p) {
  return _mm256_set1_epi32(static_cast<int32_t>(load_u32(reinterpret_cast<const uint8_t*>(p))));
}

// The 32 codes of a Q4_0-style block in element order, [low nibbles | high nibbles], each byte
// still holding both nibbles (mask with 0x0F).
inline __m256i nibbles_raw(const uint8_t* qs) {
  const __m128i q = load128(qs);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
}

// The 16 signed scales (-32..31) of a Q3_K block as bytes.
inline __m128i q3k_scales(const uint8_t* s) {
  uint32_t w[3];
  __builtin_memcpy(w, s, 12);
  const uint32_t lo = 0x0f0f0f0fu, hi = 0x03030303u;
  const __m128i v =
      _mm_setr_epi32(static_cast<int>((w[0] & lo) | ((w[2] & hi) << 4)),
                     static_cast<int>((w[1] & lo) | (((w[2] >> 2) & hi) << 4)),
                     static_cast<int>(((w[0] >> 4) & lo) | (((w[2] >> 4) & hi) << 4)),
                     static_cast<int>(((w[1] >> 4) & lo) | (((w[2] >> 6) & hi) << 4)));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// The 8 scales and 8 mins (6 bits each) of a Q4_K/Q5_K block, as two little-endian u64 of bytes.
inline void k_scales_mins(const uint8_t* scales, uint64_t* sc, uint64_t* mn) {
  uint32_t s[3];
  __builtin_memcpy(s, scales, 12);
  *sc = (s[0] & 0x3f3f3f3fu) |
        static_cast<uint64_t>((s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u)) << 32;
  *mn = (s[1] & 0x3f3f3f3fu) |
        static_cast<uint64_t>(((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u)) << 32;
}

// IQ4_XS scale j (0..7) minus its bias of 32.
inline int iq4xs_scale(const uint8_t* scales_l, uint16_t scales_h, int j) {
  const int low = (scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
  const int high = (scales_h >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace
}  // namespace tern::cpu::detail

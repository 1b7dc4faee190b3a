// AVX-512 (F/BW/VL/DQ + VNNI) dot kernels: one weight row . prepared activations (kernels.h).
// Reads each weight byte once and the activation row from L1/L2; writes one float.
// Specialised: Q8_0, Q4_0 (vpdpbusd), Q4_K, Q6_K (vpmaddubsw + vpdpwssd), F32/F16/BF16 (fp32 FMA);
// other types fall back to AVX2/scalar. Measured fraction of all-core read bandwidth, 2 Sapphire
// Rapids cores, DRAM-resident 4096x4096..4096x14336 weights
// (bench/results/2026-12-02-cpu-matvec.md, shared, noisy machine): Q4_K 0.69-0.90, Q6_K 0.90-1.0,
// Q8_0 0.89-0.96, Q4_0 0.72-0.86, BF16 0.82-0.87. Built with -mavx512*: only intrinsics and this
// file's own internal functions are used here, so no inline function compiled with these flags can
// leak into code that runs on other CPUs. GCC 12 reports its own _mm512_undefined_* helpers
// (self-initialised on purpose) as uninitialised once they are inlined here; the warning is about
// the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

// Software prefetch this many bytes ahead of the weight stream. The hardware streamer stops at
// 4 KiB page boundaries (weights are mmapped in small pages), which left the integer kernels at
// ~45% of read bandwidth on 2 cores; prefetching across pages takes them to the figures above.
#ifndef TERN_PREFETCH_BYTES
#define TERN_PREFETCH_BYTES 4096
#endif
constexpr int64_t kPrefetchBytes = TERN_PREFETCH_BYTES;

void prefetch_lines(const void* p, int lines) {
  const char* c = static_cast<const char*>(p) + kPrefetchBytes;
  for (int k = 0; k < lines; ++k) _mm_prefetch(c + 64 * k, _MM_HINT_T0);
}

float hsum256(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// One 32-block per step with 256-bit VNNI: pairing two 34-byte blocks in a zmm measured slower.
float dot_q8_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ8_0*>(w);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQK; ++i) {
    prefetch_lines(b + i, 1);
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
    // |w| (unsigned) times x carrying w's sign.
    const __m256i dot =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc);
}

// The 32 codes of a Q4_0-style block in element order: [low nibbles | high nibbles].
__m256i nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
}

float dot_q4_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ4_0*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQK; ++i) {
    prefetch_lines(b + i, 1);
    const __m256i wv = _mm256_and_si256(nibbles(b[i].qs), m4);
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
    // sum (q - 8) x = sum q x - 8 sum x: each of the 8 lanes starts at -sum x.
    const __m256i dot = _mm256_dpbusd_epi32(_mm256_set1_epi32(-x.isum[i]), wv, xv);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc);
}

// Shuffle mask that spreads byte j0 over int16 lanes 0-15 and byte j1 over lanes 16-31 (zero
// high bytes), for a source that holds the same 8 bytes in every 64-bit half.
__m512i spread_mask(int j0, int j1) {
  return _mm512_mask_blend_epi32(
      0xFF00, _mm512_set1_epi32(static_cast<int>(0x80008000u | (j0 << 16) | j0)),
      _mm512_set1_epi32(static_cast<int>(0x80008000u | (j1 << 16) | j1)));
}

float dot_q4_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ4_K*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // Chunk c of 32 qs bytes holds sub-block 2c (low nibbles) and 2c+1 (high nibbles), which are the
  // 64 contiguous activations x[64c, 64c+64): broadcast the chunk, shift the upper half by 4.
  const __m512i sc_mask[4] = {spread_mask(0, 1), spread_mask(2, 3), spread_mask(4, 5),
                              spread_mask(6, 7)};
  const __m256i min_mask =
      _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4,
                       -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_min = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_lines(b + i, 3);
    uint32_t s[3];
    __builtin_memcpy(s, b[i].scales, 12);
    const uint64_t sc = (s[0] & 0x3f3f3f3fu) |
                        static_cast<uint64_t>((s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u))
                            << 32;
    const uint64_t mn =
        (s[1] & 0x3f3f3f3fu) |
        static_cast<uint64_t>(((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u)) << 32;
    const __m512i sc_bytes = _mm512_set1_epi64(static_cast<long long>(sc));
    const int8_t* q8 = x.qs + i * kQKK;
    __m512i sums0 = _mm512_setzero_si512(), sums1 = _mm512_setzero_si512();
    for (int c = 0; c < 4; c += 2) {
      const __m512i q0 = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c)));
      const __m512i q1 = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c + 32)));
      const __m512i n0 = _mm512_and_si512(_mm512_mask_srli_epi16(q0, 0xFFFF0000u, q0, 4), m4);
      const __m512i n1 = _mm512_and_si512(_mm512_mask_srli_epi16(q1, 0xFFFF0000u, q1, 4), m4);
      sums0 = _mm512_dpwssd_epi32(sums0, _mm512_maddubs_epi16(n0, _mm512_loadu_si512(q8 + 64 * c)),
                                  _mm512_shuffle_epi8(sc_bytes, sc_mask[c]));
      sums1 =
          _mm512_dpwssd_epi32(sums1, _mm512_maddubs_epi16(n1, _mm512_loadu_si512(q8 + 64 * c + 64)),
                              _mm512_shuffle_epi8(sc_bytes, sc_mask[c + 1]));
    }
    const __m256i mins16 =
        _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(mn)), min_mask);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums + i * 16));
    const __m256i min_prod = _mm256_madd_epi16(bsums, mins16);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(sums0, sums1)),
                          _mm512_set1_ps(h2f(b[i].d) * x.d[i]), acc);
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_prod), _mm256_set1_ps(h2f(b[i].dmin) * x.d[i]),
                              acc_min);
  }
  const __m128 m4s = _mm_add_ps(_mm256_castps256_ps128(acc_min), _mm256_extractf128_ps(acc_min, 1));
  const __m128 m2s = _mm_add_ps(m4s, _mm_movehl_ps(m4s, m4s));
  return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(_mm_add_ss(m2s, _mm_movehdup_ps(m2s)));
}

__m512i load_index(const int16_t* v) {
  return _mm512_loadu_si512(v);
}

alignas(64) constexpr int16_t kQ6Index[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5,
     6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8,  8,  8,  8,  8,  8,  8,  8,  9,  9,  9,  9,  9,  9,  9,  9,
     10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

float dot_q6_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m2 = _mm512_set1_epi8(0x03);
  // Per-16-bit-lane right shifts: qh bits 0-1 / 2-3 for the low-nibble codes, 4-5 / 6-7 for high.
  const __m512i shift_a =
      _mm512_mask_blend_epi32(0xFF00, _mm512_setzero_si512(), _mm512_set1_epi16(2));
  const __m512i shift_b =
      _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi16(4), _mm512_set1_epi16(6));
  const __m512i index[4] = {load_index(kQ6Index[0]), load_index(kQ6Index[1]),
                            load_index(kQ6Index[2]), load_index(kQ6Index[3])};
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_lines(b + i, 4);
    const __m256i scales16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales)));
    const __m512i scales512 = _mm512_castsi256_si512(scales16);
    const int8_t* q8 = x.qs + i * kQKK;
    __m512i sums = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b[i].ql + 64 * h);
      const __m256i qh256 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
      const __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(qh256), qh256, 1);
      const __m512i qa = _mm512_or_si512(
          _mm512_and_si512(ql, m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_a), m2), 4));
      const __m512i qb = _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_b), m2), 4));
      const __m512i xa = _mm512_loadu_si512(q8 + 128 * h);
      const __m512i xb = _mm512_loadu_si512(q8 + 128 * h + 64);
      sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(qa, xa),
                                 _mm512_permutexvar_epi16(index[2 * h], scales512));
      sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(qb, xb),
                                 _mm512_permutexvar_epi16(index[2 * h + 1], scales512));
    }
    // q - 32: subtract 32 * sum_j scale_j * bsum_j.
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums + i * 16));
    const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5);
    const __m256i total = _mm256_sub_epi32(
        _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1)), bias);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Float weights: 32 elements per step into two accumulators, scalar tail.
template <typename Load>
float dot_float(const void* w, const float* x, int64_t cols, Load load,
                float (*one)(const void*, int64_t)) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= cols; i += 32) {
    acc0 = _mm512_fmadd_ps(load(w, i), _mm512_loadu_ps(x + i), acc0);
    acc1 = _mm512_fmadd_ps(load(w, i + 16), _mm512_loadu_ps(x + i + 16), acc1);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  for (; i < cols; ++i) sum += one(w, i) * x[i];
  return sum;
}

float f32_at(const void* w, int64_t i) {
  return static_cast<const float*>(w)[i];
}
float f16_at(const void* w, int64_t i) {
  return h2f(static_cast<const uint16_t*>(w)[i]);
}
float bf16_at(const void* w, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

float dot_f32(const void* w, const Acts& x, int64_t cols) {
  return dot_float(
      w, x.f32, cols,
      [](const void* p, int64_t i) { return _mm512_loadu_ps(static_cast<const float*>(p) + i); },
      f32_at);
}

float dot_f16(const void* w, const Acts& x, int64_t cols) {
  return dot_float(
      w, x.f32, cols,
      [](const void* p, int64_t i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
      },
      f16_at);
}

float dot_bf16(const void* w, const Acts& x, int64_t cols) {
  return dot_float(
      w, x.f32, cols,
      [](const void* p, int64_t i) {
        const __m256i v = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
      },
      bf16_at);
}

}  // namespace

DotFn dot_avx512(TensorType type) {
  switch (type) {
    case TensorType::F32:
      return dot_f32;
    case TensorType::F16:
      return dot_f16;
    case TensorType::BF16:
      return dot_bf16;
    case TensorType::Q4_0:
      return dot_q4_0;
    case TensorType::Q8_0:
      return dot_q8_0;
    case TensorType::Q4_K:
      return dot_q4_k;
    case TensorType::Q6_K:
      return dot_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace tern::cpu::detail

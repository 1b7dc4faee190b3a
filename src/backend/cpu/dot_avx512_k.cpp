// AVX-512 (F/BW/VL/DQ + VNNI) dot kernels for the 256-element super-block types: one weight row .
// prepared activations (kernels.h, Q8x256 format). Reads each weight byte once and the activation
// row from L1/L2; writes one float.
// Kernels: Q4_K / Q5_K (codes 0..31, vpmaddubsw + vpdpwssd against the 6-bit scales, mins through
// the 16-element activation sums), Q6_K / Q3_K / Q2_K (same, scales spread with vpermw), IQ4_XS
// (table value + 128 through vpdpbusd, int32 scale multiply). Measured
// (bench/results/cpu-kernels.md, 2 Sapphire Rapids cores, shared and noisy): fraction of
// all-core read bandwidth, DRAM-resident weights: Q4_K 0.69-0.90, Q6_K 0.90-1.0 (quiet run); Q5_K
// 0.47, Q3_K 0.46, IQ4_XS 0.45, Q2_K 0.39 (run under load 3-6: lower bounds). Single core in cache:
// Q2_K 12.5, Q3_K 14, Q4_K 23, Q5_K 24, Q6_K 29, IQ4_XS 15 GB/s, i.e. 2-5x a core's share of DRAM
// bandwidth. Built with -mavx512*: only intrinsics and this file's own internal functions are used.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_util.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

// Shuffle mask that spreads byte j0 over int16 lanes 0-15 and byte j1 over lanes 16-31 (zero
// high bytes), for a source that holds the same 8 bytes in every 64-bit half.
__m512i spread_mask(int j0, int j1) {
  return _mm512_mask_blend_epi32(
      0xFF00, _mm512_set1_epi32(static_cast<int>(0x80008000u | (j0 << 16) | j0)),
      _mm512_set1_epi32(static_cast<int>(0x80008000u | (j1 << 16) | j1)));
}

// Byte k of a u64 (k < 8) in int16 lanes 2k and 2k+1 of a 256-bit vector: the K-quant mins
// against the 16 sums of 16 activations.
__m256i min_mask() {
  return _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4,
                          -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
}

// Q4_K and (kHigh) Q5_K.
template <typename Block, bool kHigh>
float dot_qk_affine(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const Block*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi8(16);
  // Chunk c of 32 qs bytes holds sub-block 2c (low nibbles) and 2c+1 (high nibbles), which are the
  // 64 contiguous activations x[64c, 64c+64): broadcast the chunk, shift the upper half by 4.
  const __m512i sc_mask[4] = {spread_mask(0, 1), spread_mask(2, 3), spread_mask(4, 5),
                              spread_mask(6, 7)};
  const __m256i mmask = min_mask();
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_min = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_lines(b + i, static_cast<int>((sizeof(Block) + 63) / 64));
    uint64_t sc, mn;
    k_scales_mins(b[i].scales, &sc, &mn);
    const __m512i sc_bytes = _mm512_set1_epi64(static_cast<long long>(sc));
    const int8_t* q8 = x.qs + i * kQKK;
    __m512i qh;
    if constexpr (kHigh) qh = _mm512_broadcast_i64x4(load256(b[i].qh));
    __m512i sums0 = _mm512_setzero_si512(), sums1 = _mm512_setzero_si512();
    for (int c = 0; c < 4; c += 2) {
      const __m512i q0 = _mm512_broadcast_i64x4(load256(b[i].qs + 32 * c));
      const __m512i q1 = _mm512_broadcast_i64x4(load256(b[i].qs + 32 * c + 32));
      __m512i n0 = _mm512_and_si512(_mm512_mask_srli_epi16(q0, 0xFFFF0000u, q0, 4), m4);
      __m512i n1 = _mm512_and_si512(_mm512_mask_srli_epi16(q1, 0xFFFF0000u, q1, 4), m4);
      if constexpr (kHigh) {
        // Bit 4 of sub-block j's codes is bit j of qh[l].
        const auto bits = [](int j) {
          return _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(static_cast<char>(1 << j)),
                                         _mm512_set1_epi8(static_cast<char>(1 << (j + 1))));
        };
        n0 = _mm512_mask_add_epi8(n0, _mm512_test_epi8_mask(qh, bits(2 * c)), n0, sixteen);
        n1 = _mm512_mask_add_epi8(n1, _mm512_test_epi8_mask(qh, bits(2 * c + 2)), n1, sixteen);
      }
      sums0 = _mm512_dpwssd_epi32(sums0, _mm512_maddubs_epi16(n0, _mm512_loadu_si512(q8 + 64 * c)),
                                  _mm512_shuffle_epi8(sc_bytes, sc_mask[c]));
      sums1 =
          _mm512_dpwssd_epi32(sums1, _mm512_maddubs_epi16(n1, _mm512_loadu_si512(q8 + 64 * c + 64)),
                              _mm512_shuffle_epi8(sc_bytes, sc_mask[c + 1]));
    }
    const __m256i mins16 =
        _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(mn)), mmask);
    const __m256i bsums = load256(x.bsums + i * 16);
    const __m256i min_prod = _mm256_madd_epi16(bsums, mins16);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(sums0, sums1)),
                          _mm512_set1_ps(h2f(b[i].d) * x.d[i]), acc);
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_prod), _mm256_set1_ps(h2f(b[i].dmin) * x.d[i]),
                              acc_min);
  }
  return _mm512_reduce_add_ps(acc) - hsum256(acc_min);
}

// Row r: int16 lanes 8k..8k+7 (k < 4) take scale 4r + k, i.e. the sub-blocks of 16 covered by the
// 64 codes of one zmm after vpmaddubsw.
alignas(64) constexpr int16_t kSubIndex[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5,
     6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8,  8,  8,  8,  8,  8,  8,  8,  9,  9,  9,  9,  9,  9,  9,  9,
     10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

struct SubIndex {
  __m512i v[4];
  SubIndex() {
    for (int r = 0; r < 4; ++r) v[r] = _mm512_load_si512(kSubIndex[r]);
  }
};

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
  const SubIndex index;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_lines(b + i, 4);
    const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b[i].scales));
    const __m512i scales512 = _mm512_castsi256_si512(scales16);
    const int8_t* q8 = x.qs + i * kQKK;
    __m512i sums = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b[i].ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(load256(b[i].qh + 32 * h));
      const __m512i qa = _mm512_or_si512(
          _mm512_and_si512(ql, m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_a), m2), 4));
      const __m512i qb = _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift_b), m2), 4));
      const __m512i xa = _mm512_loadu_si512(q8 + 128 * h);
      const __m512i xb = _mm512_loadu_si512(q8 + 128 * h + 64);
      sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(qa, xa),
                                 _mm512_permutexvar_epi16(index.v[2 * h], scales512));
      sums = _mm512_dpwssd_epi32(sums, _mm512_maddubs_epi16(qb, xb),
                                 _mm512_permutexvar_epi16(index.v[2 * h + 1], scales512));
    }
    // q - 32: subtract 32 * sum_j scale_j * bsum_j.
    const __m256i bsums = load256(x.bsums + i * 16);
    const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5);
    const __m256i total = _mm256_sub_epi32(
        _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1)), bias);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc);
}

// Q2_K and Q3_K: element e = h*128 + k*32 + l takes bits 2k..2k+1 of byte h*32 + l. One zmm holds
// groups k and k+1 of half h: the 32 bytes broadcast, shifted by 2k (low half) / 2k+2 (high half).
__m512i two_bit_codes(const uint8_t* qs, int k) {
  const __m512i q = _mm512_broadcast_i64x4(load256(qs));
  const __m512i shift =
      _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi16(static_cast<short>(2 * k)),
                              _mm512_set1_epi16(static_cast<short>(2 * k + 2)));
  return _mm512_and_si512(_mm512_srlv_epi16(q, shift), _mm512_set1_epi8(3));
}

float dot_q3_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ3_K*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i four = _mm512_set1_epi8(4);
  const SubIndex index;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_lines(b + i, 2);
    const __m256i scales16 = _mm256_cvtepi8_epi16(q3k_scales(b[i].scales));
    const __m512i scales512 = _mm512_castsi256_si512(scales16);
    const __m512i hm = _mm512_broadcast_i64x4(load256(b[i].hmask));
    const int8_t* q8 = x.qs + i * kQKK;
    __m512i sums = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; k += 2) {
        // Codes stored as low + 4 * hmask bit = q + 4 (0..7); the 4 comes off with the bsums.
        const int g = 4 * h + k;  // hmask bit of the low half; g + 1 for the high half
        const __m512i bits =
            _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(static_cast<char>(1 << g)),
                                    _mm512_set1_epi8(static_cast<char>(1 << (g + 1))));
        __m512i q = two_bit_codes(b[i].qs + 32 * h, k);
        q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hm, bits), q, four);
        sums = _mm512_dpwssd_epi32(
            sums, _mm512_maddubs_epi16(q, _mm512_loadu_si512(q8 + 128 * h + 32 * k)),
            _mm512_permutexvar_epi16(index.v[2 * h + k / 2], scales512));
      }
    }
    const __m256i bsums = load256(x.bsums + i * 16);
    const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 2);
    const __m256i total = _mm256_sub_epi32(
        _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1)), bias);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc);
}

float dot_q2_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ2_K*>(w);
  const int64_t nb = cols / kQKK;
  const SubIndex index;
  const __m128i m4 = _mm_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_lines(b + i, 2);
    const __m128i packed = load128(b[i].scales);
    const __m256i scales16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4));
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
    const __m512i scales512 = _mm512_castsi256_si512(scales16);
    const int8_t* q8 = x.qs + i * kQKK;
    __m512i sums = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; k += 2) {
        const __m512i q = two_bit_codes(b[i].qs + 32 * h, k);
        sums = _mm512_dpwssd_epi32(
            sums, _mm512_maddubs_epi16(q, _mm512_loadu_si512(q8 + 128 * h + 32 * k)),
            _mm512_permutexvar_epi16(index.v[2 * h + k / 2], scales512));
      }
    }
    const __m256i bsums = load256(x.bsums + i * 16);
    const __m256i total =
        _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins16)),
                              _mm256_set1_ps(h2f(b[i].dmin) * x.d[i]), acc_min);
  }
  return hsum256(acc) - hsum256(acc_min);
}

// IQ4_XS: sub-block s (< 8) is 16 qs bytes, low nibbles then high nibbles. One zmm holds sub-blocks
// 2p and 2p+1; table value + 128 is unsigned, and 128 * (sum of the sub-block's x) comes off with
// the bsums. vpdpbusd gives int32 lanes 0-7 for sub-block 2p, 8-15 for 2p+1, times their scales.
float dot_iq4_xs(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockIQ4_XS*>(w);
  const int64_t nb = cols / kQKK;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = _mm512_broadcast_i32x4(_mm_add_epi8(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values)), _mm_set1_epi8(-128)));
  // Sub-block index of each int32 lane for pair p: 2p in lanes 0-7, 2p+1 in lanes 8-15.
  const __m512i pair_index[4] = {
      _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(0), _mm512_set1_epi32(1)),
      _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2), _mm512_set1_epi32(3)),
      _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(4), _mm512_set1_epi32(5)),
      _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(6), _mm512_set1_epi32(7))};
  // Scale j in int16 lanes 2j, 2j+1 (against the 16 bsums).
  const __m256i pairs16 = _mm256_setr_epi16(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m128i nib_shift = _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4);
  const __m128i h_shift = _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14);
  const __m128i low_index = _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_lines(b + i, 2);
    // Scales: low nibbles from scales_l, 2 high bits from scales_h, minus 32; int16 lanes 0-7.
    const __m128i sl =
        _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(load_u32(b[i].scales_l))), low_index);
    const __m128i low = _mm_and_si128(_mm_srlv_epi16(sl, nib_shift), _mm_set1_epi16(0xF));
    const __m128i high =
        _mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16(static_cast<short>(b[i].scales_h)), h_shift),
                      _mm_set1_epi16(3));
    const __m128i sc16 =
        _mm_sub_epi16(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi16(32));
    const __m512i sc32 = _mm512_cvtepi16_epi32(_mm256_castsi128_si256(sc16));
    const int8_t* q8 = x.qs + i * kQKK;
    __m512i sums = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      const __m256i q = load256(b[i].qs + 32 * p);
      // [lo(2p), lo(2p+1), hi(2p), hi(2p+1)] -> [lo(2p), hi(2p), lo(2p+1), hi(2p+1)]
      const __m512i both =
          _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
      const __m512i codes =
          _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), m4);
      const __m512i dot =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi8(table, codes),
                              _mm512_loadu_si512(q8 + 64 * p));
      sums = _mm512_add_epi32(
          sums, _mm512_mullo_epi32(dot, _mm512_permutexvar_epi32(pair_index[p], sc32)));
    }
    const __m256i sc_pairs = _mm256_permutexvar_epi16(pairs16, _mm256_castsi128_si256(sc16));
    const __m256i bias =
        _mm256_slli_epi32(_mm256_madd_epi16(load256(x.bsums + i * 16), sc_pairs), 7);
    const __m256i total = _mm256_sub_epi32(
        _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1)), bias);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc);
}

}  // namespace

DotFn dot_avx512_k(TensorType type) {
  switch (type) {
    case TensorType::Q2_K:
      return dot_q2_k;
    case TensorType::Q3_K:
      return dot_q3_k;
    case TensorType::Q4_K:
      return dot_qk_affine<BlockQ4_K, false>;
    case TensorType::Q5_K:
      return dot_qk_affine<BlockQ5_K, true>;
    case TensorType::Q6_K:
      return dot_q6_k;
    case TensorType::IQ4_XS:
      return dot_iq4_xs;
    default:
      return nullptr;
  }
}

}  // namespace tern::cpu::detail

// AVX2 (+FMA, F16C) dot kernels: one weight row . prepared activations (kernels.h).
// Reads each weight byte once and the activation row from L1/L2; writes one float. Kernels (all
// vpmaddubsw + vpmaddwd): Q8_0, IQ4_NL, IQ4_XS (signed levels via vpsignb), Q4_0, Q4_1, Q5_0,
// Q5_1 (unsigned codes, offset and min through the activation block sums), Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K (per-sub-block int16 scales, mins/offsets through the 16-element bsums), F32/F16/BF16 (fp32
// FMA). Measured single core in cache (bench/results/cpu-kernels.md): Q2_K/Q3_K 7.2,
// Q4_0 12, Q4_1 17, Q5_0 13, Q5_1 15, IQ4_NL 12.6, IQ4_XS 14, Q4_K-Q6_K 18-19, BF16 23, Q8_0 30
// GB/s, i.e. 1.1-5x a core's share of DRAM bandwidth; the DRAM fraction of this path has not been
// measured yet (TERN_CPU_PATH=avx2 bench_cpu_matvec). Built with -mavx2: only intrinsics and this
// file's internal functions are used here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_util.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

float dot_q8_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ8_0*>(w);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQK; ++i) {
    prefetch_lines(b + i, 1);
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_i8(wv, xv)), _mm256_set1_ps(h2f(b[i].d) * x.d[i]),
                          acc);
  }
  return hsum256(acc);
}

float dot_q4_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ4_0*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float bias = 0.0f;
  for (int64_t i = 0; i < cols / kQK; ++i) {
    prefetch_lines(b + i, 1);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m256i wv = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1), m4);
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + i * kQK));
    const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, xv), _mm256_set1_epi16(1));
    const float scale = h2f(b[i].d) * x.d[i];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_set1_ps(scale), acc);
    bias +=
        scale * static_cast<float>(x.isum[i]);  // the -8 offset: sum (q-8) x = sum q x - 8 sum x
  }
  return hsum256(acc) - 8.0f * bias;
}

__m256i ones16() {
  return _mm256_set1_epi16(1);
}

// Unsigned codes (0..31) . int8 activations -> 8 int32 partial sums (no saturation: 31*127*2 fits
// in int16).
__m256i dot_u8(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones16());
}

// 0xFF in byte e where bit e of the 32-bit word is set.
__m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(0x8040201008040201ll);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

// Q4_1 / Q5_0 / Q5_1: x[e] = d * (u[e] - kBias) [+ m], u unsigned. One vcvtph2ps of {d, m} (or
// {d, d}) times the activation pair {d_x, d_x * isum} (Acts::ds) gives the block scale and the
// min / offset term together (as in dot_avx512_q.cpp); two accumulators.
template <typename Block, int kBias, bool kFive, bool kMin>
float dot_unsigned32(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const Block*>(w);
  const int64_t nb = cols / kQK;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m128 acc_off = _mm_setzero_ps();
  auto step = [&](int64_t i, int k) {
    __m256i u = _mm256_and_si256(nibbles_raw(b[i].qs), m4);
    if constexpr (kFive) {
      u = _mm256_or_si256(u,
                          _mm256_and_si256(bits_to_bytes(load_u32(b[i].qh)), _mm256_set1_epi8(16)));
    }
    __m128 dm;
    if constexpr (kMin) {
      dm = _mm_cvtph_ps(
          _mm_cvtsi32_si128(static_cast<int>(load_u32(reinterpret_cast<const uint8_t*>(&b[i])))));
    } else {
      dm = _mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(b[i].d)));
    }
    const __m128 ds = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(x.ds + 2 * i)));
    const __m128 prod = _mm_mul_ps(dm, ds);
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8(u, load256(x.qs + i * kQK))),
                             _mm256_broadcastss_ps(prod), acc[k]);
    acc_off = _mm_add_ps(acc_off, prod);
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    prefetch_lines(b + i, 1);
    step(i, 0);
    step(i + 1, 1);
  }
  if (i < nb) step(i, 0);
  const float off = _mm_cvtss_f32(_mm_movehdup_ps(acc_off));
  const float dots = hsum256(_mm256_add_ps(acc[0], acc[1]));
  return kMin ? dots + off : dots - static_cast<float>(kBias) * off;
}

// The 16 IQ4 levels in both 128-bit lanes (for vpshufb).
__m256i iq4_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values)));
}

float dot_iq4_nl(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockIQ4_NL*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i table = iq4_table();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQK; ++i) {
    prefetch_lines(b + i, 1);
    const __m256i v = _mm256_shuffle_epi8(table, _mm256_and_si256(nibbles_raw(b[i].qs), m4));
    const __m256i xv = load256(x.qs + i * kQK);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_i8(v, xv)), _mm256_set1_ps(h2f(b[i].d) * x.d[i]),
                          acc);
  }
  return hsum256(acc);
}

float dot_iq4_xs(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockIQ4_XS*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i table = iq4_table();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    prefetch_lines(b + i, 2);
    const int8_t* q8 = x.qs + i * kQKK;
    __m256i sums = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i v =
          _mm256_shuffle_epi8(table, _mm256_and_si256(nibbles_raw(b[i].qs + 16 * j), m4));
      const __m256i xv = load256(q8 + 32 * j);
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xv, v));
      const int sc = iq4xs_scale(b[i].scales_l, b[i].scales_h, j);
      sums =
          _mm256_add_epi32(sums, _mm256_madd_epi16(p16, _mm256_set1_epi16(static_cast<short>(sc))));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc);
}

// int16 scale s0 in lanes 0-7 and s1 in lanes 8-15.
__m256i scale_pair(int s0, int s1) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(static_cast<short>(s0))),
                                 _mm_set1_epi16(static_cast<short>(s1)), 1);
}

// Q2_K (kQ3 = false) and Q3_K: element e = h*128 + k*32 + l takes bits 2k..2k+1 of qs[h*32 + l];
// Q3_K adds 4 when bit 4h+k of hmask[l] is set (codes q + 4 in 0..7; the 4 comes off with bsums).
template <bool kQ3>
float dot_q23_k(const void* w, const Acts& x, int64_t cols) {
  using Block = std::conditional_t<kQ3, BlockQ3_K, BlockQ2_K>;
  const auto* b = static_cast<const Block*>(w);
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    prefetch_lines(b + i, 2);
    alignas(16) int8_t sc[16];
    __m256i mins16 = _mm256_setzero_si256();
    __m256i hm = _mm256_setzero_si256();
    if constexpr (kQ3) {
      _mm_store_si128(reinterpret_cast<__m128i*>(sc), q3k_scales(b[i].scales));
      hm = load256(b[i].hmask);
    } else {
      const __m128i packed = load128(b[i].scales);
      _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_and_si128(packed, _mm_set1_epi8(0x0F)));
      mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
    }
    const int8_t* q8 = x.qs + i * kQKK;
    __m256i sums = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      __m256i qs = load256(b[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        __m256i q = _mm256_and_si256(qs, m3);
        qs = _mm256_srli_epi16(qs, 2);
        if constexpr (kQ3) {
          q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(hm, _mm256_set1_epi8(1)), 2));
          hm = _mm256_srli_epi16(hm, 1);
        }
        const int j = 8 * h + 2 * k;
        const __m256i p16 = _mm256_maddubs_epi16(q, load256(q8 + 128 * h + 32 * k));
        sums = _mm256_add_epi32(sums, _mm256_madd_epi16(p16, scale_pair(sc[j], sc[j + 1])));
      }
    }
    const __m256i bsums = load256(x.bsums + i * 16);
    if constexpr (kQ3) {
      const __m256i scales16 =
          _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)));
      sums = _mm256_sub_epi32(sums, _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 2));
    } else {
      acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins16)),
                                _mm256_set1_ps(h2f(b[i].dmin) * x.d[i]), acc_min);
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc) - hsum256(acc_min);
}

// Q4_K and (kHigh) Q5_K: bit 4 of sub-block j's codes is bit j of qh[l].
template <typename Block, bool kHigh>
float dot_qk_affine(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const Block*>(w);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i min_mask =
      _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4,
                       -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    prefetch_lines(b + i, static_cast<int>((sizeof(Block) + 63) / 64));
    uint32_t s[3];
    __builtin_memcpy(s, b[i].scales, 12);
    const uint32_t sc_words[2] = {s[0] & 0x3f3f3f3fu,
                                  (s[2] & 0x0f0f0f0fu) | ((s[0] >> 2) & 0x30303030u)};
    const uint64_t mn =
        (s[1] & 0x3f3f3f3fu) |
        static_cast<uint64_t>(((s[2] >> 4) & 0x0f0f0f0fu) | ((s[1] >> 2) & 0x30303030u)) << 32;
    uint8_t sc[8];
    __builtin_memcpy(sc, sc_words, 8);
    const int8_t* q8 = x.qs + i * kQKK;
    __m256i sums = _mm256_setzero_si256();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kHigh) qh = load256(b[i].qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i qv = load256(b[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(qv, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m4);
      if constexpr (kHigh) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
        hi = _mm256_or_si256(hi,
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * c));
      const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * c + 32));
      sums = _mm256_add_epi32(
          sums, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xa), _mm256_set1_epi16(sc[2 * c])));
      sums = _mm256_add_epi32(
          sums, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xb), _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const __m256i mins16 =
        _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(mn)), min_mask);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums + i * 16));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins16)),
                              _mm256_set1_ps(h2f(b[i].dmin) * x.d[i]), acc_min);
  }
  return hsum256(acc) - hsum256(acc_min);
}

float dot_q6_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    prefetch_lines(b + i, 4);
    const int8_t* q8 = x.qs + i * kQKK;
    const int8_t* sc = b[i].scales;
    __m256i sums = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h));
      const __m256i ql1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4),
                          _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4))};
      for (int k = 0; k < 4; ++k) {
        const int j = 8 * h + 2 * k;  // sub-blocks j (low 128 bits) and j+1 (high 128 bits)
        const __m256i scale = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc[j])),
                                                      _mm_set1_epi16(sc[j + 1]), 1);
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 128 * h + 32 * k));
        sums = _mm256_add_epi32(sums, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv), scale));
      }
    }
    const __m256i scales16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums + i * 16));
    const __m256i total =
        _mm256_sub_epi32(sums, _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc);
  }
  return hsum256(acc);
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

__m256 load_f32(const void* p, int64_t i) {
  return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}
__m256 load_f16(const void* p, int64_t i) {
  return _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
}
__m256 load_bf16(const void* p, int64_t i) {
  const __m128i v =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

template <__m256 (*Load)(const void*, int64_t), float (*One)(const void*, int64_t)>
float dot_float(const void* w, const Acts& x, int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    acc0 = _mm256_fmadd_ps(Load(w, i), _mm256_loadu_ps(x.f32 + i), acc0);
    acc1 = _mm256_fmadd_ps(Load(w, i + 8), _mm256_loadu_ps(x.f32 + i + 8), acc1);
  }
  float sum = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < cols; ++i) sum += One(w, i) * x.f32[i];
  return sum;
}

}  // namespace

DotFn dot_avx2(TensorType type) {
  switch (type) {
    case TensorType::F32:
      return dot_float<load_f32, f32_at>;
    case TensorType::F16:
      return dot_float<load_f16, f16_at>;
    case TensorType::BF16:
      return dot_float<load_bf16, bf16_at>;
    case TensorType::Q4_0:
      return dot_q4_0;
    case TensorType::Q8_0:
      return dot_q8_0;
    case TensorType::Q4_1:
      return dot_unsigned32<BlockQ4_1, 0, false, true>;
    case TensorType::Q5_0:
      return dot_unsigned32<BlockQ5_0, 16, true, false>;
    case TensorType::Q5_1:
      return dot_unsigned32<BlockQ5_1, 0, true, true>;
    case TensorType::IQ4_NL:
      return dot_iq4_nl;
    case TensorType::Q2_K:
      return dot_q23_k<false>;
    case TensorType::Q3_K:
      return dot_q23_k<true>;
    case TensorType::Q4_K:
      return dot_qk_affine<BlockQ4_K, false>;
    case TensorType::Q5_K:
      return dot_qk_affine<BlockQ5_K, true>;
    case TensorType::IQ4_XS:
      return dot_iq4_xs;
    case TensorType::Q6_K:
      return dot_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace tern::cpu::detail

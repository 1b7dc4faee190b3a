// AVX2 (+FMA, F16C) dot kernels: one weight row . prepared activations (kernels.h).
// Reads each weight byte once; writes one float. Specialised: Q8_0, Q4_0, Q4_K, Q6_K (vpmaddubsw +
// vpmaddwd), F32/F16/BF16 (fp32 FMA); other types use the scalar kernels. Single-core in-cache
// throughput (Q4_K 16, Q6_K 16, Q8_0 25, Q4_0 11, BF16 22 GB/s) is above a core's share of DRAM
// bandwidth here; the DRAM fraction was not measured (TERN_CPU_PATH=avx2 bench_cpu_matvec does).
// Built with -mavx2: only intrinsics and this file's internal functions are used here.
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

constexpr int64_t kPrefetchBytes = 4096;  // see dot_avx512.cpp
void prefetch_lines(const void* p, int lines) {
  const char* c = static_cast<const char*>(p) + kPrefetchBytes;
  for (int k = 0; k < lines; ++k) _mm_prefetch(c + 64 * k, _MM_HINT_T0);
}

float hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Signed int8 . int8 over 32 lanes -> 8 int32 partial sums.
__m256i dot_i8(__m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

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
  return hsum(acc);
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
  return hsum(acc) - 8.0f * bias;
}

float dot_q4_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ4_K*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i min_mask =
      _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128, 4,
                       -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    prefetch_lines(b + i, 3);
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
    for (int c = 0; c < 4; ++c) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      const __m256i lo = _mm256_and_si256(qv, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m4);
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
  return hsum(acc) - hsum(acc_min);
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
  return hsum(acc);
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
  float sum = hsum(_mm256_add_ps(acc0, acc1));
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
    case TensorType::Q4_K:
      return dot_q4_k;
    case TensorType::Q6_K:
      return dot_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace tern::cpu::detail

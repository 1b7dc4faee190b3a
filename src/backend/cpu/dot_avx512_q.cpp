// AVX-512 (F/BW/VL/DQ + VNNI) dot kernels for the 32-element block types and the float types: one
// weight row . prepared activations (kernels.h). Reads each weight byte once and the activation
// row from L1/L2; writes one float.
// Kernels: Q8_0 (|w| . sign(x, w) with vpdpbusd), Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL (codes made
// unsigned, one 256-bit vpdpbusd per block, the offset or min folded in through Acts::ds),
// F32/F16/BF16 (fp32 FMA). Measured (bench/results/cpu-kernels.md, 2 Sapphire Rapids
// cores, shared and noisy): fraction of all-core read bandwidth, DRAM-resident weights: Q8_0
// 0.89-0.96, Q4_0 0.72-0.86, BF16 0.82-0.87 (quiet run); Q4_1 0.59, Q5_0 0.59, Q5_1 0.55, IQ4_NL
// 0.53 (run under load 3-6: lower bounds). Single core in cache: Q4_0 18, Q4_1 20, Q5_0 19, Q5_1
// 20, Q8_0 32, IQ4_NL 17, BF16 28 GB/s, i.e. 3-5x a core's share of DRAM bandwidth. Built with
// -mavx512*: only intrinsics and this file's own internal functions are used here (simd_util.h has
// internal linkage). GCC 12 reports its own _mm512_undefined_* helpers (self-initialised on
// purpose) as uninitialised once they are inlined here; the warning is about the header, not this
// code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_util.h"
#include "backend/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

// One 32-block per 256-bit VNNI step (pairing two 34-byte blocks in a zmm measured slower), two
// blocks per loop iteration into two accumulators.
float dot_q8_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ8_0*>(w);
  const int64_t nb = cols / kQK;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  auto step = [&](int64_t i, int k) {
    const __m256i wv = load256(b[i].qs);
    const __m256i xv = load256(x.qs + i * kQK);
    // |w| (unsigned) times x carrying w's sign.
    const __m256i dot =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(h2f(b[i].d) * x.d[i]), acc[k]);
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    prefetch_lines(b + i, 2);
    step(i, 0);
    step(i + 1, 1);
  }
  if (i < nb) step(i, 0);
  return hsum256(_mm256_add_ps(acc[0], acc[1]));
}

// [low nibbles | high nibbles] of 16 qs bytes, masked to 0..15, without a shuffle-port insert.
__m256i nibble_codes(const uint8_t* qs) {
  const __m256i q = _mm256_broadcastsi128_si256(load128(qs));
  return _mm256_and_si256(_mm256_mask_srli_epi16(q, 0xFF00, q, 4), _mm256_set1_epi8(0x0F));
}

// The 32-block types with unsigned codes u (0..255) and x[e] = d * (u[e] - kBias) [+ m]:
// sum_e (u - kBias) x = sum u x - kBias * isum; affine types (with m) add m * d_x * isum.
struct Q4_0Codes {
  using Block = BlockQ4_0;
  static constexpr int kBias = 8;
  static constexpr bool kMin = false;
  static __m256i codes(const Block& b) { return nibble_codes(b.qs); }
};
struct Q4_1Codes {
  using Block = BlockQ4_1;
  static constexpr int kBias = 0;
  static constexpr bool kMin = true;
  static __m256i codes(const Block& b) { return nibble_codes(b.qs); }
};
// Bit 4 of code e is bit e of qh: a byte mask (loaded straight into a mask register) adds 16.
template <typename B>
__m256i five_bit_codes(const B& b) {
  const __m256i low = nibble_codes(b.qs);
  __mmask32 high;
  __builtin_memcpy(&high, b.qh, 4);
  return _mm256_mask_add_epi8(low, high, low, _mm256_set1_epi8(16));
}
struct Q5_0Codes {
  using Block = BlockQ5_0;
  static constexpr int kBias = 16;
  static constexpr bool kMin = false;
  static __m256i codes(const Block& b) { return five_bit_codes(b); }
};
struct Q5_1Codes {
  using Block = BlockQ5_1;
  static constexpr int kBias = 0;
  static constexpr bool kMin = true;
  static __m256i codes(const Block& b) { return five_bit_codes(b); }
};
// IQ4_NL: the table value plus 128 (1..241) is unsigned.
struct IQ4_NLCodes {
  using Block = BlockIQ4_NL;
  static constexpr int kBias = 128;
  static constexpr bool kMin = false;
  static __m256i codes(const Block& b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_add_epi8(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values)), _mm_set1_epi8(-128)));
    return _mm256_shuffle_epi8(table, nibble_codes(b.qs));
  }
};

// The scale work is what bounds these kernels (the integer part is 4 uops per block): fp16 d
// (and m) are converted with one vcvtph2ps and multiplied by the activation pair {d_x, d_x * isum}
// (Acts::ds), which gives the block scale in lane 0 and the offset (bias types: d * d_x * isum) or
// min (affine types: m * d_x * isum) term in lane 1, accumulated in an xmm without int->float work.
// Two blocks per iteration, two accumulators.
template <typename C>
float dot_unsigned32(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const typename C::Block*>(w);
  const int64_t nb = cols / kQK;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m128 acc_off = _mm_setzero_ps();
  auto step = [&](int64_t i, int k) {
    const __m256i dot =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), C::codes(b[i]), load256(x.qs + i * kQK));
    __m128 dm;  // {d, d} or {d, m}
    if constexpr (C::kMin) {
      dm = _mm_cvtph_ps(
          _mm_cvtsi32_si128(static_cast<int>(load_u32(reinterpret_cast<const uint8_t*>(&b[i])))));
    } else {
      dm = _mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(b[i].d)));
    }
    const __m128 ds = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(x.ds + 2 * i)));
    const __m128 prod = _mm_mul_ps(dm, ds);  // {d * d_x, (d or m) * d_x * isum}
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcastss_ps(prod), acc[k]);
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
  return C::kMin ? dots + off : dots - static_cast<float>(C::kBias) * off;
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
        return _mm512_cvtph_ps(load256(static_cast<const uint16_t*>(p) + i));
      },
      f16_at);
}

float dot_bf16(const void* w, const Acts& x, int64_t cols) {
  return dot_float(
      w, x.f32, cols,
      [](const void* p, int64_t i) {
        const __m256i v = load256(static_cast<const uint16_t*>(p) + i);
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
      return dot_unsigned32<Q4_0Codes>;
    case TensorType::Q4_1:
      return dot_unsigned32<Q4_1Codes>;
    case TensorType::Q5_0:
      return dot_unsigned32<Q5_0Codes>;
    case TensorType::Q5_1:
      return dot_unsigned32<Q5_1Codes>;
    case TensorType::IQ4_NL:
      return dot_unsigned32<IQ4_NLCodes>;
    case TensorType::Q8_0:
      return dot_q8_0;
    default:
      return dot_avx512_k(type);
  }
}

}  // namespace tern::cpu::detail

// Quantizers: fp32 rows -> GGUF blocks, and the 8-bit activation formats the dot kernels read.
// Reads n floats, writes blocks. Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/F16/BF16 reproduce gguf-py's
// gguf.quants.quantize byte for byte (same fp32 operations in the same order; this file is built
// with -ffp-contract=off). Q4_K and Q6_K have no gguf-py reference: they use our own search
// (per-sub-block range candidates plus a least-squares refit), checked by round-trip error.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"
#include "backend/quant_blocks.h"
#include "base/fp16.h"

namespace tern::cpu {
namespace {

using namespace tern::quant;

float inverse_or_zero(float d) {
  return d == 0.0f ? 0.0f : 1.0f / d;
}

// Index of the first element with the largest magnitude (numpy argmax of abs).
int argmax_abs(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(x[best])) best = i;
  }
  return best;
}

uint8_t clamp_trunc(float v, int hi) {
  int q = static_cast<int>(v);  // truncation toward zero, as np.trunc + astype
  return static_cast<uint8_t>(std::clamp(q, 0, hi));
}

void quant_q4_0(const float* x, BlockQ4_0* b) {
  const float max = x[argmax_abs(x, kQK)];
  const float d = max / -8.0f;
  const float id = inverse_or_zero(d);
  b->d = float_to_fp16(d);
  for (int l = 0; l < 16; ++l) {
    const uint8_t q0 = clamp_trunc(x[l] * id + 8.5f, 15);
    const uint8_t q1 = clamp_trunc(x[l + 16] * id + 8.5f, 15);
    b->qs[l] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quant_q4_1(const float* x, BlockQ4_1* b) {
  const float max = *std::max_element(x, x + kQK);
  const float min = *std::min_element(x, x + kQK);
  const float d = (max - min) / 15.0f;
  const float id = inverse_or_zero(d);
  b->d = float_to_fp16(d);
  b->m = float_to_fp16(min);
  for (int l = 0; l < 16; ++l) {
    const uint8_t q0 = clamp_trunc((x[l] - min) * id + 0.5f, 15);
    const uint8_t q1 = clamp_trunc((x[l + 16] - min) * id + 0.5f, 15);
    b->qs[l] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void pack5(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int l = 0; l < 16; ++l) qs[l] = static_cast<uint8_t>((q[l] & 0xF) | (q[l + 16] << 4));
  for (int l = 0; l < kQK; ++l) qh |= static_cast<uint32_t>(q[l] >> 4) << l;
  std::memcpy(qh_bytes, &qh, 4);
}

void quant_q5_0(const float* x, BlockQ5_0* b) {
  const float max = x[argmax_abs(x, kQK)];
  const float d = max / -16.0f;
  const float id = inverse_or_zero(d);
  b->d = float_to_fp16(d);
  uint8_t q[kQK];
  for (int l = 0; l < kQK; ++l) q[l] = clamp_trunc(x[l] * id + 16.5f, 31);
  pack5(q, b->qs, b->qh);
}

void quant_q5_1(const float* x, BlockQ5_1* b) {
  const float max = *std::max_element(x, x + kQK);
  const float min = *std::min_element(x, x + kQK);
  const float d = (max - min) / 31.0f;
  const float id = inverse_or_zero(d);
  b->d = float_to_fp16(d);
  b->m = float_to_fp16(min);
  uint8_t q[kQK];
  for (int l = 0; l < kQK; ++l) q[l] = clamp_trunc((x[l] - min) * id + 0.5f, 31);
  pack5(q, b->qs, b->qh);
}

void quant_q8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int l = 0; l < kQK; ++l) amax = std::max(amax, std::fabs(x[l]));
  const float d = amax / 127.0f;
  const float id = inverse_or_zero(d);
  b->d = float_to_fp16(d);
  for (int l = 0; l < kQK; ++l) b->qs[l] = static_cast<int8_t>(std::round(x[l] * id));
}

// ---- K-quants (own algorithm) ----

// Best affine fit x ~ scale * q - offset (q in [0, qmax], offset >= 0) for n values: tries a few
// ranges, each followed by one least-squares refit, and keeps the smallest squared error.
void fit_affine(const float* x, int n, int qmax, float* best_scale, float* best_offset) {
  float lo = 0.0f, hi = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *best_scale = (hi - lo) / static_cast<float>(qmax);
  *best_offset = -lo;
  if (hi == lo) return;
  float best_err = INFINITY;
  for (int step = -4; step <= 8; ++step) {
    float scale = (hi - lo) / (static_cast<float>(qmax) + 0.25f * static_cast<float>(step));
    float offset = -lo;
    for (int pass = 0; pass < 2; ++pass) {
      // Round with the current parameters, then evaluate and refit.
      double sq = 0, sx = 0, sqq = 0, sqx = 0, err = 0;
      int q[256];
      for (int i = 0; i < n; ++i) {
        const float v = std::nearbyint((x[i] + offset) / scale);
        q[i] = std::clamp(static_cast<int>(v), 0, qmax);
        const double diff = static_cast<double>(scale) * q[i] - offset - x[i];
        err += diff * diff;
        sq += q[i];
        sx += x[i];
        sqq += static_cast<double>(q[i]) * q[i];
        sqx += static_cast<double>(q[i]) * x[i];
      }
      if (err < best_err) {
        best_err = static_cast<float>(err);
        *best_scale = scale;
        *best_offset = offset;
      }
      const double det = n * sqq - sq * sq;
      if (det <= 0) break;
      const double a = (n * sqx - sq * sx) / det;
      const double b = (sx - a * sq) / n;  // x ~ a*q + b
      if (!(a > 0) || b > 0) break;        // offset must stay >= 0
      scale = static_cast<float>(a);       // evaluated on the next pass
      offset = static_cast<float>(-b);
    }
  }
}

void quant_q4_k(const float* x, BlockQ4_K* b) {
  float scales[8], offsets[8];
  float max_scale = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fit_affine(x + 32 * j, 32, 15, &scales[j], &offsets[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_offset = std::max(max_offset, offsets[j]);
  }
  b->d = float_to_fp16(max_scale / 63.0f);
  b->dmin = float_to_fp16(max_offset / 63.0f);
  const float d = fp16_to_float(b->d);
  const float dmin = fp16_to_float(b->dmin);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(
        std::clamp(static_cast<int>(std::nearbyint(scales[j] * inverse_or_zero(d))), 0, 63));
    m[j] = static_cast<uint8_t>(
        std::clamp(static_cast<int>(std::nearbyint(offsets[j] * inverse_or_zero(dmin))), 0, 63));
  }
  std::memset(b->scales, 0, sizeof(b->scales));
  for (int j = 0; j < 4; ++j) {
    b->scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b->scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    b->scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  std::memset(b->qs, 0, sizeof(b->qs));
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(sc[j]);
    const float ml = dmin * static_cast<float>(m[j]);
    const float idl = inverse_or_zero(dl);
    for (int l = 0; l < 32; ++l) {
      const int q = std::clamp(static_cast<int>(std::nearbyint((x[32 * j + l] + ml) * idl)), 0, 15);
      b->qs[(j / 2) * 32 + l] |= static_cast<uint8_t>(q << (4 * (j % 2)));
    }
  }
}

// Signed symmetric scale for 16 values, q in [-32, 31]: tries divisors near the extremes.
float fit_symmetric(const float* x, int n) {
  const float max = x[argmax_abs(x, n)];
  if (max == 0.0f) return 0.0f;
  float best_scale = max / -32.0f, best_err = INFINITY;
  for (int step = -6; step <= 6; ++step) {
    const float scale = max / (-32.0f + 0.25f * static_cast<float>(step));
    double sqx = 0, sqq = 0;
    for (int pass = 0; pass < 2; ++pass) {
      const float s = pass == 0 ? scale : static_cast<float>(sqx / sqq);
      if (!(std::fabs(s) > 0)) break;
      double err = 0;
      sqx = 0;
      sqq = 0;
      for (int i = 0; i < n; ++i) {
        const int q = std::clamp(static_cast<int>(std::nearbyint(x[i] / s)), -32, 31);
        const double diff = static_cast<double>(s) * q - x[i];
        err += diff * diff;
        sqx += static_cast<double>(q) * x[i];
        sqq += static_cast<double>(q) * q;
      }
      if (err < best_err) {
        best_err = static_cast<float>(err);
        best_scale = s;
      }
      if (sqq == 0) break;
    }
  }
  return best_scale;
}

void quant_q6_k(const float* x, BlockQ6_K* b) {
  float scales[16];
  float max_abs = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(x + 16 * j, 16);
    max_abs = std::max(max_abs, std::fabs(scales[j]));
  }
  b->d = float_to_fp16(max_abs / 127.0f);
  const float d = fp16_to_float(b->d);
  std::memset(b->ql, 0, sizeof(b->ql));
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int j = 0; j < 16; ++j) {
    const int sc =
        std::clamp(static_cast<int>(std::nearbyint(scales[j] * inverse_or_zero(d))), -127, 127);
    b->scales[j] = static_cast<int8_t>(sc);
    const float idl = inverse_or_zero(d * static_cast<float>(sc));
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * j + l;
      const int q = std::clamp(static_cast<int>(std::nearbyint(x[e] * idl)), -32, 31) + 32;
      const int h = e / 128, r = e % 128;
      b->ql[h * 64 + r % 64] |= static_cast<uint8_t>((q & 0xF) << (4 * (r / 64)));
      b->qh[h * 32 + r % 32] |= static_cast<uint8_t>((q >> 4) << (2 * (r / 32)));
    }
  }
}

template <typename Block, void (*Fn)(const float*, Block*)>
size_t quantize_blocks(const float* src, void* dst, int64_t n, int block_elements) {
  auto* blocks = static_cast<Block*>(dst);
  const int64_t nb = n / block_elements;
  for (int64_t i = 0; i < nb; ++i) Fn(src + i * block_elements, blocks + i);
  return static_cast<size_t>(nb) * sizeof(Block);
}

}  // namespace

bool can_quantize(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q4_K:
    case TensorType::Q6_K:
      return true;
    default:
      return false;
  }
}

size_t quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  if (!can_quantize(type) || n < 0 || n % tensor_type_info(type).block_elements != 0) return 0;
  const auto count = static_cast<size_t>(n);
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, count * 4);
      return count * 4;
    case TensorType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = float_to_fp16(src[i]);
      return count * 2;
    }
    case TensorType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = float_to_bf16(src[i]);
      return count * 2;
    }
    case TensorType::Q4_0:
      return quantize_blocks<BlockQ4_0, quant_q4_0>(src, dst, n, kQK);
    case TensorType::Q4_1:
      return quantize_blocks<BlockQ4_1, quant_q4_1>(src, dst, n, kQK);
    case TensorType::Q5_0:
      return quantize_blocks<BlockQ5_0, quant_q5_0>(src, dst, n, kQK);
    case TensorType::Q5_1:
      return quantize_blocks<BlockQ5_1, quant_q5_1>(src, dst, n, kQK);
    case TensorType::Q8_0:
      return quantize_blocks<BlockQ8_0, quant_q8_0>(src, dst, n, kQK);
    case TensorType::Q4_K:
      return quantize_blocks<BlockQ4_K, quant_q4_k>(src, dst, n, kQKK);
    case TensorType::Q6_K:
      return quantize_blocks<BlockQ6_K, quant_q6_k>(src, dst, n, kQKK);
    default:
      return 0;
  }
}

namespace detail {

namespace {
// Symmetric 8-bit quantization of `count` values with one fp32 scale (amax / 127).
float quantize_q8(const float* x, int count, int8_t* qs) {
  float amax = 0.0f;
  for (int l = 0; l < count; ++l) amax = std::max(amax, std::fabs(x[l]));
  const float d = amax / 127.0f;
  const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
  for (int l = 0; l < count; ++l) qs[l] = static_cast<int8_t>(std::nearbyint(x[l] * id));
  return d;
}
}  // namespace

void quantize_acts_q8x32(const float* x, int64_t cols, int8_t* qs, float* d, int32_t* isum) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    d[b] = quantize_q8(x + b * kQK, kQK, qs + b * kQK);
    int32_t sum = 0;
    for (int l = 0; l < kQK; ++l) sum += qs[b * kQK + l];
    isum[b] = sum;
  }
}

void quantize_acts_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    d[b] = quantize_q8(x + b * kQKK, kQKK, qs + b * kQKK);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += qs[b * kQKK + g * 16 + l];
      bsums[b * 16 + g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace detail
}  // namespace tern::cpu

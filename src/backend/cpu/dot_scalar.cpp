// Portable dot kernels: one weight row (GGUF blocks) . prepared activations (kernels.h).
// Reads the row once; integer sums per block, one fp32 multiply-add per (sub-)block. The
// reference the SIMD paths are tested against; single-core in-cache Q4_K 1.4, Q6_K 0.4, Q8_0 6.7,
// BF16 3.2 GB/s, i.e. 0.05-0.6 of read bandwidth (not a fast path).
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/quant_blocks.h"
#include "base/fp16.h"

namespace tern::cpu::detail {
namespace {

using namespace tern::quant;

float h2f(uint16_t h) {
  return fp16_to_float(h);
}

// Unpacks the 32 nibble codes of a Q4_0/Q4_1/IQ4_NL block into element order.
void nibbles32(const uint8_t* qs, int* q) {
  for (int l = 0; l < 16; ++l) {
    q[l] = qs[l] & 0xF;
    q[l + 16] = qs[l] >> 4;
  }
}

void fives32(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  nibbles32(qs, q);
  for (int l = 0; l < 32; ++l) q[l] |= static_cast<int>((qh >> l) & 1u) << 4;
}

int idot(const int* q, const int8_t* x, int n) {
  int s = 0;
  for (int l = 0; l < n; ++l) s += q[l] * x[l];
  return s;
}

float dot_q4_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ4_0*>(w);
  float sum = 0.0f;
  int q[32];
  for (int64_t i = 0; i < cols / kQK; ++i) {
    nibbles32(b[i].qs, q);
    const int s = idot(q, x.qs + i * kQK, kQK) - 8 * x.isum[i];
    sum += h2f(b[i].d) * x.d[i] * static_cast<float>(s);
  }
  return sum;
}

float dot_q4_1(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ4_1*>(w);
  float sum = 0.0f;
  int q[32];
  for (int64_t i = 0; i < cols / kQK; ++i) {
    nibbles32(b[i].qs, q);
    const int s = idot(q, x.qs + i * kQK, kQK);
    sum += h2f(b[i].d) * x.d[i] * static_cast<float>(s) +
           h2f(b[i].m) * x.d[i] * static_cast<float>(x.isum[i]);
  }
  return sum;
}

float dot_q5_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ5_0*>(w);
  float sum = 0.0f;
  int q[32];
  for (int64_t i = 0; i < cols / kQK; ++i) {
    fives32(b[i].qs, b[i].qh, q);
    const int s = idot(q, x.qs + i * kQK, kQK) - 16 * x.isum[i];
    sum += h2f(b[i].d) * x.d[i] * static_cast<float>(s);
  }
  return sum;
}

float dot_q5_1(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ5_1*>(w);
  float sum = 0.0f;
  int q[32];
  for (int64_t i = 0; i < cols / kQK; ++i) {
    fives32(b[i].qs, b[i].qh, q);
    const int s = idot(q, x.qs + i * kQK, kQK);
    sum += h2f(b[i].d) * x.d[i] * static_cast<float>(s) +
           h2f(b[i].m) * x.d[i] * static_cast<float>(x.isum[i]);
  }
  return sum;
}

float dot_q8_0(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ8_0*>(w);
  float sum = 0.0f;
  for (int64_t i = 0; i < cols / kQK; ++i) {
    int s = 0;
    for (int l = 0; l < kQK; ++l) s += b[i].qs[l] * x.qs[i * kQK + l];
    sum += h2f(b[i].d) * x.d[i] * static_cast<float>(s);
  }
  return sum;
}

float dot_iq4_nl(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockIQ4_NL*>(w);
  float sum = 0.0f;
  int q[32];
  for (int64_t i = 0; i < cols / kQK; ++i) {
    nibbles32(b[i].qs, q);
    for (int& v : q) v = kIQ4Values[v];
    sum += h2f(b[i].d) * x.d[i] * static_cast<float>(idot(q, x.qs + i * kQK, kQK));
  }
  return sum;
}

float dot_q2_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ2_K*>(w);
  float sum = 0.0f;
  int q[256];
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    for (int e = 0; e < 256; ++e)
      q[e] = (b[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    int s = 0, smin = 0;
    for (int j = 0; j < 16; ++j) {
      s += (b[i].scales[j] & 0xF) * idot(q + 16 * j, x.qs + i * kQKK + 16 * j, 16);
      smin += (b[i].scales[j] >> 4) * x.bsums[i * 16 + j];
    }
    sum +=
        x.d[i] * (h2f(b[i].d) * static_cast<float>(s) - h2f(b[i].dmin) * static_cast<float>(smin));
  }
  return sum;
}

float dot_q3_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ3_K*>(w);
  float sum = 0.0f;
  int q[256];
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    for (int e = 0; e < 256; ++e) {
      const int low = (b[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
      q[e] = low - (((b[i].hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
    }
    int s = 0;
    for (int j = 0; j < 16; ++j)
      s += q3k_scale(b[i].scales, j) * idot(q + 16 * j, x.qs + i * kQKK + 16 * j, 16);
    sum += x.d[i] * h2f(b[i].d) * static_cast<float>(s);
  }
  return sum;
}

// Q4_K and Q5_K share scales, mins and the nibble layout; Q5_K adds a high bit.
template <typename Block, bool kHigh>
float dot_qk_affine(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const Block*>(w);
  float sum = 0.0f;
  int q[32];
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    int s = 0, smin = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(b[i].scales, j, &sc, &m);
      for (int l = 0; l < 32; ++l) {
        q[l] = (b[i].qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0xF;
        if constexpr (kHigh) q[l] |= ((b[i].qh[l] >> j) & 1) << 4;
      }
      s += sc * idot(q, x.qs + i * kQKK + 32 * j, 32);
      smin += m * (x.bsums[i * 16 + 2 * j] + x.bsums[i * 16 + 2 * j + 1]);
    }
    sum +=
        x.d[i] * (h2f(b[i].d) * static_cast<float>(s) - h2f(b[i].dmin) * static_cast<float>(smin));
  }
  return sum;
}

float dot_q6_k(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockQ6_K*>(w);
  float sum = 0.0f;
  int q[256];
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, r = e % 128;
      const int low = (b[i].ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
      const int high = (b[i].qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
      q[e] = (low | (high << 4)) - 32;
    }
    int s = 0;
    for (int j = 0; j < 16; ++j)
      s += b[i].scales[j] * idot(q + 16 * j, x.qs + i * kQKK + 16 * j, 16);
    sum += x.d[i] * h2f(b[i].d) * static_cast<float>(s);
  }
  return sum;
}

float dot_iq4_xs(const void* w, const Acts& x, int64_t cols) {
  const auto* b = static_cast<const BlockIQ4_XS*>(w);
  float sum = 0.0f;
  int q[32];
  for (int64_t i = 0; i < cols / kQKK; ++i) {
    int s = 0;
    for (int j = 0; j < 8; ++j) {
      const int low = (b[i].scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
      const int high = (b[i].scales_h >> (2 * j)) & 3;
      nibbles32(b[i].qs + 16 * j, q);
      for (int& v : q) v = kIQ4Values[v];
      s += ((low | (high << 4)) - 32) * idot(q, x.qs + i * kQKK + 32 * j, 32);
    }
    sum += x.d[i] * h2f(b[i].d) * static_cast<float>(s);
  }
  return sum;
}

float dot_f32(const void* w, const Acts& x, int64_t cols) {
  const auto* v = static_cast<const float*>(w);
  double sum = 0.0;
  for (int64_t i = 0; i < cols; ++i) sum += static_cast<double>(v[i]) * x.f32[i];
  return static_cast<float>(sum);
}

float dot_f16(const void* w, const Acts& x, int64_t cols) {
  const auto* v = static_cast<const uint16_t*>(w);
  double sum = 0.0;
  for (int64_t i = 0; i < cols; ++i) sum += static_cast<double>(fp16_to_float(v[i])) * x.f32[i];
  return static_cast<float>(sum);
}

float dot_bf16(const void* w, const Acts& x, int64_t cols) {
  const auto* v = static_cast<const uint16_t*>(w);
  double sum = 0.0;
  for (int64_t i = 0; i < cols; ++i) sum += static_cast<double>(bf16_to_float(v[i])) * x.f32[i];
  return static_cast<float>(sum);
}

}  // namespace

ActFormat act_format(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
      return ActFormat::F32;
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
      return ActFormat::Q8x256;
    default:
      return ActFormat::Q8x32;
  }
}

DotFn dot_scalar(TensorType type) {
  switch (type) {
    case TensorType::F32:
      return dot_f32;
    case TensorType::F16:
      return dot_f16;
    case TensorType::BF16:
      return dot_bf16;
    case TensorType::Q4_0:
      return dot_q4_0;
    case TensorType::Q4_1:
      return dot_q4_1;
    case TensorType::Q5_0:
      return dot_q5_0;
    case TensorType::Q5_1:
      return dot_q5_1;
    case TensorType::Q8_0:
      return dot_q8_0;
    case TensorType::IQ4_NL:
      return dot_iq4_nl;
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

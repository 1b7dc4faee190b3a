// Scalar dequantization of every supported block type to fp32.
// Reads GGUF blocks, writes n floats. Bit-exact with gguf-py's numpy reference: every product is
// formed in fp32 in the same order as there, and this file is built with -ffp-contract=off so no
// multiply-add is fused. Not a hot path (matvec/matmul never dequantize whole rows).
#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/quant_blocks.h"
#include "base/fp16.h"

namespace tern::cpu {
namespace {

using namespace tern::quant;

float h2f(uint16_t h) {
  return fp16_to_float(h);
}

void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int l = 0; l < 16; ++l) {
      y[l] = d * static_cast<float>((b[i].qs[l] & 0xF) - 8);
      y[l + 16] = d * static_cast<float>((b[i].qs[l] >> 4) - 8);
    }
  }
}

void deq_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    const float m = h2f(b[i].m);
    for (int l = 0; l < 16; ++l) {
      y[l] = d * static_cast<float>(b[i].qs[l] & 0xF) + m;
      y[l + 16] = d * static_cast<float>(b[i].qs[l] >> 4) + m;
    }
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int l = 0; l < 16; ++l) {
      const int q0 = (b[i].qs[l] & 0xF) | static_cast<int>(((qh >> l) & 1u) << 4);
      const int q1 = (b[i].qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
      y[l] = d * static_cast<float>(q0 - 16);
      y[l + 16] = d * static_cast<float>(q1 - 16);
    }
  }
}

void deq_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    const float m = h2f(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int l = 0; l < 16; ++l) {
      const int q0 = (b[i].qs[l] & 0xF) | static_cast<int>(((qh >> l) & 1u) << 4);
      const int q1 = (b[i].qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
      y[l] = d * static_cast<float>(q0) + m;
      y[l + 16] = d * static_cast<float>(q1) + m;
    }
  }
}

void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int l = 0; l < kQK; ++l) y[l] = static_cast<float>(b[i].qs[l]) * d;
  }
}

void deq_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = h2f(b[i].d);
    for (int l = 0; l < 16; ++l) {
      y[l] = d * static_cast<float>(kIQ4Values[b[i].qs[l] & 0xF]);
      y[l + 16] = d * static_cast<float>(kIQ4Values[b[i].qs[l] >> 4]);
    }
  }
}

void deq_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = h2f(b[i].d);
    const float dmin = h2f(b[i].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const int j = e / 16, h = e / 128, k = (e / 32) % 4, l = e % 32;
      const float dl = d * static_cast<float>(b[i].scales[j] & 0xF);
      const float ml = dmin * static_cast<float>(b[i].scales[j] >> 4);
      const int q = (b[i].qs[h * 32 + l] >> (2 * k)) & 3;
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

void deq_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = h2f(b[i].d);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      const float dl = d * static_cast<float>(q3k_scale(b[i].scales, e / 16));
      const int low = (b[i].qs[h * 32 + l] >> (2 * k)) & 3;
      const int high = (b[i].hmask[l] >> (e / 32)) & 1;
      y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
    }
  }
}

void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = h2f(b[i].d);
    const float dmin = h2f(b[i].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(b[i].scales, j, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const int c = j / 2, s = j % 2;
      for (int l = 0; l < 32; ++l) {
        const int q = (b[i].qs[c * 32 + l] >> (4 * s)) & 0xF;
        y[j * 32 + l] = dl * static_cast<float>(q) - ml;
      }
    }
  }
}

void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = h2f(b[i].d);
    const float dmin = h2f(b[i].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(b[i].scales, j, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const int c = j / 2, s = j % 2;
      for (int l = 0; l < 32; ++l) {
        const int q = ((b[i].qs[c * 32 + l] >> (4 * s)) & 0xF) | (((b[i].qh[l] >> j) & 1) << 4);
        y[j * 32 + l] = dl * static_cast<float>(q) - ml;
      }
    }
  }
}

void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = h2f(b[i].d);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, r = e % 128;
      const int low = (b[i].ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
      const int high = (b[i].qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
      const float dl = d * static_cast<float>(b[i].scales[e / 16]);
      y[e] = dl * static_cast<float>((low | (high << 4)) - 32);
    }
  }
}

void deq_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 8; ++j) {
      const int low = (b[i].scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
      const int high = (b[i].scales_h >> (2 * j)) & 3;
      const float dl = d * static_cast<float>((low | (high << 4)) - 32);
      for (int l = 0; l < 16; ++l) {
        y[j * 32 + l] = dl * static_cast<float>(kIQ4Values[b[i].qs[j * 16 + l] & 0xF]);
        y[j * 32 + l + 16] = dl * static_cast<float>(kIQ4Values[b[i].qs[j * 16 + l] >> 4]);
      }
    }
  }
}

}  // namespace

bool is_supported(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = n / tensor_type_info(type).block_elements;
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case TensorType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      break;
    }
    case TensorType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      break;
    }
    case TensorType::Q4_0:
      deq_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
      break;
    case TensorType::Q4_1:
      deq_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
      break;
    case TensorType::Q5_0:
      deq_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
      break;
    case TensorType::Q5_1:
      deq_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
      break;
    case TensorType::Q8_0:
      deq_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
      break;
    case TensorType::Q2_K:
      deq_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
      break;
    case TensorType::Q3_K:
      deq_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
      break;
    case TensorType::Q4_K:
      deq_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
      break;
    case TensorType::Q5_K:
      deq_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
      break;
    case TensorType::Q6_K:
      deq_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
      break;
    case TensorType::IQ4_NL:
      deq_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, nb);
      break;
    case TensorType::IQ4_XS:
      deq_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, nb);
      break;
    default:
      break;
  }
}

}  // namespace tern::cpu

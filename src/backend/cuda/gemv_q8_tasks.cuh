// gemv_q8_tasks: the v2 decoders of gemv_q8.cu's warp-a-row kernel (every type it supports:
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): Task<T>::dot adds a lane's "task" (one
// 32-element block, or 64 elements of a K-quant superblock) of one weight row against each of
// n <= N activation rows. Layouts: backend/quant_blocks.h. Private to gemv_q8.cu.
#pragma once

#include <cstdint>

#include "backend/cuda/gemv_q8_words.cuh"
#include "backend/cuda/quant_device.cuh"
#include "base/tensor_type.h"

namespace tern::cuda::q8dot {

template <TensorType T>
struct Task;

// 32-element block types: one task per block.
template <>
struct Task<TensorType::Q4_0> {
  static constexpr int kElems = 32;
  template <int N>
  __device__ static void dot(const uint8_t* row, int64_t t, const Acts& a, int n, float (&acc)[N]) {
    const uint8_t* b = row + t * 18;
    const float d = half_bits_to_float(load_u16(b));
    int w[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = u16x2(b + 2 + 4 * i);
      w[i] = static_cast<int>(q & 0x0F0F0F0Fu);
      w[i + 4] = static_cast<int>((q >> 4) & 0x0F0F0F0Fu);
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < n) {
        int x[8];
        load_x(a, j, t, x);
        const int64_t blk = j * (a.k / 32) + t;
        acc[j] += d * (a.d[blk] * static_cast<float>(dot8(w, x)) - 8.0f * a.s[blk]);
      }
    }
  }
};

template <>
struct Task<TensorType::Q4_1> {
  static constexpr int kElems = 32;
  template <int N>
  __device__ static void dot(const uint8_t* row, int64_t t, const Acts& a, int n, float (&acc)[N]) {
    const uint8_t* b = row + t * 20;
    const float d = half_bits_to_float(load_u16(b)), m = half_bits_to_float(load_u16(b + 2));
    int w[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = *reinterpret_cast<const uint32_t*>(b + 4 + 4 * i);
      w[i] = static_cast<int>(q & 0x0F0F0F0Fu);
      w[i + 4] = static_cast<int>((q >> 4) & 0x0F0F0F0Fu);
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < n) {
        int x[8];
        load_x(a, j, t, x);
        const int64_t blk = j * (a.k / 32) + t;
        acc[j] += d * a.d[blk] * static_cast<float>(dot8(w, x)) + m * a.s[blk];
      }
    }
  }
};

template <TensorType T>
struct Q5Task {
  static constexpr bool kAffine = T == TensorType::Q5_1;
  static constexpr int kBytes = kAffine ? 24 : 22;
  static constexpr int kElems = 32;
  template <int N>
  __device__ static void dot(const uint8_t* row, int64_t t, const Acts& a, int n, float (&acc)[N]) {
    const uint8_t* b = row + t * kBytes;
    const float d = half_bits_to_float(load_u16(b));
    const float m = kAffine ? half_bits_to_float(load_u16(b + 2)) : 0.0f;
    const uint8_t* p = b + (kAffine ? 4 : 2);
    const uint32_t qh = u16x2(p);
    int w[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = u16x2(p + 4 + 4 * i);
      w[i] = static_cast<int>(q & 0x0F0F0F0Fu) | spread4(qh >> (4 * i));
      w[i + 4] = static_cast<int>((q >> 4) & 0x0F0F0F0Fu) | spread4(qh >> (16 + 4 * i));
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < n) {
        int x[8];
        load_x(a, j, t, x);
        const int64_t blk = j * (a.k / 32) + t;
        const float sum = a.d[blk] * static_cast<float>(dot8(w, x));
        if constexpr (kAffine) {
          acc[j] += d * sum + m * a.s[blk];
        } else {
          acc[j] += d * (sum - 16.0f * a.s[blk]);
        }
      }
    }
  }
};
template <>
struct Task<TensorType::Q5_0> : Q5Task<TensorType::Q5_0> {};
template <>
struct Task<TensorType::Q5_1> : Q5Task<TensorType::Q5_1> {};

template <>
struct Task<TensorType::Q8_0> {
  static constexpr int kElems = 32;
  template <int N>
  __device__ static void dot(const uint8_t* row, int64_t t, const Acts& a, int n, float (&acc)[N]) {
    const uint8_t* b = row + t * 34;
    const float d = half_bits_to_float(load_u16(b));
    int w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = static_cast<int>(u16x2(b + 2 + 4 * i));
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < n) {
        int x[8];
        load_x(a, j, t, x);
        const int64_t blk = j * (a.k / 32) + t;
        acc[j] += d * a.d[blk] * static_cast<float>(dot8(w, x));
      }
    }
  }
};

// K-quants: one task per 64 elements (two 32-element sub-blocks sharing their quant bytes).
template <TensorType T>
struct QkTask {
  static constexpr bool kFive = T == TensorType::Q5_K;
  static constexpr int kBytes = kFive ? 176 : 144;
  static constexpr int kElems = 64;
  template <int N>
  __device__ static void dot(const uint8_t* row, int64_t t, const Acts& a, int n, float (&acc)[N]) {
    const uint8_t* b = row + (t / 4) * kBytes;
    const int c = static_cast<int>(t % 4);
    const uint32_t dd = *reinterpret_cast<const uint32_t*>(b);
    const float d = half_bits_to_float(static_cast<uint16_t>(dd & 0xFFFF));
    const float dmin = half_bits_to_float(static_cast<uint16_t>(dd >> 16));
    int sc0, m0, sc1, m1;
    k_scale_min(b + 4, 2 * c, sc0, m0);
    k_scale_min(b + 4, 2 * c + 1, sc1, m1);
    const uint4* qp = reinterpret_cast<const uint4*>(b + (kFive ? 48 : 16) + c * 32);
    const uint4 q0 = qp[0], q1 = qp[1];
    const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    int lo[8], hi[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo[i] = static_cast<int>(q[i] & 0x0F0F0F0Fu);
      hi[i] = static_cast<int>((q[i] >> 4) & 0x0F0F0F0Fu);
    }
    if constexpr (kFive) {
      const uint4* hp = reinterpret_cast<const uint4*>(b + 16);
      const uint4 h0 = hp[0], h1 = hp[1];
      const uint32_t h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        lo[i] |= static_cast<int>(((h[i] >> (2 * c)) & 0x01010101u) << 4);
        hi[i] |= static_cast<int>(((h[i] >> (2 * c + 1)) & 0x01010101u) << 4);
      }
    }
    const float d0 = d * static_cast<float>(sc0), d1 = d * static_cast<float>(sc1);
    const float m0f = dmin * static_cast<float>(m0), m1f = dmin * static_cast<float>(m1);
    const int64_t blk0 = (t / 4) * 8 + 2 * c;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < n) {
        int x0[8], x1[8];
        load_x(a, j, blk0, x0);
        load_x(a, j, blk0 + 1, x1);
        const int64_t blk = j * (a.k / 32) + blk0;
        acc[j] += d0 * a.d[blk] * static_cast<float>(dot8(lo, x0)) - m0f * a.s[blk] +
                  d1 * a.d[blk + 1] * static_cast<float>(dot8(hi, x1)) - m1f * a.s[blk + 1];
      }
    }
  }
};
template <>
struct Task<TensorType::Q4_K> : QkTask<TensorType::Q4_K> {};
template <>
struct Task<TensorType::Q5_K> : QkTask<TensorType::Q5_K> {};

// Q6_K: task (h, p) covers 32-element chunks h*4 + p and h*4 + p + 2, which share their ql bytes.
template <>
struct Task<TensorType::Q6_K> {
  static constexpr int kElems = 64;
  template <int N>
  __device__ static void dot(const uint8_t* row, int64_t t, const Acts& a, int n, float (&acc)[N]) {
    const uint8_t* b = row + (t / 4) * 210;
    const int h = static_cast<int>(t % 4) / 2, p = static_cast<int>(t % 2);
    const float d = half_bits_to_float(load_u16(b + 208));
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    // The 32 ql and 32 qh bytes as 8 words each, from 9 aligned 32-bit loads apiece (blocks of
    // 210 bytes start 2-byte aligned; 16-bit loads would take twice the load instructions).
    uint32_t qlw[8], qhw[8];
    words8(b + h * 64 + p * 32, qlw);
    words8(b + 128 + h * 32, qhw);
    int w0[8], w1[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t ql = qlw[i];
      const uint32_t qh = qhw[i];
      const uint32_t a0 = (ql & 0x0F0F0F0Fu) | (((qh >> (2 * p)) & 0x03030303u) << 4);
      const uint32_t a1 = ((ql >> 4) & 0x0F0F0F0Fu) | (((qh >> (2 * p + 4)) & 0x03030303u) << 4);
      w0[i] = static_cast<int>(__vsub4(a0, 0x20202020u));
      w1[i] = static_cast<int>(__vsub4(a1, 0x20202020u));
    }
    const int cc0 = h * 4 + p, cc1 = cc0 + 2;
    const float s00 = static_cast<float>(scales[2 * cc0]),
                s01 = static_cast<float>(scales[2 * cc0 + 1]);
    const float s10 = static_cast<float>(scales[2 * cc1]),
                s11 = static_cast<float>(scales[2 * cc1 + 1]);
    const int64_t sb = (t / 4) * 8;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < n) {
        int x0[8], x1[8];
        load_x(a, j, sb + cc0, x0);
        load_x(a, j, sb + cc1, x1);
        const int64_t blk = j * (a.k / 32) + sb;
        const float v0 =
            s00 * static_cast<float>(dot4(w0, x0, 0)) + s01 * static_cast<float>(dot4(w0, x0, 4));
        const float v1 =
            s10 * static_cast<float>(dot4(w1, x1, 0)) + s11 * static_cast<float>(dot4(w1, x1, 4));
        acc[j] += d * (a.d[blk + cc0] * v0 + a.d[blk + cc1] * v1);
      }
    }
  }
};

}  // namespace tern::cuda::q8dot

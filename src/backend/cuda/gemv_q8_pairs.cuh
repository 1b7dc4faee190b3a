// gemv_q8_pairs: the row-pair decoders of gemv_q8.cu's v3 kernels (Q4_K, Q6_K, Q8_0): Pair<T>::dot
// adds a lane's share of one superblock of two weight rows against one activation row (n = 1);
// PairN<T> loads that share once (load) and multiplies it with up to N activation rows (dot), for
// batched decode. Lane layouts and why they are so: each struct's comment. Private to gemv_q8.cu
// (device functions; its header has the measured fractions).
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cuda/gemv_q8_words.cuh"
#include "backend/cuda/quant_device.cuh"
#include "base/tensor_type.h"

namespace tern::cuda::q8dot {

// Q6_K: the lane's four 8-byte fields of the superblock at b (half hh, l0 = 8 (lane % 4)): low
// nibbles of both 32-byte halves, high bits, the half's 8 scales. b is only 2-byte aligned, but
// the fields sit at multiples of 8 bytes from it: one aligned base and one shift serve all four
// (words2 a field: 1045 -> 979 SASS instructions and 128 -> 66 registers in the n = 1 pair,
// sass_report.py). The batched pairs keep words2: there the shared base took registers (PairN
// N = 8: 80 -> 88) from a kernel measured as it is.
__device__ __forceinline__ void q6k_fields(const uint8_t* b, int hh, int l0, uint32_t (&la)[2],
                                           uint32_t (&lb)[2], uint32_t (&hb)[2],
                                           uint32_t (&sw)[2]) {
  const uint32_t* w = aligned_down(b);
  const uint32_t shift = misalignment_bits(b);
  words2_at(w + (hh * 64 + l0) / 4, shift, la[0], la[1]);
  words2_at(w + (hh * 64 + 32 + l0) / 4, shift, lb[0], lb[1]);
  words2_at(w + (128 + hh * 32 + l0) / 4, shift, hb[0], hb[1]);
  words2_at(w + (192 + hh * 8) / 4, shift, sw[0], sw[1]);
}

// Q6_K: four signed 6-bit quants of group g (as bytes) from the low-nibble words of the two
// 32-byte halves (la, lb) and the high-bit word hb.
__device__ __forceinline__ int q6k_word(uint32_t la, uint32_t lb, uint32_t hb, int g) {
  const uint32_t lo = g & 1 ? lb : la;
  const uint32_t nib = g < 2 ? (lo & 0x0F0F0F0Fu) : ((lo >> 4) & 0x0F0F0F0Fu);
  const uint32_t hi = ((hb >> (2 * g)) & 0x03030303u) << 4;
  return static_cast<int>(__vsub4(nib | hi, 0x20202020u));
}

template <TensorType T>
struct Pair;

template <>
struct Pair<TensorType::Q4_K> {
  static constexpr int kBytes = 144;
  // Superblock `sb` of both rows; the lane's part j = lane % 8: quant chunk c2 = j / 2 (sub-blocks
  // 2 c2 and 2 c2 + 1), half h = j % 2 (elements 16 h .. 16 h + 15 of each). Fewer
  // instructions a superblock (v3.2, the file's comment): the scales unpacked without a branch
  // (q4k_scale_words), each sub-block's integer dot scaled by its integer scale before the one
  // conversion to float, and the two blocks' min terms split between the two halves' lanes
  // (lane h adds block 2 c2 + h's) instead of one lane adding both under a branch.
  __device__ static void dot(const uint8_t* r0, const uint8_t* r1, int64_t sb, const Acts& a,
                             int lane, float& acc0, float& acc1) {
    const int j = lane & 7, c2 = j >> 1, h = j & 1;
    const int64_t blk0 = sb * 8 + 2 * c2;
    const int4 x0 = ldg16(a.qs + blk0 * 32 + 16 * h);
    const int4 x1 = ldg16(a.qs + (blk0 + 1) * 32 + 16 * h);
    const float2 xd = __ldg(reinterpret_cast<const float2*>(a.d + blk0));
    const float xs = __ldg(a.s + blk0 + h);
    float res[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* b = (r == 0 ? r0 : r1) + sb * kBytes;
      const int4 hd = ldg16(b);
      const int4 q = ldg16(b + 16 + c2 * 32 + 16 * h);
      const float2 dm = q4k_d_dmin(hd);
      uint32_t scw, mw;
      q4k_scale_words(hd, c2, scw, mw);
      const uint32_t qw[4] = {static_cast<uint32_t>(q.x), static_cast<uint32_t>(q.y),
                              static_cast<uint32_t>(q.z), static_cast<uint32_t>(q.w)};
      const int xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
      int dot0 = 0, dot1 = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        dot0 = __dp4a(static_cast<int>(qw[i] & 0x0F0F0F0Fu), xa[i], dot0);
        dot1 = __dp4a(static_cast<int>((qw[i] >> 4) & 0x0F0F0F0Fu), xb[i], dot1);
      }
      const int sc0 = static_cast<int>(scw & 0xFF), sc1 = static_cast<int>(scw >> 8);
      const int mh = static_cast<int>((mw >> (8 * h)) & 0xFF);
      const float scaled =
          xd.x * static_cast<float>(sc0 * dot0) + xd.y * static_cast<float>(sc1 * dot1);
      res[r] = dm.x * scaled - dm.y * (static_cast<float>(mh) * xs);
    }
    acc0 += res[0];
    acc1 += res[1];
  }
};

template <>
struct Pair<TensorType::Q6_K> {
  static constexpr int kBytes = 210;
  // The lane's part j = lane % 8: half hh = j / 4 (128 elements), l in [8 q, 8 q + 8) with
  // q = j % 4, the four groups g of 32 (elements hh * 128 + 32 g + l).
  __device__ static void dot(const uint8_t* r0, const uint8_t* r1, int64_t sb, const Acts& a,
                             int lane, float& acc0, float& acc1) {
    const int j = lane & 7, hh = j >> 2, qq = j & 3, l0 = 8 * qq;
    const int64_t e0 = sb * 256 + hh * 128 + l0;
    int2 xg[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) xg[g] = ldg8(a.qs + e0 + 32 * g);
    const float4 xd = __ldg(reinterpret_cast<const float4*>(a.d + sb * 8 + hh * 4));
    const float xds[4] = {xd.x, xd.y, xd.z, xd.w};
    float res[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* b = (r == 0 ? r0 : r1) + sb * kBytes;
      uint32_t la[2], lb[2], hb[2], sw[2];
      q6k_fields(b, hh, l0, la, lb, hb, sw);
      const float d = half_bits_to_float(load_u16(b + 208));
      float sum = 0.0f;
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        int dot = 0;
#pragma unroll
        for (int i = 0; i < 2; ++i)
          dot = __dp4a(q6k_word(la[i], lb[i], hb[i], g), i == 0 ? xg[g].x : xg[g].y, dot);
        // Scale of sub-block hh * 8 + 2 g + (l0 / 16): byte 2 g + (qq >> 1) of the 8; the
        // integer product converted once.
        const int sbyte = 2 * g + (qq >> 1);
        const int sc = static_cast<int8_t>((sw[sbyte >> 2] >> (8 * (sbyte & 3))) & 0xFF);
        sum += xds[g] * static_cast<float>(sc * dot);
      }
      res[r] = d * sum;
    }
    acc0 += res[0];
    acc1 += res[1];
  }
};

// Q8_0 block j (< 8) of a 272-byte superblock at sb (16-byte aligned: rows of k % 256 == 0 are
// whole superblocks): its 34 bytes [34j, 34j + 34) lie in the 16-byte chunks 2j .. 2j + 2, at
// byte 2j of them. Three 16-byte loads, then the words picked by j with selects (j differs
// between lanes, so an indexed array would go to local memory). Why: words8's ten 2- and 4-byte
// loads a row touch the same ~9 cache lines of the warp's 1,088 bytes ten times over; three
// loads touch them three times.
__device__ __forceinline__ void q8_0_block_wide(const uint8_t* sb, int j, uint32_t (&q)[8],
                                                float& d) {
  const int4* c = reinterpret_cast<const int4*>(sb) + 2 * j;
  const int4 c0 = ldg16(c), c1 = ldg16(c + 1), c2 = ldg16(c + 2);
  const uint32_t raw[12] = {
      static_cast<uint32_t>(c0.x), static_cast<uint32_t>(c0.y), static_cast<uint32_t>(c0.z),
      static_cast<uint32_t>(c0.w), static_cast<uint32_t>(c1.x), static_cast<uint32_t>(c1.y),
      static_cast<uint32_t>(c1.z), static_cast<uint32_t>(c1.w), static_cast<uint32_t>(c2.x),
      static_cast<uint32_t>(c2.y), static_cast<uint32_t>(c2.z), static_cast<uint32_t>(c2.w)};
  // The scale: bytes 2j, 2j + 1 = half j & 1 of word j >> 1.
  const uint32_t dw = j & 4 ? (j & 2 ? raw[3] : raw[2]) : (j & 2 ? raw[1] : raw[0]);
  d = half_bits_to_float(static_cast<uint16_t>(dw >> (16 * (j & 1))));
  // The quants start at byte 2j + 2: word wi = (j + 1) / 2 (0..4), shifted 16 bits when j + 1
  // is odd. r[i] = raw[wi + i] in three select stages (wi = 4 needs no raw[12]: its shift is 0).
  const int wi = (j + 1) >> 1;
  const uint32_t shift = 16u * static_cast<uint32_t>((j + 1) & 1);
  uint32_t t4[12], t2[10], r[9];
#pragma unroll
  for (int i = 0; i < 12; ++i) t4[i] = wi & 4 ? raw[i + 4 < 12 ? i + 4 : 11] : raw[i];
#pragma unroll
  for (int i = 0; i < 10; ++i) t2[i] = wi & 2 ? t4[i + 2] : t4[i];
#pragma unroll
  for (int i = 0; i < 9; ++i) r[i] = wi & 1 ? t2[i + 1] : t2[i];
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = __funnelshift_r(r[i], r[i + 1], shift);
}

// Q8_0 "superblock" sb: 8 blocks of 32 (256 weights, as for the K-quants); the lane takes block
// sb * 8 + lane % 8 of both rows (34-byte blocks: 2-byte aligned). kWide (the default for four
// warps a pair, gemv_q8.cu's q8_wide; kernels of their own, so the one-warp kernels keep their
// registers): each block read by q8_0_block_wide; else as funnel-shifted words.
template <bool kWide>
struct PairQ8_0 {
  static constexpr int kBytes = 34;
  __device__ static void dot(const uint8_t* r0, const uint8_t* r1, int64_t sb, const Acts& a,
                             int lane, float& acc0, float& acc1) {
    const int64_t blk = sb * 8 + (lane & 7);
    const int4 x0 = ldg16(a.qs + blk * 32), x1 = ldg16(a.qs + blk * 32 + 16);
    const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const float xd = __ldg(a.d + blk);
    float res[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* row = r == 0 ? r0 : r1;
      uint32_t w[8];
      float d;
      if constexpr (kWide) {
        q8_0_block_wide(row + sb * 8 * kBytes, lane & 7, w, d);
      } else {
        const uint8_t* b = row + blk * kBytes;
        words8(b + 2, w);
        d = half_bits_to_float(load_u16(b));
      }
      int dot = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = __dp4a(static_cast<int>(w[i]), xw[i], dot);
      res[r] = d * xd * static_cast<float>(dot);
    }
    acc0 += res[0];
    acc1 += res[1];
  }
};
template <>
struct Pair<TensorType::Q8_0> : PairQ8_0<false> {};
// The dot of a pair kernel: the wide Q8_0 reads for the kWide kernels.
template <TensorType T, bool kWide>
using PairDot = std::conditional_t<kWide, PairQ8_0<true>, Pair<T>>;

// Batched decode (2 <= n <= 8 rows of x, several sequences a step; the default): row pairs as
// above, each lane's part of both weight rows decoded once into registers, then every x row
// loaded once for both (the v2 kernel that n > 1 takes otherwise decodes per warp row and
// reloads x per row: 9-27% of the bandwidth at n = 8). Same lane layout per type as Pair<T>.
template <TensorType T>
struct PairN;

// Each PairN<T> splits its work in two: load() brings the lane's raw words of super-block sb of
// both rows into registers (Raw), dot() decodes them and multiplies with every x row. (Loading
// super-block sb + 4W before the products of sb measured slower: the extra registers cost more
// warps than the loads in flight gained.)
template <>
struct PairN<TensorType::Q4_K> {
  struct Raw {
    int4 hd[2], q[2];
  };
  __device__ static void load(const uint8_t* r0, const uint8_t* r1, int64_t sb, int lane, Raw& w) {
    const int j = lane & 7, c2 = j >> 1, h = j & 1;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* b = (r == 0 ? r0 : r1) + sb * Pair<TensorType::Q4_K>::kBytes;
      w.hd[r] = ldg16(b);
      w.q[r] = ldg16(b + 16 + c2 * 32 + 16 * h);
    }
  }
  template <int N>
  __device__ static void dot(const Raw& w, int64_t sb, const Acts& a, int lane, int n,
                             float (&acc0)[N], float (&acc1)[N]) {
    const int j = lane & 7, c2 = j >> 1, h = j & 1;
    const int64_t blk0 = sb * 8 + 2 * c2;
    uint32_t qw[2][4];
    float d0[2], d1[2], minh[2];  // per row: scale x sub-block scale, and the lane's min term
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int4 hd = w.hd[r], q = w.q[r];
      const float2 dm = q4k_d_dmin(hd);
      uint32_t scw, mw;
      q4k_scale_words(hd, c2, scw, mw);
      qw[r][0] = static_cast<uint32_t>(q.x), qw[r][1] = static_cast<uint32_t>(q.y);
      qw[r][2] = static_cast<uint32_t>(q.z), qw[r][3] = static_cast<uint32_t>(q.w);
      d0[r] = dm.x * static_cast<float>(scw & 0xFF);
      d1[r] = dm.x * static_cast<float>(scw >> 8);
      // Block 2 c2 + h's min term (it covers the whole 32-element block): lane h adds it.
      minh[r] = dm.y * static_cast<float>((mw >> (8 * h)) & 0xFF);
    }
    const int64_t blocks_per_row = a.k / 32;
#pragma unroll
    for (int x = 0; x < N; ++x) {
      if (x < n) {
        const int8_t* xq = a.qs + x * a.k;
        const int4 x0 = ldg16(xq + blk0 * 32 + 16 * h);
        const int4 x1 = ldg16(xq + (blk0 + 1) * 32 + 16 * h);
        const float2 xd = __ldg(reinterpret_cast<const float2*>(a.d + x * blocks_per_row + blk0));
        const float xs = __ldg(a.s + x * blocks_per_row + blk0 + h);
        const int xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
        float res[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          int dot0 = 0, dot1 = 0;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            dot0 = __dp4a(static_cast<int>(qw[r][i] & 0x0F0F0F0Fu), xa[i], dot0);
            dot1 = __dp4a(static_cast<int>((qw[r][i] >> 4) & 0x0F0F0F0Fu), xb[i], dot1);
          }
          res[r] = d0[r] * xd.x * static_cast<float>(dot0) +
                   d1[r] * xd.y * static_cast<float>(dot1) - minh[r] * xs;
        }
        acc0[x] += res[0];
        acc1[x] += res[1];
      }
    }
  }
};

template <>
struct PairN<TensorType::Q6_K> {
  struct Raw {
    uint32_t la[2][2], lb[2][2], h[2][2], s[2][2];
    uint16_t d[2];
  };
  __device__ static void load(const uint8_t* r0, const uint8_t* r1, int64_t sb, int lane, Raw& w) {
    const int j = lane & 7, hh = j >> 2, qq = j & 3, l0 = 8 * qq;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* b = (r == 0 ? r0 : r1) + sb * Pair<TensorType::Q6_K>::kBytes;
      words2(b + hh * 64 + l0, w.la[r][0], w.la[r][1]);
      words2(b + hh * 64 + 32 + l0, w.lb[r][0], w.lb[r][1]);
      words2(b + 128 + hh * 32 + l0, w.h[r][0], w.h[r][1]);
      words2(b + 192 + hh * 8, w.s[r][0], w.s[r][1]);
      w.d[r] = load_u16(b + 208);
    }
  }
  template <int N>
  __device__ static void dot(const Raw& raw, int64_t sb, const Acts& a, int lane, int n,
                             float (&acc0)[N], float (&acc1)[N]) {
    const int j = lane & 7, hh = j >> 2, qq = j & 3, l0 = 8 * qq;
    int w[2][4][2];  // per row, group g, word i: the signed 6-bit quants as bytes
    float sc[2][4];  // per row and group: d x the sub-block scale
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float d = half_bits_to_float(raw.d[r]);
#pragma unroll
      for (int g = 0; g < 4; ++g) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
          w[r][g][i] = q6k_word(raw.la[r][i], raw.lb[r][i], raw.h[r][i], g);
        const int sbyte = 2 * g + (qq >> 1);
        const uint32_t sw = sbyte < 4 ? raw.s[r][0] : raw.s[r][1];
        sc[r][g] = d * static_cast<float>(static_cast<int8_t>((sw >> (8 * (sbyte & 3))) & 0xFF));
      }
    }
    const int64_t e0 = sb * 256 + hh * 128 + l0;
#pragma unroll
    for (int x = 0; x < N; ++x) {
      if (x < n) {
        const int8_t* xq = a.qs + x * a.k;
        int2 xg[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) xg[g] = ldg8(xq + e0 + 32 * g);
        const float4 xd =
            __ldg(reinterpret_cast<const float4*>(a.d + x * (a.k / 32) + sb * 8 + hh * 4));
        const float xds[4] = {xd.x, xd.y, xd.z, xd.w};
        float res[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int g = 0; g < 4; ++g) {
            const int dot = __dp4a(w[r][g][1], xg[g].y, __dp4a(w[r][g][0], xg[g].x, 0));
            res[r] += sc[r][g] * xds[g] * static_cast<float>(dot);
          }
        }
        acc0[x] += res[0];
        acc1[x] += res[1];
      }
    }
  }
};

template <>
struct PairN<TensorType::Q8_0> {
  struct Raw {
    uint32_t w[2][8];
    uint16_t d[2];
  };
  __device__ static void load(const uint8_t* r0, const uint8_t* r1, int64_t sb, int lane, Raw& w) {
    const int64_t blk = sb * 8 + (lane & 7);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* b = (r == 0 ? r0 : r1) + blk * Pair<TensorType::Q8_0>::kBytes;
      words8(b + 2, w.w[r]);
      w.d[r] = load_u16(b);
    }
  }
  template <int N>
  __device__ static void dot(const Raw& raw, int64_t sb, const Acts& a, int lane, int n,
                             float (&acc0)[N], float (&acc1)[N]) {
    const int64_t blk = sb * 8 + (lane & 7);
    const float d[2] = {half_bits_to_float(raw.d[0]), half_bits_to_float(raw.d[1])};
#pragma unroll
    for (int x = 0; x < N; ++x) {
      if (x < n) {
        const int8_t* xq = a.qs + x * a.k;
        const int4 x0 = ldg16(xq + blk * 32), x1 = ldg16(xq + blk * 32 + 16);
        const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const float xd = __ldg(a.d + x * (a.k / 32) + blk);
        float res[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          int dot = 0;
#pragma unroll
          for (int i = 0; i < 8; ++i) dot = __dp4a(static_cast<int>(raw.w[r][i]), xw[i], dot);
          res[r] = d[r] * xd * static_cast<float>(dot);
        }
        acc0[x] += res[0];
        acc1[x] += res[1];
      }
    }
  }
};

}  // namespace tern::cuda::q8dot

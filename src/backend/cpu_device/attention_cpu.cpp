// Work items are (sequence, KV head, query heads of its group, a tile of consecutive new tokens,
// a range of keys): every key/value block an item needs is converted to float once and then used
// by all of the item's query rows (tile tokens x heads), instead of once per token. Items are
// handed out from a shared counter, the most expensive (latest tokens, most keys) first, so the
// causal triangle does not leave one thread with three quarters of the work.
// With few new tokens (decode) and a long context there are fewer items than threads: the keys
// are then split (flash-decoding), each part writing its rows' (max, sum, accumulator) and a
// merge combining them, so that each key row is read from memory once a step. (Splitting the
// query heads instead, as short contexts still do, read a KV head's rows once per part: on
// SmolLM2 decode after 2K tokens the rows' conversion was 42% of the step, 2026-12-05.)
//
// Per query row and key block of kKeyBlock: scores = q . k (the 1/sqrt(d) scale is folded into
// q), masked past the row's position and before its sliding window, then the online softmax
// (running max and sum, the accumulated values rescaled when the max grows) and acc += p . v.
// The AVX-512 path computes 16 scores with one transpose-and-add reduction of 16 accumulators and
// a polynomial exp; the AVX2 path the same 8 at a time; the scalar path is the same algorithm in
// plain loops.
//
// Measured: end to end only (bench/results/2026-12-03-cpu-vs-llamacpp-packed.md); in a profile of
// a Gemma 3 270M prefill of 512 tokens, scores and accumulation were ~8% of the time.
// GCC 12's AVX-512 intrinsic headers trip these on their own undefined-vector idiom.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu_device/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_exp.h"
#include "base/fp16.h"

namespace tern {
namespace {

constexpr int64_t kKeyBlock = 32;     // key positions converted and scored together
constexpr int64_t kRowsPerItem = 32;  // query rows (tokens x heads) an item aims for

int64_t padded(int64_t head_dim) {
  return (head_dim + 15) / 16 * 16;
}

// --- the two kernel paths -------------------------------------------------------------------

// scores[j] = q . k[j] for j < count; k rows `stride` floats apart (stride % 16 == 0, padding 0).
void scores_scalar(const float* q, const float* k, int64_t count, int64_t stride, float* scores) {
  for (int64_t j = 0; j < count; ++j) {
    float sum = 0.0f;
    for (int64_t d = 0; d < stride; ++d) sum += q[d] * k[j * stride + d];
    scores[j] = sum;
  }
}
// acc[d] += sum_j p[j] * v[j][d].
void accumulate_scalar(const float* p, const float* v, int64_t count, int64_t stride, float* acc) {
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t d = 0; d < stride; ++d) acc[d] += p[j] * v[j * stride + d];
  }
}
// p[j] = exp(s[j] - max) for j < count; returns their sum.
float exp_sum_scalar(float* s, int64_t count, float max) {
  float total = 0.0f;
  for (int64_t j = 0; j < count; ++j) {
    s[j] = std::exp(s[j] - max);
    total += s[j];
  }
  return total;
}

#define TERN_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,fma,f16c")))

// Sums of 16 vectors, lane j of the result = the sum of a[j]'s 16 lanes.
TERN_AVX512 inline __m512 transpose_sum16(const __m512* a) {
  __m512 x[8];
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  }
  __m512 z[4];
  for (int i = 0; i < 4; ++i) {
    const __m512d lo =
        _mm512_unpacklo_pd(_mm512_castps_pd(x[2 * i]), _mm512_castps_pd(x[2 * i + 1]));
    const __m512d hi =
        _mm512_unpackhi_pd(_mm512_castps_pd(x[2 * i]), _mm512_castps_pd(x[2 * i + 1]));
    z[i] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  // z[i] lane L (128 bits) = partial sums of keys 4i..4i+3; add the four lanes, keys in order.
  const __m512 v01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xDD));
  const __m512 v23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(z[2], z[3], 0x88), _mm512_shuffle_f32x4(z[2], z[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, 0x88), _mm512_shuffle_f32x4(v01, v23, 0xDD));
}

TERN_AVX512 void scores_avx512(const float* q, const float* k, int64_t count, int64_t stride,
                               float* scores) {
  for (int64_t j0 = 0; j0 < count; j0 += 16) {
    __m512 acc[16];
    const int64_t n = std::min<int64_t>(16, count - j0);
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t d = 0; d < stride; d += 16) {
      const __m512 qv = _mm512_loadu_ps(q + d);
      for (int j = 0; j < 16; ++j) {
        if (j < n) acc[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k + (j0 + j) * stride + d), acc[j]);
      }
    }
    _mm512_mask_storeu_ps(scores + j0, static_cast<__mmask16>((1u << n) - 1), transpose_sum16(acc));
  }
}

TERN_AVX512 void accumulate_avx512(const float* p, const float* v, int64_t count, int64_t stride,
                                   float* acc) {
  int64_t d = 0;
  for (; d + 64 <= stride; d += 64) {
    __m512 a0 = _mm512_loadu_ps(acc + d), a1 = _mm512_loadu_ps(acc + d + 16);
    __m512 a2 = _mm512_loadu_ps(acc + d + 32), a3 = _mm512_loadu_ps(acc + d + 48);
    for (int64_t j = 0; j < count; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const float* row = v + j * stride + d;
      a0 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(row), a0);
      a1 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(row + 16), a1);
      a2 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(row + 32), a2);
      a3 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(row + 48), a3);
    }
    _mm512_storeu_ps(acc + d, a0);
    _mm512_storeu_ps(acc + d + 16, a1);
    _mm512_storeu_ps(acc + d + 32, a2);
    _mm512_storeu_ps(acc + d + 48, a3);
  }
  for (; d < stride; d += 16) {
    __m512 a = _mm512_loadu_ps(acc + d);
    for (int64_t j = 0; j < count; ++j)
      a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_loadu_ps(v + j * stride + d), a);
    _mm512_storeu_ps(acc + d, a);
  }
}

TERN_AVX512 float exp_sum_avx512(float* s, int64_t count, float max) {
  __m512 total = _mm512_setzero_ps();
  const __m512 m = _mm512_set1_ps(max);
  for (int64_t j = 0; j < count; j += 16) {
    const auto mask = static_cast<__mmask16>(count - j >= 16 ? 0xFFFF : (1u << (count - j)) - 1);
    const __m512 e = cpu::exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), m));
    _mm512_mask_storeu_ps(s + j, mask, e);
    total = _mm512_add_ps(total, _mm512_maskz_mov_ps(mask, e));
  }
  return _mm512_reduce_add_ps(total);
}

#define TERN_AVX2 __attribute__((target("avx2,fma,f16c")))

// Sums of 8 vectors, lane j of the result = the sum of a[j]'s 8 lanes.
TERN_AVX2 inline __m256 transpose_sum8(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  // h0123's lower 128 bits: the lower halves of a[0..3]; its upper: their upper halves.
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                       _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

TERN_AVX2 void scores_avx2(const float* q, const float* k, int64_t count, int64_t stride,
                           float* scores) {
  for (int64_t j0 = 0; j0 < count; j0 += 8) {
    __m256 acc[8];
    const int64_t n = std::min<int64_t>(8, count - j0);
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t d = 0; d < stride; d += 8) {
      const __m256 qv = _mm256_loadu_ps(q + d);
      for (int j = 0; j < 8; ++j) {
        if (j < n) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + (j0 + j) * stride + d), acc[j]);
      }
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, transpose_sum8(acc));
    for (int64_t j = 0; j < n; ++j) scores[j0 + j] = sums[j];
  }
}

TERN_AVX2 void accumulate_avx2(const float* p, const float* v, int64_t count, int64_t stride,
                               float* acc) {
  int64_t d = 0;
  for (; d + 32 <= stride; d += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8);
    __m256 a2 = _mm256_loadu_ps(acc + d + 16), a3 = _mm256_loadu_ps(acc + d + 24);
    for (int64_t j = 0; j < count; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* row = v + j * stride + d;
      a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row), a0);
      a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + 8), a1);
      a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + 16), a2);
      a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + 24), a3);
    }
    _mm256_storeu_ps(acc + d, a0);
    _mm256_storeu_ps(acc + d + 8, a1);
    _mm256_storeu_ps(acc + d + 16, a2);
    _mm256_storeu_ps(acc + d + 24, a3);
  }
  for (; d < stride; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int64_t j = 0; j < count; ++j)
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * stride + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
}

TERN_AVX2 float exp_sum_avx2(float* s, int64_t count, float max) {
  __m256 total = _mm256_setzero_ps();
  const __m256 m = _mm256_set1_ps(max);
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    const __m256 e = cpu::exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, e);
    total = _mm256_add_ps(total, e);
  }
  if (j < count) {  // the tail through a zero-padded copy
    alignas(32) float tail[8] = {};
    const int64_t rest = count - j;
    for (int64_t i = 0; i < rest; ++i) tail[i] = s[j + i] - max;
    for (int64_t i = rest; i < 8; ++i) tail[i] = -INFINITY;
    const __m256 e = cpu::exp_avx2(_mm256_loadu_ps(tail));
    _mm256_store_ps(tail, e);
    for (int64_t i = 0; i < rest; ++i) s[j + i] = tail[i];
    total = _mm256_add_ps(total, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  float sum = 0.0f;
  for (float l : lanes) sum += l;
  return sum;
}

TERN_AVX2 void f16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}

void f16_to_f32_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}
TERN_AVX512 void f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(
        dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}

struct Kernels {
  void (*f16_to_f32)(const uint16_t*, float*, int64_t);
  void (*scores)(const float*, const float*, int64_t, int64_t, float*);
  void (*accumulate)(const float*, const float*, int64_t, int64_t, float*);
  float (*exp_sum)(float*, int64_t, float);
};

// The kernels of the path in use, where the CPU has them (looked up per call: tests switch paths
// within a process).
const Kernels& kernels() {
  static const Kernels avx512{f16_to_f32_avx512, scores_avx512, accumulate_avx512, exp_sum_avx512};
  static const Kernels avx2{f16_to_f32_avx2, scores_avx2, accumulate_avx2, exp_sum_avx2};
  static const Kernels scalar{f16_to_f32_scalar, scores_scalar, accumulate_scalar, exp_sum_scalar};
  static const auto f = cpu::detect_cpu_features();
  static const bool has_avx2 = f.avx2 && f.fma && f.f16c;
  static const bool has_avx512 = has_avx2 && f.avx512f && f.avx512dq && f.avx512vl && f.avx512bw;
  switch (cpu::default_cpu_path()) {
    case cpu::CpuPath::Avx512:
      return has_avx512 ? avx512 : has_avx2 ? avx2 : scalar;
    case cpu::CpuPath::Avx2:
      return has_avx2 ? avx2 : scalar;
    default:
      return scalar;
  }
}

// --- cache rows -------------------------------------------------------------------------------

size_t row_bytes(TensorType type, int64_t head_dim) {
  const auto& info = tensor_type_info(type);
  return static_cast<size_t>(head_dim / info.block_elements) * info.block_bytes;
}

// Converts one KV head's cache rows for positions [first, first + count) into dst [count,
// stride] (the padding past head_dim is left as it is: zero).
void load_rows(const Tensor& store, const KvLayer& cache, const AttentionSequence& seq,
               int64_t kv_head, int64_t first, int64_t count, int64_t stride, float* dst) {
  const size_t bytes = row_bytes(store.type, cache.head_dim);
  const auto* base = static_cast<const uint8_t*>(store.data);
  const auto convert = kernels().f16_to_f32;
  // The block and offset of the first position, then walked (no division a row).
  int64_t block = first / cache.block_size, offset = first % cache.block_size;
  for (int64_t j = 0; j < count; ++j, ++offset) {
    if (offset == cache.block_size) {
      ++block;
      offset = 0;
    }
    const int64_t slot = seq.block_table[static_cast<size_t>(block)] * cache.block_size + offset;
    const uint8_t* row = base + static_cast<size_t>(slot * cache.kv_heads + kv_head) * bytes;
    float* d = dst + j * stride;
    if (store.type == TensorType::F16) {
      convert(reinterpret_cast<const uint16_t*>(row), d, cache.head_dim);
    } else if (store.type == TensorType::F32) {
      std::memcpy(d, row, static_cast<size_t>(cache.head_dim) * sizeof(float));
    } else {
      cpu::dequantize_row(store.type, row, d, cache.head_dim);
    }
  }
}

// --- work items -------------------------------------------------------------------------------

struct WorkItem {
  const AttentionSequence* seq;
  int64_t first_token;  // index within the sequence's new tokens
  int64_t tokens;
  int64_t kv_head;
  int64_t head_begin, head_end;  // query heads (absolute)
  int64_t cost;
  // Key positions [key_begin, key_end) (multiples of kKeyBlock but the ends); a key split's
  // items write their rows' partial state at `partial` (the first of its rows) instead of out.
  int64_t key_begin = 0, key_end = INT64_MAX;
  int64_t partial = -1;
};

// A key split's state of one query row: the running max and sum, then the accumulator.
int64_t partial_floats(int64_t stride) {
  return stride + 2;
}

// Per-thread buffers of one item.
struct ItemBuffers {
  std::vector<float> q, acc, max, total, k, v, scores;
  void fit(int64_t rows, int64_t stride) {
    const auto r = static_cast<size_t>(rows), s = static_cast<size_t>(stride);
    if (q.size() < r * s) {
      q.assign(r * s, 0.0f);
      acc.assign(r * s, 0.0f);
    }
    if (max.size() < r) {
      max.resize(r);
      total.resize(r);
      scores.resize(r * kKeyBlock);
    }
    if (k.size() < kKeyBlock * s) {
      k.assign(kKeyBlock * s, 0.0f);
      v.assign(kKeyBlock * s, 0.0f);
    }
  }
};

void run_item(const WorkItem& it, const Tensor& q, const KvLayer& cache,
              const AttentionParams& params, Tensor& out, float* partials, ItemBuffers& buf) {
  const int64_t head_dim = q.ne[0], heads = q.ne[1], stride = padded(head_dim);
  const int64_t nh = it.head_end - it.head_begin, rows = it.tokens * nh;
  const AttentionSequence& seq = *it.seq;
  buf.fit(rows, stride);
  const Kernels& k = kernels();
  // Row r = (token t, head h): t = r / nh. Scaled queries, zero padding.
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r / nh, h = it.head_begin + r % nh;
    const float* src = q.f32() + ((seq.first_token + it.first_token + t) * heads + h) * head_dim;
    float* dst = buf.q.data() + r * stride;
    for (int64_t d = 0; d < head_dim; ++d) dst[d] = src[d] * params.scale;
    std::fill(buf.acc.begin() + r * stride, buf.acc.begin() + (r + 1) * stride, 0.0f);
    buf.max[static_cast<size_t>(r)] = -INFINITY;
    buf.total[static_cast<size_t>(r)] = 0.0f;
  }
  const int64_t first_pos = seq.first_position + it.first_token;
  const int64_t last_pos = first_pos + it.tokens - 1;
  auto window_start = [&](int64_t pos) {
    return params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
  };
  const int64_t begin = std::max(window_start(first_pos) / kKeyBlock * kKeyBlock, it.key_begin);
  const int64_t end = std::min(last_pos + 1, it.key_end);
  for (int64_t block = begin; block < end; block += kKeyBlock) {
    const int64_t count = std::min(kKeyBlock, end - block);
    load_rows(cache.k, cache, seq, it.kv_head, block, count, stride, buf.k.data());
    bool v_loaded = false;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = first_pos + r / nh;
      const int64_t lo = std::max(window_start(pos), block), hi = std::min(pos + 1, block + count);
      if (lo >= hi) continue;  // the whole block is masked for this row
      float* s = buf.scores.data() + r * kKeyBlock;
      const int64_t n = hi - lo;
      k.scores(buf.q.data() + r * stride, buf.k.data() + (lo - block) * stride, n, stride, s);
      if (params.softcap > 0.0f) {
        for (int64_t j = 0; j < n; ++j) s[j] = params.softcap * std::tanh(s[j] / params.softcap);
      }
      if (!seq.ancestors.empty()) {  // a token tree: new tokens see only their ancestors
        const uint64_t mine = seq.ancestors[static_cast<size_t>(it.first_token + r / nh)];
        for (int64_t j = 0; j < n; ++j) {
          const int64_t new_token = lo + j - seq.first_position;
          if (new_token >= 0 && ((mine >> new_token) & 1u) == 0) s[j] = -INFINITY;
        }
      }
      float block_max = -INFINITY;
      for (int64_t j = 0; j < n; ++j) block_max = std::max(block_max, s[j]);
      if (block_max == -INFINITY) continue;  // every key of the block masked by the tree
      float& row_max = buf.max[static_cast<size_t>(r)];
      float& row_total = buf.total[static_cast<size_t>(r)];
      float* acc = buf.acc.data() + r * stride;
      if (block_max > row_max) {
        const float correction = std::exp(row_max - block_max);  // 0 for the first block
        for (int64_t d = 0; d < stride; ++d) acc[d] *= correction;
        row_total *= correction;
        row_max = block_max;
      }
      row_total += k.exp_sum(s, n, row_max);
      if (!v_loaded) {
        load_rows(cache.v, cache, seq, it.kv_head, block, count, stride, buf.v.data());
        v_loaded = true;
      }
      k.accumulate(s, buf.v.data() + (lo - block) * stride, n, stride, acc);
    }
  }
  if (it.partial >= 0) {  // a key split: the rows' state, for merge_key_splits
    for (int64_t r = 0; r < rows; ++r) {
      float* state = partials + (it.partial + r) * partial_floats(stride);
      state[0] = buf.max[static_cast<size_t>(r)];
      state[1] = buf.total[static_cast<size_t>(r)];
      std::copy_n(buf.acc.data() + r * stride, stride, state + 2);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r / nh, h = it.head_begin + r % nh;
    float* o = out.f32() + ((seq.first_token + it.first_token + t) * heads + h) * head_dim;
    const float inv = 1.0f / buf.total[static_cast<size_t>(r)];
    const float* acc = buf.acc.data() + r * stride;
    for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[d] * inv;
  }
}

// The rows of one (sequence, token tile, KV head) whose keys were split over `parts`: each part's
// sum and accumulator scaled to the rows' largest max, added, and divided into out.
void merge_key_splits(std::span<const WorkItem> parts, const float* partials, int64_t stride,
                      int64_t heads, int64_t head_dim, Tensor& out) {
  const WorkItem& first = parts.front();
  const int64_t nh = first.head_end - first.head_begin, rows = first.tokens * nh;
  auto state = [&](const WorkItem& part, int64_t r) {
    return partials + (part.partial + r) * partial_floats(stride);
  };
  for (int64_t r = 0; r < rows; ++r) {
    float row_max = -INFINITY;
    for (const WorkItem& part : parts) row_max = std::max(row_max, state(part, r)[0]);
    const int64_t t = r / nh, h = first.head_begin + r % nh;
    float* o =
        out.f32() + ((first.seq->first_token + first.first_token + t) * heads + h) * head_dim;
    std::fill_n(o, head_dim, 0.0f);
    float total = 0.0f;
    for (const WorkItem& part : parts) {
      const float* st = state(part, r);
      if (st[0] == -INFINITY) continue;  // no key of this part seen by the row
      const float f = std::exp(st[0] - row_max);
      total += st[1] * f;
      for (int64_t d = 0; d < head_dim; ++d) o[d] += st[2 + d] * f;
    }
    const float inv = 1.0f / total;
    for (int64_t d = 0; d < head_dim; ++d) o[d] *= inv;
  }
}

}  // namespace

void cpu_attention(const Tensor& q, const KvLayer& cache,
                   std::span<const AttentionSequence> sequences, const AttentionParams& params,
                   Tensor& out, ThreadPool& pool) {
  const int64_t heads = q.ne[1];
  const int64_t kv_heads = cache.kv_heads, group = heads / kv_heads;
  const int64_t stride = padded(q.ne[0]);
  const auto threads = static_cast<int64_t>(pool.size());
  int64_t tokens = 0, most_keys = 0;
  for (const auto& s : sequences) {
    tokens += s.token_count;
    const int64_t keys = s.first_position + s.token_count;
    most_keys = std::max(most_keys,
                         params.sliding_window > 0 ? std::min(keys, params.sliding_window) : keys);
  }
  // Few items for the threads: split the keys when there are enough of them (each part at least
  // kMinSplitKeys), else the group's query heads.
  constexpr int64_t kMinSplitKeys = 256;
  int64_t key_splits = 1;
  while (tokens * kv_heads * key_splits < threads * 2 &&
         most_keys >= 2 * key_splits * kMinSplitKeys) {
    key_splits *= 2;
  }
  int64_t splits = 1;
  while (key_splits == 1 && splits < group && tokens * kv_heads * splits < threads * 2) splits *= 2;
  splits = std::min(splits, group);
  const int64_t heads_per_item = (group + splits - 1) / splits;
  const int64_t tile = std::max<int64_t>(1, kRowsPerItem / heads_per_item);
  std::vector<WorkItem> items;
  // Key splits: the items of one (sequence, tile, KV head), consecutive in `split_groups`.
  struct SplitGroup {
    size_t first_item, count;
  };
  std::vector<SplitGroup> split_groups;
  int64_t partial_rows = 0;
  for (const auto& s : sequences) {
    for (int64_t t0 = 0; t0 < s.token_count; t0 += tile) {
      const int64_t count = std::min(tile, s.token_count - t0);
      const int64_t last = s.first_position + t0 + count;
      const int64_t keys =
          params.sliding_window > 0 ? std::min(last, params.sliding_window + count) : last;
      for (int64_t h = 0; h < kv_heads; ++h) {
        if (key_splits > 1) {
          // Equal parts of the keys the tile can see, in whole key blocks.
          const int64_t first_key = std::max<int64_t>(0, last - keys) / kKeyBlock * kKeyBlock;
          const int64_t per = ((last - first_key + key_splits - 1) / key_splits + kKeyBlock - 1) /
                              kKeyBlock * kKeyBlock;
          const size_t group_first = items.size();
          for (int64_t k0 = first_key; k0 < last; k0 += per) {
            WorkItem it{&s, t0, count, h, h * group, (h + 1) * group, count * group * per};
            it.key_begin = k0;
            it.key_end = std::min(last, k0 + per);
            it.partial = partial_rows;
            partial_rows += count * group;
            items.push_back(it);
          }
          split_groups.push_back({group_first, items.size() - group_first});
          continue;
        }
        for (int64_t p = 0; p < splits; ++p) {
          const int64_t b = group * p / splits, e = group * (p + 1) / splits;
          if (b < e)
            items.push_back(
                {&s, t0, count, h, h * group + b, h * group + e, count * (e - b) * keys});
        }
      }
    }
  }
  std::vector<float> partials(static_cast<size_t>(partial_rows * partial_floats(stride)));
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].cost > items[b].cost; });
  std::atomic<size_t> next{0};
  const size_t workers = std::min(pool.size(), items.size());
  pool.parallel_for(workers, [&](size_t, size_t, size_t) {
    ItemBuffers buf;
    for (size_t i = next.fetch_add(1); i < order.size(); i = next.fetch_add(1))
      run_item(items[order[i]], q, cache, params, out, partials.data(), buf);
  });
  for (const SplitGroup& g : split_groups) {
    merge_key_splits({items.data() + g.first_item, g.count}, partials.data(), stride, heads,
                     q.ne[0], out);
  }
}

}  // namespace tern

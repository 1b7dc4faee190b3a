#include "backend/cpu_device/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/quant.h"
#include "base/fp16.h"

namespace tern {
namespace {

constexpr int64_t kKeyBlock = 64;  // key positions converted and scored together

// The vector paths are compiled for AVX2/FMA/F16C via target attributes and chosen at run time.
struct Kernels {
  void (*f16_to_f32)(const uint16_t*, float*, int64_t);
  float (*dot)(const float*, const float*, int64_t);
  void (*axpy)(float, const float*, float*, int64_t);  // y += a * x
};

void f16_to_f32_scalar(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = fp16_to_float(s[i]);
}
float dot_scalar(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target("avx2,fma,f16c"))) void f16_to_f32_avx2(const uint16_t* s, float* d,
                                                              int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  }
  for (; i < n; ++i) d[i] = fp16_to_float(s[i]);
}
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  float sum = _mm_cvtss_f32(lo);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
__attribute__((target("avx2,fma"))) void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

const Kernels& kernels() {
  static const Kernels k = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
      return Kernels{f16_to_f32_avx2, dot_avx2, axpy_avx2};
    }
    return Kernels{f16_to_f32_scalar, dot_scalar, axpy_scalar};
  }();
  return k;
}

size_t row_bytes(TensorType type, int64_t head_dim) {
  const auto& info = tensor_type_info(type);
  return static_cast<size_t>(head_dim / info.block_elements) * info.block_bytes;
}

// Converts cache rows of one KV head for positions [first, first + count) into dst [count,
// head_dim].
void load_rows(const Tensor& store, const KvLayer& cache, const AttentionSequence& seq,
               int64_t kv_head, int64_t first, int64_t count, float* dst) {
  const size_t bytes = row_bytes(store.type, cache.head_dim);
  const auto* base = static_cast<const uint8_t*>(store.data);
  const Kernels& k = kernels();
  for (int64_t j = 0; j < count; ++j) {
    const int64_t p = first + j;
    const int64_t slot =
        seq.block_table[static_cast<size_t>(p / cache.block_size)] * cache.block_size +
        p % cache.block_size;
    const uint8_t* row = base + static_cast<size_t>(slot * cache.kv_heads + kv_head) * bytes;
    float* d = dst + j * cache.head_dim;
    if (store.type == TensorType::F16) {
      k.f16_to_f32(reinterpret_cast<const uint16_t*>(row), d, cache.head_dim);
    } else if (store.type == TensorType::F32) {
      std::memcpy(d, row, static_cast<size_t>(cache.head_dim) * sizeof(float));
    } else {
      cpu::dequantize_row(store.type, row, d, cache.head_dim);
    }
  }
}

struct WorkItem {
  const AttentionSequence* seq;
  int64_t token;     // batch row
  int64_t position;  // its position in the sequence
  int64_t kv_head;
  int64_t head_begin, head_end;  // query heads handled (within the kv head's group)
};

}  // namespace

void cpu_attention(const Tensor& q, const KvLayer& cache,
                   std::span<const AttentionSequence> sequences, const AttentionParams& params,
                   Tensor& out, ThreadPool& pool) {
  const int64_t head_dim = q.ne[0], heads = q.ne[1];
  const int64_t kv_heads = cache.kv_heads, group = heads / kv_heads;
  int64_t tokens = 0;
  for (const auto& s : sequences) tokens += s.token_count;
  // Enough items to keep every thread busy: split a group's heads when tokens x kv heads is small.
  int64_t splits = 1;
  while (splits < group && tokens * kv_heads * splits < static_cast<int64_t>(pool.size()) * 2)
    splits *= 2;
  splits = std::min(splits, group);
  std::vector<WorkItem> items;
  items.reserve(static_cast<size_t>(tokens * kv_heads * splits));
  for (const auto& s : sequences) {
    for (int64_t i = 0; i < s.token_count; ++i) {
      for (int64_t h = 0; h < kv_heads; ++h) {
        for (int64_t p = 0; p < splits; ++p) {
          const int64_t b = group * p / splits, e = group * (p + 1) / splits;
          if (b < e)
            items.push_back(
                {&s, s.first_token + i, s.first_position + i, h, h * group + b, h * group + e});
        }
      }
    }
  }
  const Kernels& k = kernels();
  pool.parallel_for(items.size(), [&](size_t begin, size_t end, size_t) {
    std::vector<float> kbuf(static_cast<size_t>(kKeyBlock * head_dim)), vbuf(kbuf.size());
    std::vector<float> scores(static_cast<size_t>(group * kKeyBlock));
    std::vector<float> acc(static_cast<size_t>(group * head_dim)),
        max_score(static_cast<size_t>(group)), total(static_cast<size_t>(group));
    for (size_t w = begin; w < end; ++w) {
      const WorkItem& it = items[w];
      const int64_t nh = it.head_end - it.head_begin;
      int64_t first = 0;
      if (params.sliding_window > 0)
        first = std::max<int64_t>(0, it.position - params.sliding_window + 1);
      std::fill(acc.begin(), acc.begin() + nh * head_dim, 0.0f);
      std::fill(max_score.begin(), max_score.begin() + nh, -INFINITY);
      std::fill(total.begin(), total.begin() + nh, 0.0f);
      for (int64_t block = first; block <= it.position; block += kKeyBlock) {
        const int64_t count = std::min(kKeyBlock, it.position + 1 - block);
        load_rows(cache.k, cache, *it.seq, it.kv_head, block, count, kbuf.data());
        for (int64_t g = 0; g < nh; ++g) {
          const float* qv = q.f32() + (it.token * heads + it.head_begin + g) * head_dim;
          float* s = scores.data() + g * kKeyBlock;
          float block_max = -INFINITY;
          for (int64_t j = 0; j < count; ++j) {
            float v = k.dot(qv, kbuf.data() + j * head_dim, head_dim) * params.scale;
            if (params.softcap > 0.0f) v = params.softcap * std::tanh(v / params.softcap);
            s[j] = v;
            block_max = std::max(block_max, v);
          }
          // Online softmax: rescale what was accumulated under the old maximum.
          const float new_max = std::max(max_score[static_cast<size_t>(g)], block_max);
          const float correction = std::exp(max_score[static_cast<size_t>(g)] - new_max);
          if (correction != 1.0f) {
            float* a = acc.data() + g * head_dim;
            for (int64_t d = 0; d < head_dim; ++d) a[d] *= correction;
            total[static_cast<size_t>(g)] *= correction;
          }
          max_score[static_cast<size_t>(g)] = new_max;
          for (int64_t j = 0; j < count; ++j) {
            s[j] = std::exp(s[j] - new_max);
            total[static_cast<size_t>(g)] += s[j];
          }
        }
        load_rows(cache.v, cache, *it.seq, it.kv_head, block, count, vbuf.data());
        for (int64_t g = 0; g < nh; ++g) {
          const float* s = scores.data() + g * kKeyBlock;
          float* a = acc.data() + g * head_dim;
          for (int64_t j = 0; j < count; ++j) k.axpy(s[j], vbuf.data() + j * head_dim, a, head_dim);
        }
      }
      for (int64_t g = 0; g < nh; ++g) {
        float* o = out.f32() + (it.token * heads + it.head_begin + g) * head_dim;
        const float inv = 1.0f / total[static_cast<size_t>(g)];
        const float* a = acc.data() + g * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) o[d] = a[d] * inv;
      }
    }
  });
}

}  // namespace tern

// CpuDevice::attention over a paged cache (scattered block tables, several sequences, cached
// prefixes, every KV type) against a float64 softmax(q k^T * scale) v over the values the cache
// holds (read back through dequantize_row, so the KV rounding is not part of the difference), on
// every kernel path the CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/quant.h"
#include "backend/cpu_device/cpu_device.h"
#include "test_util.h"

namespace tern {
namespace {

struct Case {
  int64_t heads, kv_heads, head_dim;
  TensorType kv_type;
  std::vector<int64_t> cached, fresh;  // per sequence
  int64_t window = 0;
  float softcap = 0.0f;
  // Token trees, per sequence (empty: causal): each new token's parent among the new tokens
  // (-1: a child of the cached prefix). A token sees the prefix, its ancestors and itself.
  std::vector<std::vector<int32_t>> parents = {};
};

using testing::ancestor_masks;
using testing::binary_tree;

class CpuAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CpuAttention, MatchesAFloat64Reference) {
  const Case c = GetParam();
  CpuDevice device(3);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t block_size = 16;
  int64_t blocks = 0;
  for (size_t s = 0; s < c.cached.size(); ++s)
    blocks += (c.cached[s] + c.fresh[s] + block_size - 1) / block_size;
  const int64_t pool = blocks + 5;
  const auto& info = tensor_type_info(c.kv_type);
  const size_t row_bytes = static_cast<size_t>(c.head_dim / info.block_elements) * info.block_bytes;
  std::vector<uint8_t> kbytes(static_cast<size_t>(pool * block_size * c.kv_heads) * row_bytes);
  std::vector<uint8_t> vbytes(kbytes.size());
  KvLayer layer;
  layer.block_size = block_size;
  layer.kv_heads = c.kv_heads;
  layer.head_dim = c.head_dim;
  layer.k.type = layer.v.type = c.kv_type;
  layer.k.ne = layer.v.ne = {c.head_dim, c.kv_heads, block_size, pool};
  layer.k.data = kbytes.data();
  layer.v.data = vbytes.data();

  std::vector<int32_t> order(static_cast<size_t>(pool));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<int32_t>> tables(c.cached.size());
  size_t next = 0;
  std::vector<AttentionSequence> seqs;
  std::vector<std::vector<uint64_t>> masks(c.cached.size());
  std::vector<int32_t> slots;
  int64_t tokens = 0, all = 0;
  for (size_t s = 0; s < c.cached.size(); ++s) {
    const int64_t total = c.cached[s] + c.fresh[s];
    for (int64_t b = 0; b < (total + block_size - 1) / block_size; ++b)
      tables[s].push_back(order[next++]);
    for (int64_t p = 0; p < total; ++p)
      slots.push_back(tables[s][static_cast<size_t>(p / block_size)] *
                          static_cast<int32_t>(block_size) +
                      static_cast<int32_t>(p % block_size));
    AttentionSequence a;
    a.first_token = tokens;
    a.token_count = c.fresh[s];
    a.first_position = c.cached[s];
    a.block_table = tables[s];
    if (s < c.parents.size() && !c.parents[s].empty()) {
      masks[s] = ancestor_masks(c.parents[s]);
      a.ancestors = masks[s];
    }
    seqs.push_back(a);
    tokens += c.fresh[s];
    all += total;
  }
  // Every position's K and V through store_kv (prefix and new tokens alike).
  const int64_t kv_row = c.kv_heads * c.head_dim;
  std::vector<float> k(static_cast<size_t>(all * kv_row)), v(k.size());
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  Tensor tk{k.data(), TensorType::F32, {c.head_dim, c.kv_heads, all, 1}};
  Tensor tv{v.data(), TensorType::F32, {c.head_dim, c.kv_heads, all, 1}};
  device.store_kv(layer, tk, tv, slots);

  std::vector<float> q(static_cast<size_t>(tokens * c.heads * c.head_dim));
  for (auto& x : q) x = normal(rng);
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.sliding_window = c.window;
  params.softcap = c.softcap;
  Tensor tq{q.data(), TensorType::F32, {c.head_dim, c.heads, tokens, 1}};
  // The output of every kernel path this CPU has (scalar, AVX2, AVX-512).
  std::vector<cpu::CpuPath> paths;
  std::vector<std::vector<float>> outs;
  for (cpu::CpuPath path : {cpu::CpuPath::Scalar, cpu::CpuPath::Avx2, cpu::CpuPath::Avx512}) {
    if (!cpu::cpu_path_available(path, cpu::detect_cpu_features())) continue;
    cpu::set_cpu_path_override(path);
    std::vector<float> out(q.size(), NAN);
    Tensor to{out.data(), TensorType::F32, tq.ne};
    device.attention(tq, layer, seqs, params, to);
    paths.push_back(path);
    outs.push_back(std::move(out));
  }
  cpu::set_cpu_path_override(std::nullopt);

  auto cached_row = [&](const std::vector<uint8_t>& store, size_t s, int64_t p, int64_t h) {
    const int64_t slot =
        tables[s][static_cast<size_t>(p / block_size)] * block_size + p % block_size;
    std::vector<float> row(static_cast<size_t>(c.head_dim));
    cpu::dequantize_row(c.kv_type,
                        store.data() + static_cast<size_t>(slot * c.kv_heads + h) * row_bytes,
                        row.data(), c.head_dim);
    return row;
  };
  const int64_t group = c.heads / c.kv_heads;
  double worst = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t t = 0; t < c.fresh[s]; ++t) {
      const int64_t pos = c.cached[s] + t;
      const int64_t first = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      for (int64_t h = 0; h < c.heads; ++h) {
        const float* qv = q.data() + ((seqs[s].first_token + t) * c.heads + h) * c.head_dim;
        std::vector<double> scores, acc(static_cast<size_t>(c.head_dim), 0.0);
        std::vector<int64_t> seen;  // the key positions this token attends to
        for (int64_t p = first; p <= pos; ++p) {
          const int64_t j = p - c.cached[s];
          if (!masks[s].empty() && j >= 0 && ((masks[s][static_cast<size_t>(t)] >> j) & 1) == 0)
            continue;
          seen.push_back(p);
        }
        for (int64_t p : seen) {
          const auto kr = cached_row(kbytes, s, p, h / group);
          double dot = 0;
          for (int64_t d = 0; d < c.head_dim; ++d) dot += double{qv[d]} * kr[d];
          dot *= params.scale;
          if (c.softcap > 0) dot = c.softcap * std::tanh(dot / c.softcap);
          scores.push_back(dot);
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double total = 0;
        for (size_t i = 0; i < seen.size(); ++i) {
          const int64_t p = seen[i];
          const double e = std::exp(scores[i] - m);
          total += e;
          const auto vr = cached_row(vbytes, s, p, h / group);
          for (int64_t d = 0; d < c.head_dim; ++d) acc[static_cast<size_t>(d)] += e * vr[d];
        }
        for (size_t pi = 0; pi < outs.size(); ++pi) {
          const float* o = outs[pi].data() + ((seqs[s].first_token + t) * c.heads + h) * c.head_dim;
          for (int64_t d = 0; d < c.head_dim; ++d) {
            const double want = acc[static_cast<size_t>(d)] / total;
            ASSERT_NEAR(o[d], want, 2e-5 * (1 + std::fabs(want)))
                << cpu::cpu_path_name(paths[pi]) << " path: seq " << s << " token " << t << " head "
                << h << " dim " << d;
            worst = std::max(worst, std::fabs(o[d] - want));
          }
        }
      }
    }
  }
  RecordProperty("max_abs_diff", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuAttention,
    ::testing::Values(
        // Prefill of one sequence, Qwen3-like heads; decode of one token after a long prefix.
        Case{16, 8, 128, TensorType::F16, {0}, {100}},
        Case{16, 8, 128, TensorType::F16, {300}, {1}},
        // Head size not a multiple of 16, groups of 1 and 3, several sequences of different
        // lengths with cached prefixes.
        Case{6, 2, 40, TensorType::F32, {0, 17, 5}, {33, 1, 20}},
        Case{4, 4, 64, TensorType::BF16, {9}, {70}},
        // Gemma-like: one KV head of 256, sliding window, soft-capping, Q8_0 cache.
        Case{4, 1, 256, TensorType::F16, {40}, {60}, 32},
        Case{8, 2, 64, TensorType::Q8_0, {0, 64}, {64, 3}, 0, 30.0f},
        Case{8, 1, 32, TensorType::Q8_0, {500}, {1}, 128},
        // Decode after long contexts, where the keys are split over the threads and the parts
        // merged: SmolLM2's heads (a part of 1,023 keys ends mid-block), Gemma's one KV head under
        // a window, two sequences of different lengths, a token tree over split keys.
        Case{9, 3, 64, TensorType::F16, {2047}, {1}},
        Case{4, 1, 256, TensorType::F16, {1500}, {1}, 600},
        Case{8, 2, 64, TensorType::BF16, {3000, 700}, {1, 1}},
        Case{8, 1, 64, TensorType::F16, {1200}, {4}, 0, 0.0f, {{-1, 0, 0, 1}}},
        // Token trees (speculative decoding's verify pass): a small tree after a prefix; a causal
        // sequence beside a tree in one batch; the largest tree (64 tokens, a binary tree over
        // several key blocks); a tree under a sliding window with soft-capping.
        Case{8, 2, 64, TensorType::F16, {37}, {7}, 0, 0.0f, {{-1, 0, 0, 1, 1, 2, -1}}},
        Case{8,
             2,
             64,
             TensorType::F16,
             {20, 50},
             {5, 10},
             0,
             0.0f,
             {{}, {-1, 0, 1, 1, 0, 4, 5, -1, 7, 2}}},
        Case{16, 8, 128, TensorType::F16, {100}, {64}, 0, 0.0f, {binary_tree(64)}},
        Case{4,
             1,
             256,
             TensorType::F16,
             {40},
             {12},
             16,
             30.0f,
             {{-1, 0, 1, 2, 3, 0, 5, 6, 1, 8, -1, 10}}}));

}  // namespace
}  // namespace tern

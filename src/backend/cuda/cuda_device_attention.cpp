// The CudaDevice's KV cache ops: storing a step's keys and values in their paged slots, and
// attention (the tensor-core prefill kernel, or the flash-decoding kernels with context splits).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device_internal.h"
#include "backend/cuda/kernels.h"

namespace tern {

using cuda_device_detail::u;

void CudaDevice::store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                          std::span<const int32_t> slots) {
  if (failed_ || slots.empty()) return;
  step_kv_stores_.push_back(cache.k.data);
  auto dev_slots = stage(slots);
  if (!dev_slots) return fail(dev_slots.error());
  const TensorType type = cache.k.type;
  void *kc = cache.k.data, *vc = cache.v.data;
  const float *kd = k.f32(), *vd = v.f32();
  const int32_t* sd = *dev_slots;
  const int64_t n = static_cast<int64_t>(slots.size()), kvh = cache.kv_heads, hd = cache.head_dim;
  cudaStream_t s = stream_;
  const std::initializer_list<uint64_t> sig = {
      15, static_cast<uint64_t>(type), u(kc), u(vc), u(kd), u(vd), u(sd), u(n), u(kvh), u(hd)};
  enqueue(sig, [=]() -> Result<void> {
    TERN_CUDA_TRY(cuda::store_kv(type, kc, vc, kd, vd, sd, n, kvh, hd, s));
    return {};
  });
}

void CudaDevice::attention(const Tensor& q, const KvLayer& cache,
                           std::span<const AttentionSequence> sequences,
                           const AttentionParams& params, Tensor& out) {
  if (failed_ || sequences.empty()) return;
  const int64_t head_dim = q.ne[0], heads = q.ne[1];
  if (cache.kv_heads <= 0 || heads % cache.kv_heads != 0 || head_dim != cache.head_dim ||
      !cuda::attention_supported(cache.k.type, head_dim, heads / cache.kv_heads)) {
    return fail(
        make_error("attention: {} heads of size {} over {} KV heads of type {} are not "
                   "supported by the CUDA backend",
                   heads, head_dim, cache.kv_heads, tensor_type_name(cache.k.type)));
  }
  // One staged array: 4 ints per sequence, then the block tables, then (token trees) two words
  // of ancestor mask per batch token.
  std::vector<int32_t> packed(4 * sequences.size());
  int64_t tokens = 0, max_keys = 0;
  bool trees = false;
  for (const auto& seq : sequences) {
    if (seq.ancestors.empty()) continue;
    if (static_cast<int64_t>(seq.ancestors.size()) != seq.token_count ||
        seq.token_count > kMaxTreeTokens) {
      return fail(make_error("attention: a token tree of {} masks for {} new tokens (at most {})",
                             seq.ancestors.size(), seq.token_count, kMaxTreeTokens));
    }
    trees = true;
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& seq = sequences[i];
    packed[4 * i] = static_cast<int32_t>(seq.first_token);
    packed[4 * i + 1] = static_cast<int32_t>(seq.token_count);
    packed[4 * i + 2] = static_cast<int32_t>(seq.first_position);
    packed[4 * i + 3] = static_cast<int32_t>(packed.size() - 4 * sequences.size());
    tokens = std::max(tokens, seq.first_token + seq.token_count);
    max_keys = std::max(max_keys, seq.first_position + seq.token_count);
    packed.insert(packed.end(), seq.block_table.begin(), seq.block_table.end());
  }
  size_t masks_at = 0;
  if (trees) {
    masks_at = packed.size();
    packed.resize(masks_at + 2 * static_cast<size_t>(tokens), -1);  // causal tokens: all ones
    for (const auto& seq : sequences) {
      for (size_t i = 0; i < seq.ancestors.size(); ++i) {
        const uint64_t m = seq.ancestors[i];
        const size_t at =
            masks_at + 2 * static_cast<size_t>(seq.first_token + static_cast<int64_t>(i));
        packed[at] = static_cast<int32_t>(static_cast<uint32_t>(m & 0xFFFFFFFFu));
        packed[at + 1] = static_cast<int32_t>(static_cast<uint32_t>(m >> 32));
      }
    }
  }
  auto dev = stage(packed);
  if (!dev) return fail(dev.error());
  if (params.sliding_window > 0) max_keys = std::min(max_keys, params.sliding_window);

  cuda::AttentionLaunch a;
  a.q = q.f32();
  a.out = out.f32();
  a.k_cache = cache.k.data;
  a.v_cache = cache.v.data;
  a.kv_type = cache.k.type;
  a.tokens = tokens;
  a.heads = heads;
  a.kv_heads = cache.kv_heads;
  a.head_dim = head_dim;
  a.block_size = cache.block_size;
  a.sequences = *dev;
  a.sequence_count = static_cast<int32_t>(sequences.size());
  a.tables = *dev + 4 * sequences.size();
  a.scale = params.scale;
  a.softcap = params.softcap;
  a.window = params.sliding_window;
  if (trees) a.ancestors = reinterpret_cast<const uint32_t*>(*dev + masks_at);
  // Prefill (a sequence bringing 32 or more tokens): the tensor-core kernel, in tiles of 64 of a
  // sequence's tokens (2026-12-05, H100, Qwen3-8B Q4_K_M: prefill of 4,096 tokens 4,600 -> 12,400
  // tok/s). TERN_CUDA_ATTN_PREFILL=0 keeps the CUDA-core kernels for A/B runs.
  static const bool prefill_kernel = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_PREFILL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  int64_t most_new = 0;
  for (const auto& seq : sequences) most_new = std::max(most_new, seq.token_count);
  if (prefill_kernel && most_new >= 32 && cuda::prefill_attention_supported(a)) {
    std::vector<int32_t> tiles;
    for (size_t i = 0; i < sequences.size(); ++i) {
      for (int64_t t = 0; t < sequences[i].token_count; t += 64) {
        tiles.push_back(static_cast<int32_t>(i));
        tiles.push_back(static_cast<int32_t>(sequences[i].first_token + t));
      }
    }
    auto staged_tiles = stage(tiles);
    if (!staged_tiles) return fail(staged_tiles.error());
    const int32_t* td = *staged_tiles;
    const auto tile_count = static_cast<int64_t>(tiles.size() / 2);
    cudaStream_t s = stream_;
    enqueue({34, u(a.q), u(a.out), u(a.k_cache), u(a.v_cache), u(tokens), u(heads), u(a.kv_heads),
             u(head_dim), u(a.block_size), u(a.sequences), u(a.tables), u(a.scale), u(a.softcap),
             u(a.window), u(td), u(tile_count)},
            [=]() -> Result<void> {
              TERN_CUDA_TRY(cuda::prefill_attention(a, td, tile_count, s));
              return {};
            });
    return;
  }
  const int64_t group = heads / cache.kv_heads;
  a.decode_kernel = cuda::decode_attention_kernel(cache.k.type, head_dim, group, max_keys);
  // Enough blocks to fill the multiprocessors (cuda::attention_blocks_per_sm: 4 for v4 and v2,
  // one wave for the tensor-core kernel; TERN_CUDA_ATTN_SM_BLOCKS: another count, for A/B runs):
  // split long contexts when tokens x heads are few. A power of two, so that a decode step's
  // launch (and graph) stays the same for long spans.
  static const int64_t forced_blocks_per_sm = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_SM_BLOCKS");
    const int64_t b = v == nullptr ? 0 : std::atoll(v);
    return b >= 1 && b <= 16 ? b : 0;
  }();
  const int64_t blocks_per_sm = forced_blocks_per_sm > 0
                                    ? forced_blocks_per_sm
                                    : cuda::attention_blocks_per_sm(a.decode_kernel, head_dim);
  const int64_t per_block = cuda::attention_heads_per_block(a.decode_kernel, head_dim, group);
  const int64_t blocks = tokens * cache.kv_heads * ((group + per_block - 1) / per_block);
  const int64_t target = blocks_per_sm * std::max(1, info_.multiprocessors);
  // The power of two at or above what the keys ask for (within the blocks' cap), so that a
  // split is one pass of keys (v4: 32) where the cap allows: at 513 keys 32 splits of 32 instead
  // of 16 of 64 (two passes a block, one load round trip after the other). Measured (2026-12-06,
  // H100, Qwen3-8B Q4_K_M decode after 512 tokens, A B A B): GPU 2,925 / 2,928 -> 2,859 / 2,860
  // us a step. TERN_CUDA_ATTN_SPLITS=down keeps the power of two below.
  static const bool round_up = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_SPLITS");
    return v == nullptr || std::strcmp(v, "down") != 0;
  }();
  int64_t splits = 1;
  if (blocks < target) {
    const int64_t per_split = cuda::attention_split_keys(a.decode_kernel);
    const int64_t cap = (target + blocks - 1) / blocks;
    const int64_t want = std::min(cap, (max_keys + per_split - 1) / per_split);
    while (splits * 2 <= want) splits *= 2;
    if (round_up && splits < want && splits * 2 <= cap) splits *= 2;
  }
  a.splits = static_cast<int32_t>(splits);
  Temp partial;
  if (splits > 1) {
    auto t = temp(static_cast<size_t>(tokens * heads * splits * (head_dim + 2)) * sizeof(float));
    if (!t) return fail(t.error());
    partial = std::move(*t);
    a.partial = static_cast<float*>(partial.data);
  }
  // The v4 kernel loads its first keys before the PDL wait where no earlier op of this step
  // stored into the cache but this pass's own (graphs on: a step starts after the last one
  // ended, and its staged arrays went up before it). Measured (2026-12-06, H100, Qwen3-8B Q4_K_M
  // decode after 512 tokens, A B A B): GPU 2,925 / 2,928 -> 2,901 / 2,901 us a step; with the
  // rounded-up splits and the combine step's quantization 2,829 / 2,828. TERN_CUDA_ATTN_EARLY=0
  // turns it off.
  static const bool early = [] {
    const char* v = std::getenv("TERN_CUDA_ATTN_EARLY");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  a.early_keys = early && graphs_ &&
                 std::count(step_kv_stores_.begin(), step_kv_stores_.end(), cache.k.data) <= 1;
  // Decode attention that feeds the o projection writes the projection's 8-bit input in its
  // combine step (one token, split contexts: attention_output_quantizes).
  const Q8Target q8 = q8_for_next_product(a.out, tokens, heads * head_dim, [&](int g) {
    return cuda::attention_output_quantizes(a, g);
  });
  if (q8.xq != nullptr) {
    const cuda::Q8Activations qa = cuda::q8_activations(q8.xq, 1, heads * head_dim);
    a.out_q8.qs = const_cast<int8_t*>(qa.qs);
    a.out_q8.d = const_cast<float*>(qa.d);
    a.out_q8.s = const_cast<float*>(qa.s);
    a.out_q8.group = q8.group;  // (the combine step quantizes in-block: no counters)
  }
  cudaStream_t s = stream_;
  enqueue(
      {16,
       u(a.q),
       u(a.out),
       u(a.k_cache),
       u(a.v_cache),
       static_cast<uint64_t>(a.kv_type),
       u(tokens),
       u(heads),
       u(a.kv_heads),
       u(head_dim),
       u(a.block_size),
       u(a.sequences),
       static_cast<uint64_t>(a.sequence_count),
       u(a.tables),
       u(a.scale),
       u(a.softcap),
       u(a.window),
       static_cast<uint64_t>(a.splits),
       static_cast<uint64_t>(a.decode_kernel),
       u(a.partial),
       u(a.ancestors),
       static_cast<uint64_t>(a.early_keys),
       u(a.out_q8.qs),
       static_cast<uint64_t>(a.out_q8.group)},
      [a, s]() -> Result<void> {
        TERN_CUDA_TRY(cuda::attention(a, s));
        return {};
      },
      q8.xq != nullptr);
}

}  // namespace tern

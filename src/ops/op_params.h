// The parameter types ops take besides tensors: rotary embedding, the paged KV layout, which new
// tokens belong to which sequence (and a token tree's ancestors), attention options, one
// temperature draw, a mixture-of-experts layer's experts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/tensor.h"

namespace tern {

// Rotary position embedding of the first `rotary_dim` values of each head.
struct RopeParams {
  int64_t rotary_dim = 0;
  float theta = 10000.0f;
  bool neox = false;            // pairs (i, i + rotary_dim/2) instead of (2i, 2i + 1)
  float position_scale = 1.0f;  // linear scaling: positions are multiplied by this
  std::vector<float> inverse_frequency_factors;  // per pair (rotary_dim/2): divides the frequency
};

// One attention layer's paged KV storage: [blocks, block_size, kv_heads, head_dim] for K and V.
struct KvLayer {
  Tensor k;
  Tensor v;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// Which new tokens belong to which sequence, and where that sequence's cached tokens live.
struct AttentionSequence {
  int64_t first_token = 0;     // row of the batch where this sequence's new tokens start
  int64_t token_count = 0;     // new tokens of this sequence in the batch
  int64_t first_position = 0;  // position of the first new token (= tokens already cached)
  std::span<const int32_t>
      block_table;  // pool block ids covering positions [0, first_position + token_count)
  // A token tree (speculative decoding's verify pass; empty: causal). One mask per new token, at
  // most kMaxTreeTokens of them: new token i attends to every cached position (< first_position)
  // and to new token j when bit j of ancestors[i] is set (its ancestors and itself). The new
  // tokens' keys sit in cache slots first_position + j in token order; a sliding window counts
  // slots.
  std::span<const uint64_t> ancestors;
};
inline constexpr int64_t kMaxTreeTokens = 64;

struct AttentionParams {
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0: attend to every earlier position
  float softcap = 0.0f;        // 0: no soft-capping of scores
};

// One temperature draw from a row of logits (backend/device/sample_pick.h has its arithmetic).
struct SampleDraw {
  float temperature = 1.0f;  // > 0
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  double uniform = 0.0;      // the draw, in [0, 1)
};

enum class Activation : uint8_t { Silu, GeluTanh };

// One expert's gated MLP of a mixture-of-experts layer.
struct ExpertMlp {
  Tensor gate, up, down;
};

// How a mixture-of-experts layer routes: a softmax over every expert's router logit, the `used`
// best per token (ties to the lower expert), their probabilities renormalised when `normalize`.
struct MoeRouting {
  int64_t experts = 0;      // in the model
  int64_t used = 0;         // per token
  int64_t first_local = 0;  // expert parallelism: the experts this rank holds start here
  bool normalize = false;
};

}  // namespace tern

// The pieces decoder-only transformers share: the per-batch state (positions, KV slots,
// attention metadata, scratch), grouped-query self-attention over the paged cache, the gated
// MLP and the LM head. Architecture files compose these; the device does the arithmetic.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "backend/device/device.h"
#include "kv/kv_cache.h"
#include "models/model.h"

namespace tern {

class ForwardState {
 public:
  ForwardState(Device& device, KvCache& cache, std::span<SequenceBatch> batch);

  Device& device;
  KvCache& cache;
  int64_t tokens = 0;              // new tokens in the batch
  std::vector<int32_t> ids;        // [tokens]
  std::vector<int32_t> positions;  // [tokens]
  std::vector<int32_t> slots;      // [tokens] KV slot of each new token
  std::vector<AttentionSequence> sequences;
  std::vector<int64_t> logit_rows;  // batch rows whose logits are wanted

  // A fresh F32 buffer [rows, cols] that lives as long as this state.
  Result<Tensor> scratch(int64_t rows, int64_t cols);
  // Marks every sequence's new tokens as cached.
  void commit();

 private:
  std::span<SequenceBatch> batch_;
  std::vector<DeviceBuffer> buffers_;
};

struct AttentionWeights {
  Tensor q, k, v, o;
  std::optional<Tensor> q_bias, k_bias, v_bias;  // qwen2
  std::optional<Tensor> q_norm, k_norm;          // per-head RMSNorm (qwen3, gemma3)
};

struct AttentionConfig {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float norm_eps = 1e-6f;
  RopeParams rope;
  AttentionParams params;
};

// out [tokens, hidden] = o_proj(attention(rope(q), rope(k), v)) for the normalised input x.
Result<void> self_attention(ForwardState& st, const AttentionWeights& w, const AttentionConfig& cfg,
                            KvLayer& cache, const Tensor& x, Tensor& out);

struct MlpWeights {
  Tensor gate, up, down;
};
enum class Activation { Silu, GeluTanh };

// out = down(act(gate(x)) * up(x)).
Result<void> gated_mlp(ForwardState& st, const MlpWeights& w, Activation act, const Tensor& x,
                       Tensor& out);

// Final norm and output projection of the rows in st.logit_rows; appends them to `logits`.
Result<void> lm_head(ForwardState& st, const Tensor& hidden, const Tensor& norm, float eps,
                     const Tensor& output, std::vector<float>& logits);

// Loads q/k/v/o (+ optional biases and q/k norms) of one layer.
class WeightLoader;
Result<AttentionWeights> load_attention(WeightLoader& w, int64_t layer, int64_t hidden,
                                        const AttentionConfig& cfg, bool biases, bool qk_norm,
                                        float norm_add = 0.0f);
Result<MlpWeights> load_mlp(WeightLoader& w, int64_t layer, int64_t hidden, int64_t ffn);

}  // namespace tern

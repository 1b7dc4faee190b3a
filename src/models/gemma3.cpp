// Gemma 3: sandwich-normed decoder blocks (RMSNorm before and after both attention and MLP),
// per-head q/k RMSNorm, a GELU-gated MLP, embeddings scaled by sqrt(hidden) and tied to the
// output. Five of every six layers attend within a sliding window with their own RoPE base;
// every sixth is global. GGUF files store the RMSNorm weights with Gemma's +1 already added.
#include <cmath>

#include "models/llama.h"
#include "models/weights.h"

namespace tern {
namespace {

struct Gemma3Layer {
  Tensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm;
  AttentionWeights attn;
  MlpWeights mlp;
  bool sliding = false;
};

struct Gemma3Config {
  ModelShape shape;
  int64_t ffn = 0;
  float norm_eps = 1e-6f;
  int64_t sliding_window = 0;
  int64_t sliding_pattern = 6;  // every Nth layer is global
  AttentionConfig local;        // sliding-window layers
  AttentionConfig global;
};

class Gemma3Model final : public Model {
 public:
  Gemma3Model(Device& device, Gemma3Config config) : device_(device), config_(std::move(config)) {}

  const ModelShape& shape() const override { return config_.shape; }
  Device& device() const override { return device_; }

  Result<Tensor> forward(std::span<SequenceBatch> batch, KvCache& cache, StepPlan& plan) override {
    TERN_TRY(check_token_trees(batch));
    ForwardState st(device_, cache, batch, plan);
    Ops& ops = st.ops;
    const int64_t hidden = config_.shape.hidden;
    auto x = st.scratch(st.tokens, hidden);
    auto h = st.scratch(st.tokens, hidden);
    auto y = st.scratch(st.tokens, hidden);
    if (!x || !h || !y) return Error{"out of memory for activations"};
    TERN_TRY(embed(st, embedding_, *x));
    ops.scale(*x, std::sqrt(static_cast<float>(hidden)));
    const float eps = config_.norm_eps;
    ops.rms_norm(*x, layers_.front().attn_norm, eps, *h);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Gemma3Layer& layer = layers_[l];
      const AttentionConfig& attn_cfg = layer.sliding ? config_.local : config_.global;
      TERN_TRY(
          self_attention(st, layer.attn, attn_cfg, cache.layer(static_cast<int64_t>(l)), *h, *y));
      ops.rms_norm(*y, layer.post_attn_norm, eps, *y);
      ops.add_rms_norm(*x, *y, layer.ffn_norm, eps, *h);
      TERN_TRY(gated_mlp(st, layer.mlp, Activation::GeluTanh, *h, *y));
      ops.rms_norm(*y, layer.post_ffn_norm, eps, *y);
      if (l + 1 < layers_.size()) {
        ops.add_rms_norm(*x, *y, layers_[l + 1].attn_norm, eps, *h);
      } else {
        ops.add(*x, *y, *x);
      }
    }
    auto logits = lm_head(st, *x, output_norm_, eps, embedding_);
    TERN_TRY(plan.status());
    st.commit();
    return logits;
  }

  Result<void> load(WeightLoader& w) {
    const auto& s = config_.shape;
    // Tied: the embedding table is also the LM head.
    auto embd = load_vocab_table(w, "token_embd.weight", s.hidden, true);
    if (!embd) return embd.error();
    embedding_ = *embd;
    config_.shape.vocab = embedding_.vocab;
    auto vec = [&](Tensor& t, int64_t l, const char* name) -> Result<void> {
      auto v = w.vector(WeightLoader::layer_name(l, name), s.hidden);
      if (!v) return v.error();
      t = *v;
      return {};
    };
    for (int64_t l = 0; l < s.layers; ++l) {
      Gemma3Layer layer;
      layer.sliding = config_.sliding_window > 0 && (l + 1) % config_.sliding_pattern != 0;
      TERN_TRY(vec(layer.attn_norm, l, "attn_norm.weight"));
      TERN_TRY(vec(layer.post_attn_norm, l, "post_attention_norm.weight"));
      TERN_TRY(vec(layer.ffn_norm, l, "ffn_norm.weight"));
      TERN_TRY(vec(layer.post_ffn_norm, l, "post_ffw_norm.weight"));
      auto attn = load_attention(w, l, s.hidden, config_.global, false, true);
      if (!attn) return attn.error();
      layer.attn = *attn;
      auto mlp = load_mlp(w, l, s.hidden, config_.ffn);
      if (!mlp) return mlp.error();
      layer.mlp = *mlp;
      layers_.push_back(layer);
    }
    auto norm = w.vector("output_norm.weight", s.hidden);
    if (!norm) return norm.error();
    output_norm_ = *norm;
    owned_ = std::move(w.owned());
    return {};
  }

 private:
  Device& device_;
  Gemma3Config config_;
  VocabTable embedding_;
  Tensor output_norm_;
  std::vector<Gemma3Layer> layers_;
  std::vector<DeviceBuffer> owned_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_gemma3(const GgufFile& file, Device& device,
                                           const TensorParallel& tp) {
  ArchKeys keys(file, "gemma3");
  Gemma3Config c;
  c.shape.architecture = "gemma3";
  auto get = [&](const char* key, int64_t& out) -> Result<void> {
    auto v = keys.integer(key);
    if (!v) return v.error();
    if (*v <= 0) return make_error("gemma3.{} must be positive", key);
    out = *v;
    return {};
  };
  TERN_TRY(get("embedding_length", c.shape.hidden));
  TERN_TRY(get("block_count", c.shape.layers));
  TERN_TRY(get("attention.head_count", c.shape.heads));
  TERN_TRY(get("feed_forward_length", c.ffn));
  c.shape.kv_heads = keys.integer_or("attention.head_count_kv", c.shape.heads);
  c.shape.head_dim = keys.integer_or("attention.key_length", 256);
  c.shape.context_length = keys.integer_or("context_length", 32768);
  if (c.shape.kv_heads <= 0 || c.shape.heads % c.shape.kv_heads != 0) {
    return make_error("gemma3: {} heads cannot be grouped over {} KV heads", c.shape.heads,
                      c.shape.kv_heads);
  }
  c.norm_eps = keys.number_or("attention.layer_norm_rms_epsilon", 1e-6f);
  c.sliding_window = keys.integer_or("attention.sliding_window", 0);
  c.sliding_pattern = keys.integer_or("attention.sliding_window_pattern", 6);
  if (c.sliding_pattern <= 0)
    return make_error("gemma3.attention.sliding_window_pattern must be positive");

  AttentionConfig base;
  base.heads = c.shape.heads;
  base.kv_heads = c.shape.kv_heads;
  base.head_dim = c.shape.head_dim;
  base.norm_eps = c.norm_eps;
  base.rope.rotary_dim = c.shape.head_dim;
  base.rope.neox = true;
  // Queries are scaled by query_pre_attn_scalar^-1/2: converted HF checkpoints record it; GGUF
  // files from llama.cpp do not, and there Gemma 3 27B uses hidden/heads, the others head size.
  const float default_scalar = c.shape.layers == 62
                                   ? static_cast<float>(c.shape.hidden / c.shape.heads)
                                   : static_cast<float>(c.shape.head_dim);
  const float scalar = keys.number_or("attention.query_pre_attn_scalar", default_scalar);
  if (!(scalar > 0.0f))
    return make_error("gemma3.attention.query_pre_attn_scalar must be positive");
  base.params.scale = 1.0f / std::sqrt(scalar);
  TERN_TRY(split_heads(base, tp));
  c.shape.ranks = tp.size;
  c.shape.rank_kv_heads = base.kv_heads;
  c.global = base;
  c.global.rope.theta = keys.number_or("rope.freq_base", 1000000.0f);
  if (keys.string_or("rope.scaling.type", "none") == "linear") {
    c.global.rope.position_scale = 1.0f / keys.number_or("rope.scaling.factor", 1.0f);
  }
  c.local = base;
  c.local.rope.theta = keys.number_or("rope.freq_base_swa", 10000.0f);
  c.local.params.sliding_window = c.sliding_window;

  auto model = std::make_unique<Gemma3Model>(device, std::move(c));
  WeightLoader loader(file, device, tp);
  TERN_TRY(model->load(loader));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tern

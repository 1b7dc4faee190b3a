// Llama: pre-norm decoder blocks of grouped-query attention (RoPE) and a SiLU-gated MLP,
// RMSNorm everywhere, optionally tied input/output embeddings. GGUF stores Llama's q/k weights
// permuted so that RoPE rotates interleaved pairs; Qwen files keep HF's rotate-half layout.
#include "models/llama.h"

#include <cmath>

#include "models/weights.h"

namespace tern {
namespace {

struct LlamaLayer {
  Tensor attn_norm;
  AttentionWeights attn;
  Tensor ffn_norm;
  MlpWeights mlp;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(Device& device, DecoderConfig config) : device_(device), config_(std::move(config)) {}

  const ModelShape& shape() const override { return config_.shape; }
  Device& device() const override { return device_; }

  Result<Tensor> forward(std::span<SequenceBatch> batch, KvCache& cache, StepPlan& plan) override {
    TERN_TRY(check_token_trees(batch));
    ForwardState st(device_, cache, batch, plan);
    Ops& ops = st.ops;
    const int64_t hidden = config_.shape.hidden;
    const float eps = config_.norm_eps;
    auto x = st.scratch(st.tokens, hidden);
    auto h = st.scratch(st.tokens, hidden);
    auto y = st.scratch(st.tokens, hidden);
    if (!x || !h || !y) return Error{"out of memory for activations"};
    TERN_TRY(embed(st, embedding_, *x));
    ops.rms_norm(*x, layers_.front().attn_norm, eps, *h);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const LlamaLayer& layer = layers_[l];
      TERN_TRY(self_attention(st, layer.attn, config_.attention,
                              cache.layer(static_cast<int64_t>(l)), *h, *y));
      ops.add_rms_norm(*x, *y, layer.ffn_norm, eps, *h);
      TERN_TRY(gated_mlp(st, layer.mlp, Activation::Silu, *h, *y));
      if (l + 1 < layers_.size()) {
        ops.add_rms_norm(*x, *y, layers_[l + 1].attn_norm, eps, *h);
      } else {
        ops.add(*x, *y, *x);
      }
    }
    auto logits = lm_head(st, *x, output_norm_, eps, output_);
    TERN_TRY(plan.status());
    st.commit();
    return logits;
  }

  Result<void> load(WeightLoader& w) {
    const auto& s = config_.shape;
    // Tied embeddings are also the LM head, the largest matmul of a decode step.
    const bool tied = !w.has("output.weight");
    auto embd = load_vocab_table(w, "token_embd.weight", s.hidden, tied);
    if (!embd) return embd.error();
    embedding_ = *embd;
    config_.shape.vocab = embedding_.vocab;
    for (int64_t l = 0; l < s.layers; ++l) {
      LlamaLayer layer;
      auto an = w.vector(WeightLoader::layer_name(l, "attn_norm.weight"), s.hidden);
      if (!an) return an.error();
      layer.attn_norm = *an;
      auto attn =
          load_attention(w, l, s.hidden, config_.attention, variant_.qkv_bias, variant_.qk_norm);
      if (!attn) return attn.error();
      layer.attn = *attn;
      auto fn = w.vector(WeightLoader::layer_name(l, "ffn_norm.weight"), s.hidden);
      if (!fn) return fn.error();
      layer.ffn_norm = *fn;
      auto mlp = load_mlp(w, l, s.hidden, config_.ffn);
      if (!mlp) return mlp.error();
      layer.mlp = *mlp;
      layers_.push_back(layer);
    }
    auto norm = w.vector("output_norm.weight", s.hidden);
    if (!norm) return norm.error();
    output_norm_ = *norm;
    if (tied) {
      output_ = embedding_;
    } else {
      auto out = load_vocab_table(w, "output.weight", s.hidden, true);
      if (!out) return out.error();
      if (out->vocab != embedding_.vocab) {
        return make_error("output.weight has {} rows but the vocabulary has {} tokens", out->vocab,
                          embedding_.vocab);
      }
      output_ = *out;
    }
    owned_ = std::move(w.owned());
    return {};
  }

  LlamaVariant variant_;

 private:
  Device& device_;
  DecoderConfig config_;
  VocabTable embedding_, output_;
  Tensor output_norm_;
  std::vector<LlamaLayer> layers_;
  std::vector<DeviceBuffer> owned_;
};

// Llama 3.x "llama3" rope scaling stored as per-pair frequency divisors (rope_freqs.weight).
Result<void> read_rope_factors(const GgufFile& file, RopeParams& rope) {
  const GgufTensor* t = file.find_tensor("rope_freqs.weight");
  if (t == nullptr) return {};
  if (t->type != TensorType::F32 || static_cast<int64_t>(t->elements()) != rope.rotary_dim / 2) {
    return make_error("rope_freqs.weight must hold {} F32 values", rope.rotary_dim / 2);
  }
  const auto* f = reinterpret_cast<const float*>(t->data);
  rope.inverse_frequency_factors.assign(f, f + rope.rotary_dim / 2);
  return {};
}

}  // namespace

Result<DecoderConfig> read_decoder_config(const GgufFile& file, const LlamaVariant& variant,
                                          const TensorParallel& tp) {
  const GgufValue* arch_value = file.metadata().find("general.architecture");
  std::string arch = arch_value && arch_value->as_string() ? *arch_value->as_string() : "llama";
  ArchKeys keys(file, arch);
  DecoderConfig c;
  c.shape.architecture = arch;
  auto get = [&](const char* key, int64_t& out) -> Result<void> {
    auto v = keys.integer(key);
    if (!v) return v.error();
    if (*v <= 0) return make_error("{}.{} must be positive", arch, key);
    out = *v;
    return {};
  };
  TERN_TRY(get("embedding_length", c.shape.hidden));
  TERN_TRY(get("block_count", c.shape.layers));
  TERN_TRY(get("attention.head_count", c.shape.heads));
  c.ffn = keys.integer_or("feed_forward_length", 0);  // checked by the models with dense MLPs
  c.shape.kv_heads = keys.integer_or("attention.head_count_kv", c.shape.heads);
  c.shape.head_dim = keys.integer_or("attention.key_length", c.shape.hidden / c.shape.heads);
  c.shape.context_length = keys.integer_or("context_length", 4096);
  if (c.shape.kv_heads <= 0 || c.shape.heads % c.shape.kv_heads != 0) {
    return make_error("{}: {} attention heads cannot be grouped over {} KV heads", arch,
                      c.shape.heads, c.shape.kv_heads);
  }
  c.norm_eps = keys.number_or("attention.layer_norm_rms_epsilon", 1e-5f);
  AttentionConfig& a = c.attention;
  a.heads = c.shape.heads;
  a.kv_heads = c.shape.kv_heads;
  a.head_dim = c.shape.head_dim;
  a.norm_eps = c.norm_eps;
  a.rope.rotary_dim = keys.integer_or("rope.dimension_count", c.shape.head_dim);
  a.rope.theta = keys.number_or("rope.freq_base", 10000.0f);
  a.rope.neox = variant.neox_rope;
  if (keys.string_or("rope.scaling.type", "none") == "linear") {
    a.rope.position_scale = 1.0f / keys.number_or("rope.scaling.factor", 1.0f);
  }
  TERN_TRY(read_rope_factors(file, a.rope));
  a.params.scale = 1.0f / std::sqrt(static_cast<float>(c.shape.head_dim));
  TERN_TRY(split_heads(a, tp));
  c.shape.ranks = tp.size;
  c.shape.rank_kv_heads = a.kv_heads;

  return c;
}

Result<std::unique_ptr<Model>> load_llama_family(const GgufFile& file, Device& device,
                                                 const LlamaVariant& variant,
                                                 const TensorParallel& tp) {
  auto config = read_decoder_config(file, variant, tp);
  if (!config) return config.error();
  DecoderConfig& c = *config;
  if (c.ffn <= 0) {
    return make_error("{}.feed_forward_length must be positive", c.shape.architecture);
  }
  auto model = std::make_unique<LlamaModel>(device, std::move(c));
  model->variant_ = variant;
  WeightLoader loader(file, device, tp);
  TERN_TRY(model->load(loader));
  return std::unique_ptr<Model>(std::move(model));
}

Result<std::unique_ptr<Model>> load_llama(const GgufFile& file, Device& device,
                                          const TensorParallel& tp) {
  return load_llama_family(file, device, LlamaVariant{}, tp);
}

}  // namespace tern

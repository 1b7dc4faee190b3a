// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B): Qwen3's attention (per-head
// q/k RMSNorm, rotate-half RoPE, explicit head size) with a mixture-of-experts feed-forward
// block (models/moe.h) in every layer that has a router; a layer without one (mlp_only_layers
// in the Hugging Face config) keeps a dense gated MLP.
// Keys beyond Qwen3's: qwen3moe.expert_count, expert_used_count, expert_feed_forward_length,
// and expert_weights_norm (renormalise the chosen experts' weights; true when absent, as
// llama.cpp runs these files).
#include <cmath>

#include "models/llama.h"
#include "models/moe.h"
#include "models/weights.h"

namespace tern {
namespace {

struct Qwen3MoeConfig {
  DecoderConfig decoder;
  MoeConfig moe;
};

struct Qwen3MoeLayer {
  Tensor attn_norm;
  AttentionWeights attn;
  Tensor ffn_norm;
  std::optional<MoeWeights> moe;  // else the dense MLP
  MlpWeights mlp;
};

class Qwen3MoeModel final : public Model {
 public:
  Qwen3MoeModel(Device& device, Qwen3MoeConfig config)
      : device_(device), config_(std::move(config)) {}

  const ModelShape& shape() const override { return config_.decoder.shape; }
  Device& device() const override { return device_; }

  Result<Tensor> forward(std::span<SequenceBatch> batch, KvCache& cache, StepPlan& plan) override {
    TERN_TRY(check_token_trees(batch));
    ForwardState st(device_, cache, batch, plan);
    Ops& ops = st.ops;
    const DecoderConfig& c = config_.decoder;
    const float eps = c.norm_eps;
    auto x = st.scratch(st.tokens, c.shape.hidden);
    auto h = st.scratch(st.tokens, c.shape.hidden);
    auto y = st.scratch(st.tokens, c.shape.hidden);
    if (!x || !h || !y) return Error{"out of memory for activations"};
    TERN_TRY(embed(st, embedding_, *x));
    ops.rms_norm(*x, layers_.front().attn_norm, eps, *h);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Qwen3MoeLayer& layer = layers_[l];
      TERN_TRY(self_attention(st, layer.attn, c.attention, cache.layer(static_cast<int64_t>(l)), *h,
                              *y));
      ops.add_rms_norm(*x, *y, layer.ffn_norm, eps, *h);
      if (layer.moe) {
        TERN_TRY(sparse_moe(st, *layer.moe, config_.moe, *h, *y));
      } else {
        TERN_TRY(gated_mlp(st, layer.mlp, Activation::Silu, *h, *y));
      }
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
    const DecoderConfig& c = config_.decoder;
    const int64_t hidden = c.shape.hidden;
    const bool tied = !w.has("output.weight");
    auto embd = load_vocab_table(w, "token_embd.weight", hidden, tied);
    if (!embd) return embd.error();
    embedding_ = *embd;
    config_.decoder.shape.vocab = embedding_.vocab;
    for (int64_t l = 0; l < c.shape.layers; ++l) {
      Qwen3MoeLayer layer;
      auto an = w.vector(WeightLoader::layer_name(l, "attn_norm.weight"), hidden);
      if (!an) return an.error();
      layer.attn_norm = *an;
      auto attn = load_attention(w, l, hidden, c.attention, false, true);
      if (!attn) return attn.error();
      layer.attn = *attn;
      auto fn = w.vector(WeightLoader::layer_name(l, "ffn_norm.weight"), hidden);
      if (!fn) return fn.error();
      layer.ffn_norm = *fn;
      if (w.has(WeightLoader::layer_name(l, "ffn_gate_inp.weight"))) {
        auto moe = load_moe(w, l, hidden, config_.moe);
        if (!moe) return moe.error();
        layer.moe = std::move(*moe);
      } else {
        if (c.ffn <= 0) {
          return make_error("layer {} has a dense MLP but qwen3moe.feed_forward_length is not set",
                            l);
        }
        auto mlp = load_mlp(w, l, hidden, c.ffn);
        if (!mlp) return mlp.error();
        layer.mlp = *mlp;
      }
      layers_.push_back(std::move(layer));
    }
    auto norm = w.vector("output_norm.weight", hidden);
    if (!norm) return norm.error();
    output_norm_ = *norm;
    if (tied) {
      output_ = embedding_;
    } else {
      auto out = load_vocab_table(w, "output.weight", hidden, true);
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

 private:
  Device& device_;
  Qwen3MoeConfig config_;
  VocabTable embedding_, output_;
  Tensor output_norm_;
  std::vector<Qwen3MoeLayer> layers_;
  std::vector<DeviceBuffer> owned_;
};

Result<MoeConfig> read_moe_config(const GgufFile& file, const std::string& arch) {
  ArchKeys keys(file, arch);
  MoeConfig m;
  auto experts = keys.integer("expert_count");
  if (!experts) return experts.error();
  auto used = keys.integer("expert_used_count");
  if (!used) return used.error();
  auto ffn = keys.integer("expert_feed_forward_length");
  if (!ffn) return ffn.error();
  if (*experts <= 0 || *used <= 0 || *used > *experts || *ffn <= 0) {
    return make_error("{}: {} experts with {} used per token of size {} is not a valid mixture",
                      arch, *experts, *used, *ffn);
  }
  m.experts = *experts;
  m.used = *used;
  m.ffn = *ffn;
  m.normalize = true;
  if (const GgufValue* v = file.metadata().find(arch + ".expert_weights_norm")) {
    if (v->as_bool()) m.normalize = *v->as_bool();
  }
  return m;
}

}  // namespace

Result<std::unique_ptr<Model>> load_qwen3moe(const GgufFile& file, Device& device,
                                             const TensorParallel& tp) {
  auto decoder = read_decoder_config(file, LlamaVariant{.qk_norm = true, .neox_rope = true}, tp);
  if (!decoder) return decoder.error();
  auto moe = read_moe_config(file, decoder->shape.architecture);
  if (!moe) return moe.error();
  auto model = std::make_unique<Qwen3MoeModel>(device, Qwen3MoeConfig{*decoder, *moe});
  WeightLoader loader(file, device, tp);
  TERN_TRY(model->load(loader));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tern

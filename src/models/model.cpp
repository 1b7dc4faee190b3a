#include "models/model.h"

#include "models/llama.h"

namespace tern {

KvCacheConfig Model::kv_config(int64_t context_tokens, TensorType type, int64_t block_size) const {
  const ModelShape& s = shape();
  KvCacheConfig c;
  c.layers = s.layers;
  c.kv_heads = s.cached_kv_heads();
  c.head_dim = s.head_dim;
  c.block_size = block_size;
  c.blocks = (context_tokens + block_size - 1) / block_size;
  c.type = type;
  return c;
}

Result<std::unique_ptr<Model>> load_model(const GgufFile& file, Device& device,
                                          const TensorParallel& tp) {
  const GgufValue* arch = file.metadata().find("general.architecture");
  if (arch == nullptr || arch->as_string() == nullptr) {
    return make_error("{}: general.architecture is missing", file.paths()[0]);
  }
  const std::string& name = *arch->as_string();
  if (name == "llama") return load_llama(file, device, tp);
  if (name == "qwen2") return load_qwen2(file, device, tp);
  if (name == "qwen3") return load_qwen3(file, device, tp);
  if (name == "qwen3moe") return load_qwen3moe(file, device, tp);
  if (name == "gemma3") return load_gemma3(file, device, tp);
  return make_error(
      "{}: architecture '{}' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gemma3)",
      file.paths()[0], name);
}

Result<void> forward_logits(Model& model, std::span<SequenceBatch> batch, KvCache& cache,
                            std::vector<float>& logits) {
  StepPlan plan;
  auto rows = model.forward(batch, cache, plan);
  if (!rows) return rows.error();
  TERN_TRY(model.execute(plan));
  if (rows->data == nullptr) return {};
  const size_t at = logits.size(), n = static_cast<size_t>(rows->elements());
  logits.resize(at + n);
  model.device().download(rows->data, logits.data() + at, n * sizeof(float));
  return {};
}

Result<void> check_token_trees(std::span<const SequenceBatch> batch) {
  for (size_t b = 0; b < batch.size(); ++b) {
    const auto& parents = batch[b].tree_parents;
    if (parents.empty()) continue;
    if (parents.size() != batch[b].tokens.size()) {
      return make_error("sequence {} of the batch: a token tree of {} parents for {} new tokens", b,
                        parents.size(), batch[b].tokens.size());
    }
    if (static_cast<int64_t>(parents.size()) > kMaxTreeTokens) {
      return make_error("sequence {} of the batch: a token tree of {} tokens (at most {})", b,
                        parents.size(), kMaxTreeTokens);
    }
    for (size_t i = 0; i < parents.size(); ++i) {
      if (parents[i] < -1 || parents[i] >= static_cast<int32_t>(i)) {
        return make_error(
            "sequence {} of the batch: tree token {} has parent {} (it must be -1 or an earlier "
            "token)",
            b, i, parents[i]);
      }
    }
  }
  return {};
}

}  // namespace tern

#include "models/transformer.h"

#include "models/weights.h"

namespace tern {

ForwardState::ForwardState(Device& dev, KvCache& kv_cache, std::span<SequenceBatch> batch)
    : device(dev), cache(kv_cache), batch_(batch) {
  for (const auto& s : batch) {
    AttentionSequence seq;
    seq.first_token = tokens;
    seq.token_count = static_cast<int64_t>(s.tokens.size());
    seq.first_position = s.kv->length;
    seq.block_table = s.kv->blocks;
    sequences.push_back(seq);
    auto seq_slots = cache.slots(*s.kv, s.kv->length, seq.token_count);
    for (int64_t i = 0; i < seq.token_count; ++i) {
      ids.push_back(s.tokens[static_cast<size_t>(i)]);
      positions.push_back(static_cast<int32_t>(s.kv->length + i));
      slots.push_back(seq_slots[static_cast<size_t>(i)]);
      if (s.logits_for_all || (s.last_logits && i + 1 == seq.token_count)) {
        logit_rows.push_back(tokens + i);
      }
    }
    tokens += seq.token_count;
  }
}

Result<Tensor> ForwardState::scratch(int64_t rows, int64_t cols) {
  auto buffer = device.allocate(static_cast<size_t>(rows * cols) * sizeof(float));
  if (!buffer) return buffer.error();
  Tensor t;
  t.data = buffer->data();
  t.ne = {cols, rows, 1, 1};
  buffers_.push_back(std::move(*buffer));
  return t;
}

void ForwardState::commit() {
  for (auto& s : batch_) s.kv->length += static_cast<int64_t>(s.tokens.size());
}

Result<void> self_attention(ForwardState& st, const AttentionWeights& w, const AttentionConfig& cfg,
                            KvLayer& cache, const Tensor& x, Tensor& out) {
  Device& dev = st.device;
  const int64_t n = st.tokens;
  auto q = st.scratch(n, cfg.heads * cfg.head_dim);
  auto k = st.scratch(n, cfg.kv_heads * cfg.head_dim);
  auto v = st.scratch(n, cfg.kv_heads * cfg.head_dim);
  auto attn = st.scratch(n, cfg.heads * cfg.head_dim);
  if (!q || !k || !v || !attn) return Error{"out of memory for attention activations"};
  TERN_TRY(dev.matmul(w.q, x, *q));
  TERN_TRY(dev.matmul(w.k, x, *k));
  TERN_TRY(dev.matmul(w.v, x, *v));
  if (w.q_bias) dev.add_row_vector(*q, *w.q_bias);
  if (w.k_bias) dev.add_row_vector(*k, *w.k_bias);
  if (w.v_bias) dev.add_row_vector(*v, *w.v_bias);
  // Views as [n, heads, head_dim] for the per-head ops.
  Tensor qh = *q, kh = *k;
  qh.ne = {cfg.head_dim, cfg.heads, n, 1};
  kh.ne = {cfg.head_dim, cfg.kv_heads, n, 1};
  if (w.q_norm) dev.rms_norm(qh, &*w.q_norm, cfg.norm_eps, qh);
  if (w.k_norm) dev.rms_norm(kh, &*w.k_norm, cfg.norm_eps, kh);
  dev.rope(qh, st.positions, cfg.rope);
  dev.rope(kh, st.positions, cfg.rope);
  Tensor vh = *v;
  vh.ne = kh.ne;
  dev.store_kv(cache, kh, vh, st.slots);
  Tensor oh = *attn;
  oh.ne = qh.ne;
  dev.attention(qh, cache, st.sequences, cfg.params, oh);
  return dev.matmul(w.o, *attn, out);
}

Result<void> gated_mlp(ForwardState& st, const MlpWeights& w, Activation act, const Tensor& x,
                       Tensor& out) {
  const int64_t ffn = w.gate.rows();
  auto gate = st.scratch(st.tokens, ffn);
  auto up = st.scratch(st.tokens, ffn);
  if (!gate || !up) return Error{"out of memory for MLP activations"};
  TERN_TRY(st.device.matmul(w.gate, x, *gate));
  TERN_TRY(st.device.matmul(w.up, x, *up));
  if (act == Activation::Silu) {
    st.device.silu_mul(*gate, *up, *gate);
  } else {
    st.device.gelu_tanh_mul(*gate, *up, *gate);
  }
  return st.device.matmul(w.down, *gate, out);
}

Result<void> lm_head(ForwardState& st, const Tensor& hidden, const Tensor& norm, float eps,
                     const Tensor& output, std::vector<float>& logits) {
  const int64_t rows = static_cast<int64_t>(st.logit_rows.size());
  if (rows == 0) return {};
  const int64_t dim = hidden.ne[0];
  const int64_t vocab = output.rows();
  auto picked = st.scratch(rows, dim);
  auto out = st.scratch(rows, vocab);
  if (!picked || !out) return Error{"out of memory for logits"};
  // Gather the wanted rows on the device (no host round trip inside the forward pass).
  for (int64_t i = 0; i < rows;) {
    int64_t run = 1;  // consecutive batch rows go in one copy
    while (i + run < rows && st.logit_rows[static_cast<size_t>(i + run)] ==
                                 st.logit_rows[static_cast<size_t>(i)] + run)
      ++run;
    const float* src = hidden.f32() + st.logit_rows[static_cast<size_t>(i)] * dim;
    st.device.copy(src, picked->f32() + i * dim, static_cast<size_t>(run * dim) * sizeof(float));
    i += run;
  }
  st.device.rms_norm(*picked, &norm, eps, *picked);
  TERN_TRY(st.device.matmul(output, *picked, *out));
  const size_t at = logits.size();
  logits.resize(at + static_cast<size_t>(rows * vocab));
  st.device.download(out->data, logits.data() + at,
                     static_cast<size_t>(rows * vocab) * sizeof(float));
  return {};
}

Result<AttentionWeights> load_attention(WeightLoader& w, int64_t layer, int64_t hidden,
                                        const AttentionConfig& cfg, bool biases, bool qk_norm,
                                        float norm_add) {
  AttentionWeights a;
  const int64_t q_dim = cfg.heads * cfg.head_dim, kv_dim = cfg.kv_heads * cfg.head_dim;
  auto load = [&](Tensor& t, const char* name, int64_t rows, int64_t cols) -> Result<void> {
    auto m = w.matmul_weight(WeightLoader::layer_name(layer, name), rows, cols);
    if (!m) return m.error();
    t = *m;
    return {};
  };
  TERN_TRY(load(a.q, "attn_q.weight", q_dim, hidden));
  TERN_TRY(load(a.k, "attn_k.weight", kv_dim, hidden));
  TERN_TRY(load(a.v, "attn_v.weight", kv_dim, hidden));
  TERN_TRY(load(a.o, "attn_output.weight", hidden, q_dim));
  auto optional_vector = [&](std::optional<Tensor>& t, const char* name, int64_t length,
                             float add) -> Result<void> {
    auto v = w.vector(WeightLoader::layer_name(layer, name), length, add);
    if (!v) return v.error();
    t = *v;
    return {};
  };
  if (biases) {
    TERN_TRY(optional_vector(a.q_bias, "attn_q.bias", q_dim, 0.0f));
    TERN_TRY(optional_vector(a.k_bias, "attn_k.bias", kv_dim, 0.0f));
    TERN_TRY(optional_vector(a.v_bias, "attn_v.bias", kv_dim, 0.0f));
  }
  if (qk_norm) {
    TERN_TRY(optional_vector(a.q_norm, "attn_q_norm.weight", cfg.head_dim, norm_add));
    TERN_TRY(optional_vector(a.k_norm, "attn_k_norm.weight", cfg.head_dim, norm_add));
  }
  return a;
}

Result<MlpWeights> load_mlp(WeightLoader& w, int64_t layer, int64_t hidden, int64_t ffn) {
  MlpWeights m;
  auto gate = w.matmul_weight(WeightLoader::layer_name(layer, "ffn_gate.weight"), ffn, hidden);
  if (!gate) return gate.error();
  auto up = w.matmul_weight(WeightLoader::layer_name(layer, "ffn_up.weight"), ffn, hidden);
  if (!up) return up.error();
  auto down = w.matmul_weight(WeightLoader::layer_name(layer, "ffn_down.weight"), hidden, ffn);
  if (!down) return down.error();
  m.gate = *gate;
  m.up = *up;
  m.down = *down;
  return m;
}

}  // namespace tern

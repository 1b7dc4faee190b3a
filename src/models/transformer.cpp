#include "models/transformer.h"

#include <algorithm>
#include <memory>

#include "models/weights.h"

namespace tern {

ForwardState::ForwardState(Device& dev, KvCache& kv_cache, std::span<SequenceBatch> batch,
                           StepPlan& plan)
    : ops(plan), cache(kv_cache), device_(dev), batch_(batch) {
  std::vector<int32_t> ids_, positions_, slots_;
  std::vector<AttentionSequence> sequences_;
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceBatch& s = batch[b];
    AttentionSequence seq;
    seq.first_token = tokens;
    seq.token_count = static_cast<int64_t>(s.tokens.size());
    seq.first_position = s.kv->length;
    seq.block_table = s.kv->blocks;  // (the scheduler keeps them until the step is done)
    // A token tree (check_token_trees has vetted it): positions by depth, ancestor masks.
    std::vector<int32_t> depth(s.tree_parents.size(), 0);
    std::vector<uint64_t> masks;
    for (size_t i = 0; i < s.tree_parents.size(); ++i) {
      const int32_t parent = s.tree_parents[i];
      depth[i] = parent < 0 ? 0 : depth[static_cast<size_t>(parent)] + 1;
      masks.push_back((uint64_t{1} << i) | (parent < 0 ? 0 : masks[static_cast<size_t>(parent)]));
    }
    if (!masks.empty()) seq.ancestors = plan.keep(std::move(masks));
    sequences_.push_back(seq);
    auto seq_slots = cache.slots(*s.kv, s.kv->length, seq.token_count);
    for (int64_t i = 0; i < seq.token_count; ++i) {
      ids_.push_back(s.tokens[static_cast<size_t>(i)]);
      const int64_t offset = depth.empty() ? i : depth[static_cast<size_t>(i)];
      positions_.push_back(static_cast<int32_t>(s.kv->length + offset));
      slots_.push_back(seq_slots[static_cast<size_t>(i)]);
      const bool last = i + 1 == seq.token_count;
      if (s.logits_for_all || (s.last_logits && last)) logit_rows.push_back(tokens + i);
    }
    tokens += seq.token_count;
  }
  ids = plan.keep(std::move(ids_));
  positions = plan.keep(std::move(positions_));
  slots = plan.keep(std::move(slots_));
  sequences = plan.keep(std::move(sequences_));
}

Result<Tensor> ForwardState::hold(size_t bytes, int64_t rows, int64_t cols) {
  auto buffer = device_.allocate(bytes);
  if (!buffer) return buffer.error();
  Tensor t;
  t.data = buffer->data();
  t.ne = {cols, rows, 1, 1};
  ops.plan().keep_alive(std::make_shared<DeviceBuffer>(std::move(*buffer)));
  return t;
}

Result<Tensor> ForwardState::scratch(int64_t rows, int64_t cols) {
  return hold(static_cast<size_t>(rows * cols) * sizeof(float), rows, cols);
}

Result<Tensor> ForwardState::layer_scratch(Slot slot, int64_t rows, int64_t cols) {
  Reused& r = reused_[static_cast<size_t>(slot)];
  const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(float);
  if (r.bytes < bytes) {
    // Grown: the old buffer stays alive with the plan (its earlier ops read it).
    auto t = hold(bytes, rows, cols);
    if (!t) return t.error();
    r = {t->data, bytes};
  }
  Tensor t;
  t.data = r.data;
  t.ne = {cols, rows, 1, 1};
  return t;
}

void ForwardState::commit() {
  for (auto& s : batch_) s.kv->length += static_cast<int64_t>(s.tokens.size());
}

Result<void> self_attention(ForwardState& st, const AttentionWeights& w, const AttentionConfig& cfg,
                            KvLayer& cache, const Tensor& x, Tensor& out) {
  Ops& ops = st.ops;
  const int64_t n = st.tokens;
  using Slot = ForwardState::Slot;
  auto q = st.layer_scratch(Slot::kQ, n, cfg.heads * cfg.head_dim);
  auto k = st.layer_scratch(Slot::kK, n, cfg.kv_heads * cfg.head_dim);
  auto v = st.layer_scratch(Slot::kV, n, cfg.kv_heads * cfg.head_dim);
  auto attn = st.layer_scratch(Slot::kAttention, n, cfg.heads * cfg.head_dim);
  if (!q || !k || !v || !attn) return Error{"out of memory for attention activations"};
  ops.matmuls(x, {{w.q, *q}, {w.k, *k}, {w.v, *v}});
  if (w.q_bias) ops.add_row_vector(*q, *w.q_bias);
  if (w.k_bias) ops.add_row_vector(*k, *w.k_bias);
  if (w.v_bias) ops.add_row_vector(*v, *w.v_bias);
  const Tensor qh = q->as_heads(cfg.heads, cfg.head_dim);
  const Tensor kh = k->as_heads(cfg.kv_heads, cfg.head_dim);
  const Tensor vh = v->as_heads(cfg.kv_heads, cfg.head_dim);
  ops.qk_norm_rope_store_kv(qh, kh, vh, w.q_norm.value_or(Tensor{nullptr}),
                            w.k_norm.value_or(Tensor{nullptr}), cfg.norm_eps, st.positions,
                            cfg.rope, cache, st.slots);
  ops.attention(qh, cache, st.sequences, cfg.params, attn->as_heads(cfg.heads, cfg.head_dim));
  ops.matmul(w.o, *attn, out);
  if (w.reduce != nullptr) ops.all_reduce_sum(out, *w.reduce);
  return {};
}

Result<void> gated_mlp(ForwardState& st, const MlpWeights& w, Activation act, const Tensor& x,
                       Tensor& out) {
  const int64_t ffn = w.gate.rows();
  auto gate = st.layer_scratch(ForwardState::Slot::kGate, st.tokens, ffn);
  auto up = st.layer_scratch(ForwardState::Slot::kUp, st.tokens, ffn);
  if (!gate || !up) return Error{"out of memory for MLP activations"};
  st.ops.gate_up_activation(act, x, w.gate, w.up, *gate, *up, *gate);
  st.ops.matmul(w.down, *gate, out);
  if (w.reduce != nullptr) st.ops.all_reduce_sum(out, *w.reduce);
  return {};
}

Result<void> embed(ForwardState& st, const VocabTable& table, Tensor& out) {
  if (table.comm == nullptr) {
    st.ops.get_rows(table.rows, st.ids, out);
    return {};
  }
  // Each rank looks up the tokens in its share; the others' rows are zeros until the sum.
  std::vector<int32_t> local(st.ids.size());
  std::vector<bool> here(st.ids.size());
  for (size_t i = 0; i < st.ids.size(); ++i) {
    const int32_t id = st.ids[i];
    if (id < 0 || id >= table.vocab) {
      return make_error("token id {} is outside the vocabulary of {} tokens", id, table.vocab);
    }
    here[i] = id >= table.part.begin && id < table.part.begin + table.part.count;
    local[i] = here[i] ? static_cast<int32_t>(id - table.part.begin) : 0;
  }
  st.ops.get_rows(table.rows, st.ops.plan().keep(std::move(local)), out);
  for (size_t i = 0; i < here.size(); ++i) {
    if (!here[i]) st.ops.scale(out.row_slice(static_cast<int64_t>(i), 1), 0.0f);
  }
  st.ops.all_reduce_sum(out, *table.comm);
  return {};
}

Result<Tensor> lm_head(ForwardState& st, const Tensor& hidden, const Tensor& norm, float eps,
                       const VocabTable& head) {
  const int64_t rows = static_cast<int64_t>(st.logit_rows.size());
  if (rows == 0) return Tensor{nullptr};
  const int64_t dim = hidden.ne[0];
  const Tensor& output = head.rows;
  auto picked = st.scratch(rows, dim);
  auto out = st.scratch(rows, output.rows());  // this rank's share of the vocabulary
  if (!picked || !out) return Error{"out of memory for logits"};
  // Gather the wanted rows on the device (no host round trip inside the forward pass).
  for (int64_t i = 0; i < rows;) {
    int64_t run = 1;  // consecutive batch rows go in one copy
    while (i + run < rows && st.logit_rows[static_cast<size_t>(i + run)] ==
                                 st.logit_rows[static_cast<size_t>(i)] + run)
      ++run;
    const float* src = hidden.f32() + st.logit_rows[static_cast<size_t>(i)] * dim;
    st.ops.copy(src, picked->f32() + i * dim, static_cast<size_t>(run * dim) * sizeof(float));
    i += run;
  }
  st.ops.rms_norm(*picked, norm, eps, *picked);
  st.ops.matmul(output, *picked, *out);
  if (head.comm == nullptr) return *out;
  auto all = st.scratch(rows, head.vocab);
  if (!all) return Error{"out of memory for logits"};
  st.ops.gather_vocab(*out, *all, head.vocab, *head.comm);
  return *all;
}

Result<VocabTable> load_vocab_table(WeightLoader& w, const std::string& name, int64_t hidden,
                                    bool matmul) {
  VocabTable table;
  const TensorParallel& tp = w.tp();
  if (!tp.split()) {
    auto m = matmul ? w.matmul_weight(name, 0, hidden) : w.matrix(name, 0, hidden);
    if (!m) return m.error();
    table.rows = *m;
    table.vocab = m->rows();
    table.part = {0, table.vocab};
    return table;
  }
  const GgufTensor* t = w.file().find_tensor(name);
  if (t == nullptr || t->shape.size() != 2) {
    auto m = w.matrix(name, 0, hidden);  // the loader's error: missing, or not 2-D
    return m ? make_error("tensor '{}' is not a vocabulary table", name) : m.error();
  }
  table.vocab = static_cast<int64_t>(t->shape[1]);
  auto part = vocab_share(table.vocab, tp);
  if (!part) return part.error();
  table.part = *part;
  auto m = matmul ? w.matmul_weight_rows(name, table.vocab, hidden, *part)
                  : w.matrix_rows(name, table.vocab, hidden, *part);
  if (!m) return m.error();
  table.rows = *m;
  table.comm = tp.comm;
  return table;
}

Result<void> split_heads(AttentionConfig& cfg, const TensorParallel& tp) {
  cfg.file_heads = cfg.heads;
  cfg.file_kv_heads = cfg.kv_heads;
  cfg.first_head = cfg.first_kv_head = 0;
  if (!tp.split()) return {};
  auto q = even_share(cfg.heads, tp, "attention heads");
  if (!q) return q.error();
  Slice kv;
  if (cfg.kv_heads % tp.size == 0) {
    kv = Slice{cfg.kv_heads / tp.size * tp.rank, cfg.kv_heads / tp.size};
  } else if (tp.size % cfg.kv_heads == 0) {
    // Fewer KV heads than ranks: consecutive ranks share (and each caches) one KV head.
    kv = Slice{tp.rank / (tp.size / cfg.kv_heads), 1};
  } else {
    return make_error(
        "tensor parallelism over {} ranks needs the KV heads ({}) to divide by {} or {} to divide "
        "by them; use a --tp that divides {}",
        tp.size, cfg.kv_heads, tp.size, tp.size, cfg.kv_heads);
  }
  cfg.heads = q->count;
  cfg.first_head = q->begin;
  cfg.kv_heads = kv.count;
  cfg.first_kv_head = kv.begin;
  return {};
}

Result<AttentionWeights> load_attention(WeightLoader& w, int64_t layer, int64_t hidden,
                                        const AttentionConfig& cfg, bool biases, bool qk_norm,
                                        float norm_add) {
  AttentionWeights a;
  const bool split = w.tp().split();
  if (split && cfg.file_heads == 0) return Error{"load_attention: split_heads was not called"};
  const int64_t hd = cfg.head_dim;
  const int64_t q_dim = (split ? cfg.file_heads : cfg.heads) * hd;
  const int64_t kv_dim = (split ? cfg.file_kv_heads : cfg.kv_heads) * hd;
  // This rank's rows of q (its heads) and of k/v (its KV heads); the whole when not split.
  const Slice q_part{cfg.first_head * hd, cfg.heads * hd};
  const Slice kv_part{cfg.first_kv_head * hd, cfg.kv_heads * hd};
  auto load = [&](Tensor& t, const char* name, int64_t rows, int64_t cols, const Slice* rows_part,
                  const Slice* cols_part) -> Result<void> {
    const std::string full = WeightLoader::layer_name(layer, name);
    auto m = !split      ? w.matmul_weight(full, rows, cols)
             : rows_part ? w.matmul_weight_rows(full, rows, cols, *rows_part)
                         : w.matmul_weight_cols(full, rows, cols, *cols_part);
    if (!m) return m.error();
    t = *m;
    return {};
  };
  TERN_TRY(load(a.q, "attn_q.weight", q_dim, hidden, &q_part, nullptr));
  TERN_TRY(load(a.k, "attn_k.weight", kv_dim, hidden, &kv_part, nullptr));
  TERN_TRY(load(a.v, "attn_v.weight", kv_dim, hidden, &kv_part, nullptr));
  TERN_TRY(load(a.o, "attn_output.weight", hidden, q_dim, nullptr, &q_part));
  if (split) a.reduce = w.tp().reducer();
  auto optional_vector = [&](std::optional<Tensor>& t, const char* name, int64_t length,
                             float add) -> Result<void> {
    auto v = w.vector(WeightLoader::layer_name(layer, name), length, add);
    if (!v) return v.error();
    t = *v;
    return {};
  };
  auto bias = [&](std::optional<Tensor>& t, const char* name, int64_t length,
                  const Slice& part) -> Result<void> {
    if (!split) return optional_vector(t, name, length, 0.0f);
    auto v = w.vector_part(WeightLoader::layer_name(layer, name), length, part);
    if (!v) return v.error();
    t = *v;
    return {};
  };
  if (biases) {
    TERN_TRY(bias(a.q_bias, "attn_q.bias", q_dim, q_part));
    TERN_TRY(bias(a.k_bias, "attn_k.bias", kv_dim, kv_part));
    TERN_TRY(bias(a.v_bias, "attn_v.bias", kv_dim, kv_part));
  }
  if (qk_norm) {
    TERN_TRY(optional_vector(a.q_norm, "attn_q_norm.weight", cfg.head_dim, norm_add));
    TERN_TRY(optional_vector(a.k_norm, "attn_k_norm.weight", cfg.head_dim, norm_add));
  }
  return a;
}

Result<MlpWeights> load_mlp(WeightLoader& w, int64_t layer, int64_t hidden, int64_t ffn) {
  MlpWeights m;
  if (w.tp().split()) {
    auto part = even_share(ffn, w.tp(), "feed-forward size");
    if (!part) return part.error();
    auto gate = w.matmul_weight_rows(WeightLoader::layer_name(layer, "ffn_gate.weight"), ffn,
                                     hidden, *part);
    if (!gate) return gate.error();
    auto up =
        w.matmul_weight_rows(WeightLoader::layer_name(layer, "ffn_up.weight"), ffn, hidden, *part);
    if (!up) return up.error();
    auto down = w.matmul_weight_cols(WeightLoader::layer_name(layer, "ffn_down.weight"), hidden,
                                     ffn, *part);
    if (!down) return down.error();
    m.gate = *gate;
    m.up = *up;
    m.down = *down;
    m.reduce = w.tp().reducer();
    return m;
  }
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

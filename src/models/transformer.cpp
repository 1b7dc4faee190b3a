#include "models/transformer.h"

#include <algorithm>

#include "models/weights.h"

namespace tern {

Result<void> all_reduce_sum(ForwardState& st, Communicator& comm, Tensor& t) {
  const auto n = static_cast<size_t>(t.elements());
  if (st.device.reads_host_memory()) return comm.all_reduce_sum(t.f32(), n);
  std::vector<float> host(n);
  st.device.download(t.data, host.data(), n * sizeof(float));
  TERN_TRY(comm.all_reduce_sum(host.data(), n));
  st.device.upload(host.data(), t.data, n * sizeof(float));
  return {};
}

ForwardState::ForwardState(Device& dev, KvCache& kv_cache, std::span<SequenceBatch> batch)
    : device(dev), cache(kv_cache), batch_(batch) {
  tree_masks_.resize(batch.size());  // sized once: the sequences' spans point into it
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceBatch& s = batch[b];
    AttentionSequence seq;
    seq.first_token = tokens;
    seq.token_count = static_cast<int64_t>(s.tokens.size());
    seq.first_position = s.kv->length;
    seq.block_table = s.kv->blocks;
    // A token tree (check_token_trees has vetted it): positions by depth, ancestor masks.
    std::vector<int32_t> depth(s.tree_parents.size(), 0);
    auto& masks = tree_masks_[b];
    for (size_t i = 0; i < s.tree_parents.size(); ++i) {
      const int32_t parent = s.tree_parents[i];
      depth[i] = parent < 0 ? 0 : depth[static_cast<size_t>(parent)] + 1;
      masks.push_back((uint64_t{1} << i) | (parent < 0 ? 0 : masks[static_cast<size_t>(parent)]));
    }
    seq.ancestors = masks;
    sequences.push_back(seq);
    auto seq_slots = cache.slots(*s.kv, s.kv->length, seq.token_count);
    for (int64_t i = 0; i < seq.token_count; ++i) {
      ids.push_back(s.tokens[static_cast<size_t>(i)]);
      const int64_t offset = depth.empty() ? i : depth[static_cast<size_t>(i)];
      positions.push_back(static_cast<int32_t>(s.kv->length + offset));
      slots.push_back(seq_slots[static_cast<size_t>(i)]);
      const bool last = i + 1 == seq.token_count;
      if (s.logits_for_all || (s.last_logits && last)) {
        logit_rows.push_back(tokens + i);
        greedy.push_back(last ? s.greedy_token : nullptr);
        draws.push_back(last && s.greedy_token != nullptr ? s.draw : nullptr);
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

Result<Tensor> ForwardState::layer_scratch(Slot slot, int64_t rows, int64_t cols) {
  Reused& r = reused_[static_cast<size_t>(slot)];
  const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(float);
  if (r.bytes < bytes) {
    // Grown: the old buffer stays alive with the state (queued ops may still read it).
    auto buffer = device.allocate(bytes);
    if (!buffer) return buffer.error();
    r = {buffer->data(), bytes};
    buffers_.push_back(std::move(*buffer));
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
  Device& dev = st.device;
  const int64_t n = st.tokens;
  using Slot = ForwardState::Slot;
  auto q = st.layer_scratch(Slot::kQ, n, cfg.heads * cfg.head_dim);
  auto k = st.layer_scratch(Slot::kK, n, cfg.kv_heads * cfg.head_dim);
  auto v = st.layer_scratch(Slot::kV, n, cfg.kv_heads * cfg.head_dim);
  auto attn = st.layer_scratch(Slot::kAttention, n, cfg.heads * cfg.head_dim);
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
  TERN_TRY(dev.matmul(w.o, *attn, out));
  if (w.reduce != nullptr) return all_reduce_sum(st, *w.reduce, out);
  return {};
}

Result<void> gated_mlp(ForwardState& st, const MlpWeights& w, Activation act, const Tensor& x,
                       Tensor& out) {
  const int64_t ffn = w.gate.rows();
  auto gate = st.layer_scratch(ForwardState::Slot::kGate, st.tokens, ffn);
  auto up = st.layer_scratch(ForwardState::Slot::kUp, st.tokens, ffn);
  if (!gate || !up) return Error{"out of memory for MLP activations"};
  TERN_TRY(st.device.matmul(w.gate, x, *gate));
  TERN_TRY(st.device.matmul(w.up, x, *up));
  if (act == Activation::Silu) {
    st.device.silu_mul(*gate, *up, *gate);
  } else {
    st.device.gelu_tanh_mul(*gate, *up, *gate);
  }
  TERN_TRY(st.device.matmul(w.down, *gate, out));
  if (w.reduce != nullptr) return all_reduce_sum(st, *w.reduce, out);
  return {};
}

Result<void> embed(ForwardState& st, const VocabTable& table, Tensor& out) {
  if (table.comm == nullptr) return st.device.get_rows(table.rows, st.ids, out);
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
  TERN_TRY(st.device.get_rows(table.rows, local, out));
  for (size_t i = 0; i < here.size(); ++i) {
    if (here[i]) continue;
    Tensor row = out.row_slice(static_cast<int64_t>(i), 1);
    st.device.scale(row, 0.0f);
  }
  return all_reduce_sum(st, *table.comm, out);
}

Result<void> lm_head(ForwardState& st, const Tensor& hidden, const Tensor& norm, float eps,
                     const VocabTable& head, std::vector<float>& logits) {
  const int64_t rows = static_cast<int64_t>(st.logit_rows.size());
  if (rows == 0) return {};
  const int64_t dim = hidden.ne[0];
  const Tensor& output = head.rows;
  const int64_t vocab = output.rows();  // this rank's share
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
  const auto greedy_rows = static_cast<int64_t>(
      std::count_if(st.greedy.begin(), st.greedy.end(), [](int32_t* g) { return g != nullptr; }));
  if (head.comm == nullptr) {
    if (greedy_rows > 0) {
      // Greedy rows: argmax on the device, only the ids come back (then any rows whose logits
      // are wanted, row by row).
      auto ids = st.scratch(1, rows);
      if (!ids) return ids.error();
      auto* id_data = static_cast<int32_t*>(ids->data);
      st.device.argmax_rows(*out, id_data);
      // Rows with a temperature draw: sampled where the logits are, or (a device whose sampling
      // is switched off) from the row brought back, with the same arithmetic.
      const bool device_draws = st.device.samples_rows();
      for (int64_t r = 0; r < rows && device_draws; ++r) {
        if (const SampleDraw* draw = st.draws[static_cast<size_t>(r)]) {
          st.device.sample_rows(out->row_slice(r, 1), std::span(draw, 1), id_data + r);
        }
      }
      std::vector<int32_t> host_ids(static_cast<size_t>(rows));
      st.device.download(id_data, host_ids.data(), host_ids.size() * sizeof(int32_t));
      std::vector<float> drawn_row;
      for (int64_t r = 0; r < rows; ++r) {
        int32_t* target = st.greedy[static_cast<size_t>(r)];
        const SampleDraw* draw = st.draws[static_cast<size_t>(r)];
        if (target != nullptr && draw != nullptr && !device_draws) {
          drawn_row.resize(static_cast<size_t>(vocab));
          st.device.download(out->f32() + r * vocab, drawn_row.data(),
                             static_cast<size_t>(vocab) * sizeof(float));
          *target = pick_token(drawn_row, *draw);
          continue;
        }
        if (target != nullptr) {
          *target = host_ids[static_cast<size_t>(r)];
          continue;
        }
        const size_t row_at = logits.size();
        logits.resize(row_at + static_cast<size_t>(vocab));
        st.device.download(out->f32() + r * vocab, logits.data() + row_at,
                           static_cast<size_t>(vocab) * sizeof(float));
      }
      return {};
    }
    logits.resize(at + static_cast<size_t>(rows * vocab));
    st.device.download(out->data, logits.data() + at,
                       static_cast<size_t>(rows * vocab) * sizeof(float));
    return {};
  }
  // Every rank sends [rows, chunk] (the last rank's share padded), then each row's slices are
  // laid side by side in rank order.
  const int ranks = head.comm->size();
  const int64_t chunk = (head.vocab + ranks - 1) / ranks;
  std::vector<float> mine(static_cast<size_t>(rows * chunk), 0.0f);
  std::vector<float> local(static_cast<size_t>(rows * vocab));
  st.device.download(out->data, local.data(), local.size() * sizeof(float));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(local.data() + r * vocab, vocab, mine.data() + r * chunk);
  }
  std::vector<float> all(mine.size() * static_cast<size_t>(ranks));
  TERN_TRY(head.comm->all_gather(mine.data(), mine.size(), all.data()));
  logits.resize(at + static_cast<size_t>(rows * head.vocab));
  for (int p = 0; p < ranks; ++p) {
    const int64_t begin = chunk * p, count = std::min(chunk, head.vocab - begin);
    if (count <= 0) continue;
    const float* from = all.data() + static_cast<int64_t>(p) * rows * chunk;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(from + r * chunk, count, logits.data() + at + r * head.vocab + begin);
    }
  }
  if (greedy_rows == 0) return {};
  // Greedy rows under tensor parallelism: the whole row is here after the gather; take its
  // argmax and drop it (rows kept in order).
  size_t kept = at;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + at + r * head.vocab;
    if (int32_t* target = st.greedy[static_cast<size_t>(r)]) {
      const SampleDraw* draw = st.draws[static_cast<size_t>(r)];
      *target =
          draw != nullptr
              ? pick_token(std::span<const float>(row, static_cast<size_t>(head.vocab)), *draw)
              : static_cast<int32_t>(std::max_element(row, row + head.vocab) - row);
      continue;
    }
    if (row != logits.data() + kept) std::copy_n(row, head.vocab, logits.data() + kept);
    kept += static_cast<size_t>(head.vocab);
  }
  logits.resize(kept);
  return {};
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

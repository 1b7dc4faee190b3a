#include "ops/ops.h"

#include <fmt/format.h>

namespace tern {
namespace {

std::string shape(const Tensor& t) {
  if (t.ne[2] == 1 && t.ne[3] == 1) return fmt::format("[{} x {}]", t.ne[1], t.ne[0]);
  return fmt::format("[{} x {} x {} x {}]", t.ne[3], t.ne[2], t.ne[1], t.ne[0]);
}

bool f32(const Tensor& t) {
  return t.type == TensorType::F32 && t.data != nullptr;
}

}  // namespace

template <class... Args>
bool Ops::check(bool ok, fmt::format_string<Args...> why, Args&&... args) {
  if (plan_.failed()) return false;
  if (!ok) plan_.fail(make_error(why, std::forward<Args>(args)...));
  return ok;
}

void Ops::record(Op o) {
  if (!plan_.failed()) plan_.add(std::move(o));
}

void Ops::matmul(const Tensor& w, const Tensor& x, const Tensor& y) {
  if (!check(x.ne[0] == w.ne[0] && y.ne[0] == w.rows() && y.rows() == x.rows() && f32(x) && f32(y),
             "matmul shapes: W {}, x {}, y {}", shape(w), shape(x), shape(y)))
    return;
  record(op::Matmul{w, x, y});
}

void Ops::matmuls(const Tensor& x, std::initializer_list<std::pair<Tensor, Tensor>> products) {
  if (!check(products.size() >= 1 && products.size() <= op::MatmulsSharedInput::kMax,
             "matmuls: {} products of one input (1 to {})", products.size(),
             op::MatmulsSharedInput::kMax))
    return;
  op::MatmulsSharedInput m;
  m.x = x;
  for (const auto& [w, y] : products) {
    if (!check(
            x.ne[0] == w.ne[0] && y.ne[0] == w.rows() && y.rows() == x.rows() && f32(x) && f32(y),
            "matmuls shapes: W {}, x {}, y {}", shape(w), shape(x), shape(y)))
      return;
    m.w[static_cast<size_t>(m.count)] = w;
    m.y[static_cast<size_t>(m.count)] = y;
    ++m.count;
  }
  record(m);
}

void Ops::get_rows(const Tensor& table, std::span<const int32_t> ids, const Tensor& out) {
  bool in_range = true;
  for (int32_t id : ids) in_range = in_range && id >= 0 && id < table.rows();
  if (!check(in_range, "get_rows: an id is outside the table's {} rows", table.rows())) return;
  if (!check(out.ne[0] == table.ne[0] && out.rows() == static_cast<int64_t>(ids.size()) && f32(out),
             "get_rows shapes: table {}, {} ids, out {}", shape(table), ids.size(), shape(out)))
    return;
  record(op::GetRows{table, ids, out});
}

void Ops::rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  if (!check(x.elements() == out.elements() && (weight.data == nullptr || weight.ne[0] == x.ne[0]),
             "rms_norm shapes: x {}, weight {}, out {}", shape(x), shape(weight), shape(out)))
    return;
  record(op::RmsNorm{x, weight, eps, out});
}

void Ops::add_rms_norm(const Tensor& residual, const Tensor& add, const Tensor& weight, float eps,
                       const Tensor& out) {
  if (!check(residual.elements() == add.elements() && residual.elements() == out.elements() &&
                 weight.ne[0] == residual.ne[0] && weight.data != nullptr,
             "add_rms_norm shapes: residual {}, add {}, weight {}, out {}", shape(residual),
             shape(add), shape(weight), shape(out)))
    return;
  record(op::AddRmsNorm{residual, add, weight, eps, out});
}

void Ops::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!check(a.elements() == b.elements() && a.elements() == out.elements(),
             "add shapes: {} + {} -> {}", shape(a), shape(b), shape(out)))
    return;
  record(op::Add{a, b, out});
}

void Ops::add_row_vector(const Tensor& x, const Tensor& v) {
  if (!check(v.elements() == x.ne[0], "add_row_vector shapes: x {}, v {}", shape(x), shape(v)))
    return;
  record(op::AddRowVector{x, v});
}

void Ops::scale(const Tensor& x, float factor) {
  record(op::Scale{x, factor});
}

void Ops::copy(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return;
  record(op::Copy{src, dst, bytes});
}

void Ops::gated_activation(Activation act, const Tensor& gate, const Tensor& up,
                           const Tensor& out) {
  if (!check(gate.elements() == up.elements() && gate.elements() == out.elements(),
             "gated activation shapes: gate {}, up {}, out {}", shape(gate), shape(up), shape(out)))
    return;
  record(op::GatedActivation{act, gate, up, out});
}

void Ops::gate_up_activation(Activation act, const Tensor& x, const Tensor& gate_w,
                             const Tensor& up_w, const Tensor& gate, const Tensor& up,
                             const Tensor& out) {
  const int64_t n = x.rows(), ffn = gate_w.rows();
  if (!check(gate_w.ne[0] == x.ne[0] && up_w.ne[0] == x.ne[0] && up_w.rows() == ffn &&
                 gate.ne[0] == ffn && gate.rows() == n && up.ne[0] == ffn && up.rows() == n &&
                 out.ne[0] == ffn && out.rows() == n && f32(x),
             "gate/up shapes: x {}, gate W {}, up W {}, out {}", shape(x), shape(gate_w),
             shape(up_w), shape(out)))
    return;
  record(op::GateUpActivation{act, x, gate_w, up_w, gate, up, out});
}

void Ops::rope(const Tensor& x, std::span<const int32_t> positions, const RopeParams& params) {
  if (!check(static_cast<int64_t>(positions.size()) >= x.ne[2] && params.rotary_dim <= x.ne[0],
             "rope: {} positions for {} tokens, rotary dim {} of head size {}", positions.size(),
             x.ne[2], params.rotary_dim, x.ne[0]))
    return;
  record(op::Rope{x, positions, &params});
}

void Ops::store_kv(KvLayer& cache, const Tensor& k, const Tensor& v,
                   std::span<const int32_t> slots) {
  if (!check(k.ne[0] == cache.head_dim && k.ne[1] == cache.kv_heads &&
                 k.ne[2] == static_cast<int64_t>(slots.size()) && v.elements() == k.elements(),
             "store_kv shapes: k {}, v {}, {} slots, cache heads {} x {}", shape(k), shape(v),
             slots.size(), cache.kv_heads, cache.head_dim))
    return;
  record(op::StoreKv{&cache, k, v, slots});
}

void Ops::qk_norm_rope_store_kv(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& q_norm, const Tensor& k_norm, float eps,
                                std::span<const int32_t> positions, const RopeParams& rope,
                                KvLayer& cache, std::span<const int32_t> slots) {
  const int64_t n = q.ne[2];
  if (!check(k.ne[0] == cache.head_dim && k.ne[1] == cache.kv_heads && k.ne[2] == n &&
                 q.ne[0] == k.ne[0] && v.elements() == k.elements() &&
                 static_cast<int64_t>(slots.size()) == n &&
                 static_cast<int64_t>(positions.size()) >= n && rope.rotary_dim <= q.ne[0] &&
                 (q_norm.data == nullptr || q_norm.ne[0] == q.ne[0]) &&
                 (k_norm.data == nullptr || k_norm.ne[0] == k.ne[0]),
             "q/k norm + rope + store shapes: q {}, k {}, v {}, {} positions, {} slots", shape(q),
             shape(k), shape(v), positions.size(), slots.size()))
    return;
  record(op::QkNormRopeStoreKv{q, k, v, q_norm, k_norm, eps, positions, &rope, &cache, slots});
}

void Ops::attention(const Tensor& q, const KvLayer& cache,
                    std::span<const AttentionSequence> sequences, const AttentionParams& params,
                    const Tensor& out) {
  bool trees_ok = true;
  for (const auto& s : sequences) {
    trees_ok = trees_ok &&
               (s.ancestors.empty() || (static_cast<int64_t>(s.ancestors.size()) == s.token_count &&
                                        s.token_count <= kMaxTreeTokens));
  }
  if (!check(trees_ok, "attention: a token tree's masks do not match its tokens (at most {})",
             kMaxTreeTokens))
    return;
  if (!check(q.ne[0] == cache.head_dim && cache.kv_heads > 0 && q.ne[1] % cache.kv_heads == 0 &&
                 out.elements() == q.elements(),
             "attention shapes: q {}, cache heads {} x {}, out {}", shape(q), cache.kv_heads,
             cache.head_dim, shape(out)))
    return;
  record(op::Attention{q, &cache, sequences, params, out});
}

void Ops::moe_experts(const op::MoeExperts& moe) {
  const int64_t n = moe.x.rows(), rows = n * moe.routing.used;
  if (!check(moe.router_logits.ne[0] == moe.routing.experts && moe.router_logits.rows() == n &&
                 moe.routing.used >= 1 && moe.routing.used <= moe.routing.experts &&
                 moe.out.elements() == moe.x.elements() && moe.xs.rows() >= rows &&
                 moe.ys.rows() >= rows && moe.gate.rows() >= rows && moe.up.rows() >= rows,
             "moe shapes: x {}, router logits {}, {} of {} experts a token", shape(moe.x),
             shape(moe.router_logits), moe.routing.used, moe.routing.experts))
    return;
  record(moe);
}

void Ops::all_reduce_sum(const Tensor& x, Communicator& comm) {
  record(op::AllReduceSum{x, &comm});
}

void Ops::gather_vocab(const Tensor& local, const Tensor& out, int64_t vocab, Communicator& comm) {
  if (!check(out.ne[0] == vocab && out.rows() == local.rows(),
             "gather_vocab shapes: local {}, out {}, vocabulary {}", shape(local), shape(out),
             vocab))
    return;
  record(op::GatherVocab{local, out, vocab, &comm});
}

void Ops::argmax_rows(const Tensor& logits, int32_t* ids) {
  record(op::ArgmaxRows{logits, ids});
}

void Ops::sample_rows(const Tensor& logits, std::span<const SampleDraw> draws, int32_t* ids) {
  if (!check(static_cast<int64_t>(draws.size()) == logits.rows(),
             "sample_rows: {} draws for {} rows", draws.size(), logits.rows()))
    return;
  record(op::SampleRows{logits, draws, ids});
}

void Ops::add_to_logits(const Tensor& row, std::span<const int32_t> tokens,
                        std::span<const float> values) {
  bool in_range = tokens.size() == values.size();
  for (int32_t t : tokens) in_range = in_range && t >= 0 && t < row.ne[0];
  if (!check(in_range && row.rows() == 1, "add_to_logits: {} tokens, {} values over a row of {}",
             tokens.size(), values.size(), row.ne[0]))
    return;
  if (!tokens.empty()) record(op::AddToLogits{row, tokens, values});
}

void Ops::repetition_penalty(const Tensor& row, std::span<const int32_t> tokens, float penalty) {
  bool in_range = true;
  for (int32_t t : tokens) in_range = in_range && t >= 0 && t < row.ne[0];
  if (!check(in_range && row.rows() == 1, "repetition_penalty: a token outside the row of {}",
             row.ne[0]))
    return;
  if (!tokens.empty()) record(op::RepetitionPenalty{row, tokens, penalty});
}

void Ops::mask_logits(const Tensor& row, std::span<const uint32_t> allowed) {
  if (!check(static_cast<int64_t>(allowed.size()) * 32 >= row.ne[0] && row.rows() == 1,
             "mask_logits: {} mask words for a row of {}", allowed.size(), row.ne[0]))
    return;
  record(op::MaskLogits{row, allowed});
}

void Ops::copy_kv_blocks(std::span<KvLayer> layers, std::span<const int32_t> from,
                         std::span<const int32_t> to) {
  if (!check(from.size() == to.size(), "copy_kv_blocks: {} sources for {} targets", from.size(),
             to.size()))
    return;
  if (!from.empty()) record(op::CopyKvBlocks{layers, from, to});
}

void Ops::move_kv_slots(std::span<KvLayer> layers, std::span<const int32_t> from,
                        std::span<const int32_t> to) {
  if (!check(from.size() == to.size(), "move_kv_slots: {} sources for {} targets", from.size(),
             to.size()))
    return;
  if (!from.empty()) record(op::MoveKvSlots{layers, from, to});
}

}  // namespace tern

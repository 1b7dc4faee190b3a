#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "models/weights.h"

namespace tern {

Result<MoeWeights> load_moe(WeightLoader& w, int64_t layer, int64_t hidden, const MoeConfig& cfg) {
  MoeWeights m;
  auto router =
      w.matrix(WeightLoader::layer_name(layer, "ffn_gate_inp.weight"), cfg.experts, hidden);
  if (!router) return router.error();
  m.router = *router;
  const TensorParallel& tp = w.tp();
  if (tp.split()) {
    auto part = even_share(cfg.experts, tp, "experts");
    if (!part) return part.error();
    m.local = *part;
    m.reduce = tp.reducer();
  } else {
    m.local = {0, cfg.experts};
  }
  for (int64_t e = m.local.begin; e < m.local.begin + m.local.count; ++e) {
    MlpWeights mlp;
    auto gate = w.expert_matmul_weight(layer, "ffn_gate_exps", e, cfg.experts, cfg.ffn, hidden);
    if (!gate) return gate.error();
    auto up = w.expert_matmul_weight(layer, "ffn_up_exps", e, cfg.experts, cfg.ffn, hidden);
    if (!up) return up.error();
    auto down = w.expert_matmul_weight(layer, "ffn_down_exps", e, cfg.experts, hidden, cfg.ffn);
    if (!down) return down.error();
    mlp.gate = *gate;
    mlp.up = *up;
    mlp.down = *down;
    m.experts.push_back(mlp);
  }
  return m;
}

Routing route_tokens(std::span<const float> router_logits, int64_t tokens, const MoeConfig& cfg) {
  const auto experts = static_cast<size_t>(cfg.experts), used = static_cast<size_t>(cfg.used);
  Routing r;
  r.expert.resize(static_cast<size_t>(tokens) * used);
  r.weight.resize(static_cast<size_t>(tokens) * used);
  std::vector<float> probs(experts);
  std::vector<int32_t> order(experts);
  for (size_t t = 0; t < static_cast<size_t>(tokens); ++t) {
    const float* logits = router_logits.data() + t * experts;
    // Softmax over every expert (as the reference does, before the choice).
    const float top = *std::max_element(logits, logits + experts);
    double total = 0.0;
    for (size_t e = 0; e < experts; ++e) {
      probs[e] = std::exp(logits[e] - top);
      total += probs[e];
    }
    for (auto& p : probs) p = static_cast<float>(p / total);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(
        order.begin(), order.begin() + static_cast<long>(used), order.end(),
        [&](int32_t a, int32_t b) {
          return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)] ||
                 (probs[static_cast<size_t>(a)] == probs[static_cast<size_t>(b)] && a < b);
        });
    float chosen = 0.0f;
    for (size_t k = 0; k < used; ++k) chosen += probs[static_cast<size_t>(order[k])];
    for (size_t k = 0; k < used; ++k) {
      const float p = probs[static_cast<size_t>(order[k])];
      r.expert[t * used + k] = order[k];
      r.weight[t * used + k] = cfg.normalize ? p / chosen : p;
    }
  }
  return r;
}

Result<void> sparse_moe(ForwardState& st, const MoeWeights& w, const MoeConfig& cfg,
                        const Tensor& x, Tensor& out) {
  Device& dev = st.device;
  const int64_t tokens = st.tokens, hidden = x.ne[0];
  using Slot = ForwardState::Slot;
  auto logits = st.layer_scratch(Slot::kRouter, tokens, cfg.experts);
  if (!logits) return logits.error();
  TERN_TRY(dev.matmul(w.router, x, *logits));
  // The choice is made on the host: the experts a step runs decide which weights it reads.
  std::vector<float> host(static_cast<size_t>(tokens * cfg.experts));
  dev.download(logits->data, host.data(), host.size() * sizeof(float));
  const Routing routing = route_tokens(host, tokens, cfg);

  // Each local expert's tokens (in token order) and weights, laid end to end so that one set of
  // buffers holds every expert's rows.
  const auto local = static_cast<size_t>(w.local.count);
  std::vector<std::vector<int32_t>> rows(local);
  std::vector<std::vector<float>> weights(local);
  for (size_t i = 0; i < routing.expert.size(); ++i) {
    const int64_t e = routing.expert[i] - w.local.begin;
    if (e < 0 || e >= w.local.count) continue;
    rows[static_cast<size_t>(e)].push_back(static_cast<int32_t>(i / static_cast<size_t>(cfg.used)));
    weights[static_cast<size_t>(e)].push_back(routing.weight[i]);
  }
  int64_t routed = 0;
  for (const auto& r : rows) routed += static_cast<int64_t>(r.size());
  const std::vector<float> zeros(static_cast<size_t>(tokens * hidden), 0.0f);
  dev.upload(zeros.data(), out.data, zeros.size() * sizeof(float));
  if (routed > 0) {
    auto xs = st.layer_scratch(Slot::kExpertIn, routed, hidden);
    auto gate = st.layer_scratch(Slot::kExpertGate, routed, cfg.ffn);
    auto up = st.layer_scratch(Slot::kExpertUp, routed, cfg.ffn);
    auto ys = st.layer_scratch(Slot::kExpertOut, routed, hidden);
    if (!xs || !gate || !up || !ys) return Error{"out of memory for expert activations"};
    int64_t at = 0;
    for (size_t e = 0; e < local; ++e) {
      const auto n = static_cast<int64_t>(rows[e].size());
      if (n == 0) continue;
      Tensor xe = xs->row_slice(at, n), ge = gate->row_slice(at, n), ue = up->row_slice(at, n),
             ye = ys->row_slice(at, n);
      const MlpWeights& mlp = w.experts[e];
      TERN_TRY(dev.get_rows(x, rows[e], xe));
      TERN_TRY(dev.matmul(mlp.gate, xe, ge));
      TERN_TRY(dev.matmul(mlp.up, xe, ue));
      dev.silu_mul(ge, ue, ge);
      TERN_TRY(dev.matmul(mlp.down, ge, ye));
      dev.add_weighted_rows(ye, rows[e], weights[e], out);
      at += n;
    }
  }
  if (w.reduce != nullptr) return all_reduce_sum(st, *w.reduce, out);
  return {};
}

}  // namespace tern

#include "models/moe.h"

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
    ExpertMlp mlp;
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

Result<void> sparse_moe(ForwardState& st, const MoeWeights& w, const MoeConfig& cfg,
                        const Tensor& x, Tensor& out) {
  const int64_t tokens = st.tokens, hidden = x.ne[0], routed = tokens * cfg.used;
  using Slot = ForwardState::Slot;
  auto logits = st.layer_scratch(Slot::kRouter, tokens, cfg.experts);
  auto xs = st.layer_scratch(Slot::kExpertIn, routed, hidden);
  auto gate = st.layer_scratch(Slot::kExpertGate, routed, cfg.ffn);
  auto up = st.layer_scratch(Slot::kExpertUp, routed, cfg.ffn);
  auto ys = st.layer_scratch(Slot::kExpertOut, routed, hidden);
  if (!logits || !xs || !gate || !up || !ys) return Error{"out of memory for expert activations"};
  st.ops.matmul(w.router, x, *logits);
  op::MoeExperts moe;
  moe.x = x;
  moe.router_logits = *logits;
  moe.experts = w.experts;
  moe.routing = {cfg.experts, cfg.used, w.local.begin, cfg.normalize};
  moe.out = out;
  moe.xs = *xs;
  moe.gate = *gate;
  moe.up = *up;
  moe.ys = *ys;
  st.ops.moe_experts(moe);
  if (w.reduce != nullptr) st.ops.all_reduce_sum(out, *w.reduce);
  return {};
}

}  // namespace tern

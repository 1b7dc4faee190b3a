// A mixture-of-experts feed-forward block (Qwen3-MoE): a router scores every expert for each
// token, the top `used` experts' gated MLPs run on the tokens routed to them, and their outputs,
// weighted by the router's probabilities (renormalised over the chosen ones when the model says
// so), add up. Under expert parallelism each rank holds and runs an equal share of the experts
// (the router is whole on every rank) and the partial outputs are all-reduced, like a
// row-parallel layer's.
#pragma once

#include <vector>

#include "models/transformer.h"

namespace tern {

struct MoeConfig {
  int64_t experts = 0;     // in the model
  int64_t used = 0;        // per token
  int64_t ffn = 0;         // each expert's MLP size
  bool normalize = false;  // renormalise the chosen experts' probabilities to sum to 1
};

struct MoeWeights {
  Tensor router;                   // [experts, hidden]
  Slice local;                     // the experts this rank holds
  std::vector<ExpertMlp> experts;  // local.count of them, expert local.begin first
  Communicator* reduce = nullptr;  // expert parallelism: the output is a partial sum
};

// Layer `layer`'s router (ffn_gate_inp) and this rank's experts (ffn_{gate,up,down}_exps).
Result<MoeWeights> load_moe(WeightLoader& w, int64_t layer, int64_t hidden, const MoeConfig& cfg);

// out [tokens, hidden] = the block's output for the normalised input x [tokens, hidden].
Result<void> sparse_moe(ForwardState& st, const MoeWeights& w, const MoeConfig& cfg,
                        const Tensor& x, Tensor& out);

}  // namespace tern

#include "backend/device/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tern {

Routing route_tokens(std::span<const float> router_logits, int64_t tokens,
                     const MoeRouting& routing) {
  const auto experts = static_cast<size_t>(routing.experts),
             used = static_cast<size_t>(routing.used);
  Routing r;
  r.expert.resize(static_cast<size_t>(tokens) * used);
  r.weight.resize(static_cast<size_t>(tokens) * used);
  std::vector<float> probs(experts);
  std::vector<int32_t> order(experts);
  for (size_t t = 0; t < static_cast<size_t>(tokens); ++t) {
    const float* logits = router_logits.data() + t * experts;
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
      r.weight[t * used + k] = routing.normalize ? p / chosen : p;
    }
  }
  return r;
}

}  // namespace tern

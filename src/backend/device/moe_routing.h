// Which experts each token of a mixture-of-experts layer goes to, and with what weight: a
// softmax over every expert's router logit (as the reference does, before the choice), the
// `used` best (ties to the lower expert), renormalised over the chosen ones when asked. Run on
// the host by every backend: the experts a step runs decide which weights it reads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/op_params.h"

namespace tern {

struct Routing {
  std::vector<int32_t> expert;  // [tokens * used], best first
  std::vector<float> weight;    // [tokens * used]
};
Routing route_tokens(std::span<const float> router_logits, int64_t tokens,
                     const MoeRouting& routing);

}  // namespace tern

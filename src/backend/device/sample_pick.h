// The token one temperature draw picks from a row of logits: candidates ordered by logit
// (ties: the lower id first), cut by top-k (probabilities normalized over the k), min-p and top-p,
// then the draw walked down the kept candidates' cumulative probabilities (inverse CDF). The
// Sampler's arithmetic, shared by every backend's Device::sample_rows so that sampling where the
// logits are (the GPU) picks what the host would.
#pragma once

#include <cstdint>
#include <span>

#include "ops/op_params.h"

namespace tern {

int32_t pick_token(std::span<const float> logits, const SampleDraw& draw);

}  // namespace tern

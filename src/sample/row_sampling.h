// How one row of logits becomes a token inside a step plan: the logit processors (a constraint's
// mask, repetition / presence / frequency penalties, logit bias) and the pick (argmax or one
// seeded draw) are ops sample/ appends after the model's forward, run where the logits are.
// Each row has its own state, so several rows of one sequence (a token tree's branches) can be
// sampled in one step.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ops/ops.h"

namespace tern {

struct RowSampling {
  bool pick = true;               // false: no token (a teacher-forced row whose logits are wanted)
  bool greedy = true;             // argmax; else the draw
  SampleDraw draw;                // temperature, top-k/p, min-p and the uniform it consumes
  bool return_row = false;        // the row comes back (after the mask, before the penalties)
  std::vector<uint32_t> allowed;  // a constraint's mask, bit t of word t / 32 (empty: none)
  float repetition_penalty = 1.0f;
  std::vector<int32_t> repeated;   // the tokens the repetition penalty applies to
  std::vector<int32_t> penalized;  // presence + frequency penalties: subtracted from these ...
  std::vector<float> penalties;    // ... these amounts
  std::vector<int32_t> biased;     // logit bias: added to these ...
  std::vector<float> biases;       // ... these amounts

  // A teacher-forced row: its logits come back and no token is picked.
  static RowSampling scored() {
    RowSampling r;
    r.pick = false;
    r.return_row = true;
    return r;
  }
};

// Where a step's sampled ids and returned rows land (device memory the plan keeps).
struct SampledRows {
  int32_t* ids = nullptr;  // [rows]: the token of each picking row (others unset)
  Tensor returned;         // [rows with return_row, vocab], in row order; no data when none
};

// Appends the ops that turn logits [rows, vocab] into tokens, one RowSampling a row. Allocates
// the outputs with `allocate` (bytes -> memory kept alive by the plan).
Result<SampledRows> append_sampling(Ops& ops, const Tensor& logits,
                                    std::span<const RowSampling> rows,
                                    const std::function<Result<void*>(size_t)>& allocate);

}  // namespace tern

// One engine step, end to end: the model records its forward over the batch into a plan,
// sample/ appends the ops that pick each logit row's token, the model's device executes the
// plan (CUDA: one graph for a step of this shape), and only the token ids come back (and the
// logit rows a RowSampling asks to return: logprobs, a teacher-forced score).
#pragma once

#include <span>
#include <vector>

#include "models/model.h"
#include "sample/row_sampling.h"

namespace tern {

struct StepOutputs {
  std::vector<int32_t> tokens;  // per logit row: the picked token (-1 where none is picked)
  std::vector<float> rows;      // the returned rows, vocab values each, in row order
};

// `sampling` has one entry per logit row the batch asks for (Model::forward's order).
Result<StepOutputs> run_step(Model& model, KvCache& cache, std::span<SequenceBatch> batch,
                             std::span<const RowSampling> sampling);

}  // namespace tern

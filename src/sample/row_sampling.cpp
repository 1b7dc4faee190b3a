#include "sample/row_sampling.h"

#include <algorithm>

namespace tern {

Result<SampledRows> append_sampling(Ops& ops, const Tensor& logits,
                                    std::span<const RowSampling> rows,
                                    const std::function<Result<void*>(size_t)>& allocate) {
  const int64_t vocab = logits.ne[0];
  if (static_cast<int64_t>(rows.size()) != logits.rows()) {
    return make_error("sampling: {} row states for {} rows of logits", rows.size(), logits.rows());
  }
  SampledRows out;
  int64_t returned = 0;
  bool any_greedy = false;
  for (const auto& r : rows) {
    returned += r.return_row ? 1 : 0;
    any_greedy = any_greedy || (r.pick && r.greedy);
  }
  auto ids = allocate(std::max<size_t>(rows.size(), 1) * sizeof(int32_t));
  if (!ids) return ids.error();
  out.ids = static_cast<int32_t*>(*ids);
  if (returned > 0) {
    auto mem = allocate(static_cast<size_t>(returned * vocab) * sizeof(float));
    if (!mem) return mem.error();
    out.returned.data = *mem;
    out.returned.ne = {vocab, returned, 1, 1};
  }
  StepPlan& plan = ops.plan();
  int64_t at = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowSampling& r = rows[i];
    const Tensor row = logits.row_slice(static_cast<int64_t>(i), 1);
    if (!r.allowed.empty()) ops.mask_logits(row, plan.keep(r.allowed));
    if (r.return_row) {
      ops.copy(row.data, out.returned.row_slice(at++, 1).data,
               static_cast<size_t>(vocab) * sizeof(float));
    }
    if (!r.pick) continue;
    if (r.repetition_penalty != 1.0f)
      ops.repetition_penalty(row, plan.keep(r.repeated), r.repetition_penalty);
    ops.add_to_logits(row, plan.keep(r.penalized), plan.keep(r.penalties));
    ops.add_to_logits(row, plan.keep(r.biased), plan.keep(r.biases));
  }
  // Every row's argmax in one op (the drawn rows' are replaced by their draws next).
  if (any_greedy) ops.argmax_rows(logits, out.ids);
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowSampling& r = rows[i];
    if (!r.pick || r.greedy) continue;
    ops.sample_rows(logits.row_slice(static_cast<int64_t>(i), 1), plan.keep(std::vector{r.draw}),
                    out.ids + i);
  }
  return out;
}

}  // namespace tern

#include "sched/step.h"

#include <memory>

namespace tern {

Result<StepOutputs> run_step(Model& model, KvCache& cache, std::span<SequenceBatch> batch,
                             std::span<const RowSampling> sampling) {
  Device& device = model.device();
  StepPlan plan;
  auto logits = model.forward(batch, cache, plan);
  if (!logits) return logits.error();
  StepOutputs out;
  SampledRows sampled;
  if (logits->data != nullptr) {
    Ops ops(plan);
    auto allocate = [&](size_t bytes) -> Result<void*> {
      auto buffer = device.allocate(bytes);
      if (!buffer) return buffer.error();
      void* data = buffer->data();
      plan.keep_alive(std::make_shared<DeviceBuffer>(std::move(*buffer)));
      return data;
    };
    auto s = append_sampling(ops, *logits, sampling, allocate);
    if (!s) return s.error();
    sampled = *s;
  } else if (!sampling.empty()) {
    return make_error("sampling: {} row states but the batch asks for no logits", sampling.size());
  }
  TERN_TRY(model.execute(plan));
  if (logits->data == nullptr) return out;
  out.tokens.assign(sampling.size(), -1);
  device.download(sampled.ids, out.tokens.data(), out.tokens.size() * sizeof(int32_t));
  for (size_t i = 0; i < sampling.size(); ++i) {
    if (!sampling[i].pick) out.tokens[i] = -1;
  }
  if (sampled.returned.data != nullptr) {
    out.rows.resize(static_cast<size_t>(sampled.returned.elements()));
    device.download(sampled.returned.data, out.rows.data(), out.rows.size() * sizeof(float));
  }
  return out;
}

}  // namespace tern

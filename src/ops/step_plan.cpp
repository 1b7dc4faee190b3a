#include "ops/step_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tern {

const char* op_name(OpKind kind) {
  switch (kind) {
    case OpKind::Matmul:
      return "matmul";
    case OpKind::MatmulsSharedInput:
      return "matmuls_shared_input";
    case OpKind::GetRows:
      return "get_rows";
    case OpKind::RmsNorm:
      return "rms_norm";
    case OpKind::AddRmsNorm:
      return "add_rms_norm";
    case OpKind::Add:
      return "add";
    case OpKind::AddRowVector:
      return "add_row_vector";
    case OpKind::Scale:
      return "scale";
    case OpKind::Copy:
      return "copy";
    case OpKind::GatedActivation:
      return "gated_activation";
    case OpKind::GateUpActivation:
      return "gate_up_activation";
    case OpKind::Rope:
      return "rope";
    case OpKind::StoreKv:
      return "store_kv";
    case OpKind::QkNormRopeStoreKv:
      return "qk_norm_rope_store_kv";
    case OpKind::Attention:
      return "attention";
    case OpKind::MoeExperts:
      return "moe_experts";
    case OpKind::AllReduceSum:
      return "all_reduce_sum";
    case OpKind::GatherVocab:
      return "gather_vocab";
    case OpKind::ArgmaxRows:
      return "argmax_rows";
    case OpKind::SampleRows:
      return "sample_rows";
    case OpKind::AddToLogits:
      return "add_to_logits";
    case OpKind::RepetitionPenalty:
      return "repetition_penalty";
    case OpKind::MaskLogits:
      return "mask_logits";
    case OpKind::CopyKvBlocks:
      return "copy_kv_blocks";
    case OpKind::MoveKvSlots:
      return "move_kv_slots";
  }
  return "?";
}

namespace {

std::string dims(const Tensor& t) {
  if (t.data == nullptr) return "-";
  return fmt::format("{}[{},{},{},{}]", tensor_type_name(t.type), t.ne[0], t.ne[1], t.ne[2],
                     t.ne[3]);
}

template <class... T>
std::string join(const T&... t) {
  std::vector<std::string> parts{dims(t)...};
  return fmt::format("{}", fmt::join(parts, " "));
}

// The operands of one op, shapes and counts only.
struct Describe {
  std::string operator()(const op::Matmul& o) const { return join(o.w, o.x, o.y); }
  std::string operator()(const op::MatmulsSharedInput& o) const {
    std::vector<std::string> parts{dims(o.x)};
    for (int i = 0; i < o.count; ++i)
      parts.push_back(join(o.w[static_cast<size_t>(i)], o.y[static_cast<size_t>(i)]));
    return fmt::format("{}", fmt::join(parts, " "));
  }
  std::string operator()(const op::GetRows& o) const {
    return fmt::format("{} ids={}", join(o.table, o.out), o.ids.size());
  }
  std::string operator()(const op::RmsNorm& o) const { return join(o.x, o.weight, o.out); }
  std::string operator()(const op::AddRmsNorm& o) const {
    return join(o.residual, o.add, o.weight, o.out);
  }
  std::string operator()(const op::Add& o) const { return join(o.a, o.b, o.out); }
  std::string operator()(const op::AddRowVector& o) const { return join(o.x, o.v); }
  std::string operator()(const op::Scale& o) const { return dims(o.x); }
  std::string operator()(const op::Copy& o) const { return fmt::format("bytes={}", o.bytes); }
  std::string operator()(const op::GatedActivation& o) const {
    return fmt::format("act={} {}", static_cast<int>(o.act), join(o.gate, o.up, o.out));
  }
  std::string operator()(const op::GateUpActivation& o) const {
    return fmt::format("act={} {}", static_cast<int>(o.act), join(o.x, o.gate_w, o.up_w, o.out));
  }
  std::string operator()(const op::Rope& o) const {
    return fmt::format("{} rotary={}", dims(o.x), o.params->rotary_dim);
  }
  std::string operator()(const op::StoreKv& o) const {
    return fmt::format("{} slots={}", join(o.k, o.v), o.slots.size());
  }
  std::string operator()(const op::QkNormRopeStoreKv& o) const {
    return fmt::format("{} slots={} rotary={}", join(o.q, o.k, o.v, o.q_norm, o.k_norm),
                       o.slots.size(), o.rope->rotary_dim);
  }
  std::string operator()(const op::Attention& o) const {
    return fmt::format("{} sequences={} window={}", join(o.q, o.out), o.sequences.size(),
                       o.params.sliding_window);
  }
  std::string operator()(const op::MoeExperts& o) const {
    return fmt::format("{} experts={}/{} used={}", join(o.x, o.router_logits, o.out),
                       o.experts.size(), o.routing.experts, o.routing.used);
  }
  std::string operator()(const op::AllReduceSum& o) const { return dims(o.x); }
  std::string operator()(const op::GatherVocab& o) const { return join(o.local, o.out); }
  std::string operator()(const op::ArgmaxRows& o) const { return dims(o.logits); }
  std::string operator()(const op::SampleRows& o) const { return dims(o.logits); }
  std::string operator()(const op::AddToLogits& o) const {
    return fmt::format("{} tokens={}", dims(o.row), o.tokens.size());
  }
  std::string operator()(const op::RepetitionPenalty& o) const {
    return fmt::format("{} tokens={}", dims(o.row), o.tokens.size());
  }
  std::string operator()(const op::MaskLogits& o) const { return dims(o.row); }
  std::string operator()(const op::CopyKvBlocks& o) const {
    return fmt::format("layers={} blocks={}", o.layers.size(), o.from.size());
  }
  std::string operator()(const op::MoveKvSlots& o) const {
    return fmt::format("layers={} slots={}", o.layers.size(), o.from.size());
  }
};

}  // namespace

void StepPlan::fail(Error e) {
  if (!failed_) {
    failed_ = true;
    error_ = std::move(e);
  }
}

std::string StepPlan::describe() const {
  std::string s;
  for (const Op& o : ops_) {
    s.append(op_name(kind_of(o))).append(" ").append(std::visit(Describe{}, o)).append("\n");
  }
  return s;
}

void StepPlan::clear() {
  ops_.clear();
  held_.clear();
  failed_ = false;
  error_ = Error{};
}

}  // namespace tern

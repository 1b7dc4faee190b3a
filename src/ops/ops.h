// The front end models call: each method checks its operands' shapes and records one typed op
// into the step plan (ops/step_plan.h); nothing runs until a backend executes the plan. A shape
// that does not fit fails the plan (StepPlan::status) with an error naming the op and the
// shapes, and the ops after it are not recorded, so model code stays straight-line.
//
// Spans an op takes (ids, positions, slots, sequences, draws) must live until the plan is
// executed: pass arrays from StepPlan::keep, or memory that outlives the step (block tables).
#pragma once

#include <initializer_list>
#include <span>

#include "ops/step_plan.h"

namespace tern {

class Ops {
 public:
  explicit Ops(StepPlan& plan) : plan_(plan) {}
  StepPlan& plan() { return plan_; }

  void matmul(const Tensor& w, const Tensor& x, const Tensor& y);
  // Products of one input by several weights (q, k, v): {weight, output} pairs, at most four.
  void matmuls(const Tensor& x, std::initializer_list<std::pair<Tensor, Tensor>> products);
  void get_rows(const Tensor& table, std::span<const int32_t> ids, const Tensor& out);
  // weight: a null data pointer for none.
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
  void add_rms_norm(const Tensor& residual, const Tensor& add, const Tensor& weight, float eps,
                    const Tensor& out);
  void add(const Tensor& a, const Tensor& b, const Tensor& out);
  void add_row_vector(const Tensor& x, const Tensor& v);
  void scale(const Tensor& x, float factor);
  void copy(const void* src, void* dst, size_t bytes);
  void gated_activation(Activation act, const Tensor& gate, const Tensor& up, const Tensor& out);
  void gate_up_activation(Activation act, const Tensor& x, const Tensor& gate_w, const Tensor& up_w,
                          const Tensor& gate, const Tensor& up, const Tensor& out);
  void rope(const Tensor& x, std::span<const int32_t> positions, const RopeParams& params);
  void store_kv(KvLayer& cache, const Tensor& k, const Tensor& v, std::span<const int32_t> slots);
  void qk_norm_rope_store_kv(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& q_norm, const Tensor& k_norm, float eps,
                             std::span<const int32_t> positions, const RopeParams& rope,
                             KvLayer& cache, std::span<const int32_t> slots);
  void attention(const Tensor& q, const KvLayer& cache,
                 std::span<const AttentionSequence> sequences, const AttentionParams& params,
                 const Tensor& out);
  void moe_experts(const op::MoeExperts& moe);
  void all_reduce_sum(const Tensor& x, Communicator& comm);
  void gather_vocab(const Tensor& local, const Tensor& out, int64_t vocab, Communicator& comm);
  void argmax_rows(const Tensor& logits, int32_t* ids);
  void sample_rows(const Tensor& logits, std::span<const SampleDraw> draws, int32_t* ids);
  void add_to_logits(const Tensor& row, std::span<const int32_t> tokens,
                     std::span<const float> values);
  void repetition_penalty(const Tensor& row, std::span<const int32_t> tokens, float penalty);
  void mask_logits(const Tensor& row, std::span<const uint32_t> allowed);
  void copy_kv_blocks(std::span<KvLayer> layers, std::span<const int32_t> from,
                      std::span<const int32_t> to);
  void move_kv_slots(std::span<KvLayer> layers, std::span<const int32_t> from,
                     std::span<const int32_t> to);

 private:
  // Records `o` unless the plan has failed or `ok` is false (then fails it with `why`).
  template <class... Args>
  bool check(bool ok, fmt::format_string<Args...> why, Args&&... args);
  void record(Op o);
  StepPlan& plan_;
};

}  // namespace tern

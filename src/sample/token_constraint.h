// A constraint on which tokens may come next (constrained decoding: JSON, JSON schema, a tool
// call's syntax). The scheduler asks it to mask a row of logits before sampling and tells it the
// token that was sampled. One instance serves one sequence; it is used from one thread.
#pragma once

#include <cstdint>
#include <span>

namespace tern {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of every token that may not come next to -infinity. When the constrained
  // text is complete only end-of-generation tokens remain; when nothing can follow (the
  // constraint was broken) end-of-generation tokens are allowed so the sequence ends.
  virtual void apply(std::span<float> logits) = 0;
  // The token that was sampled (from the masked logits).
  virtual void accept(int32_t token) = 0;
};

}  // namespace tern

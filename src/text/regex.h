// A compiled PCRE2 pattern (UTF + UCP) that splits text into its matches and the gaps between them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace tern::text {

class Regex {
 public:
  // literal: match the pattern as plain text (HF's `{"String": ...}` split patterns).
  static Result<Regex> compile(const std::string& pattern, bool literal = false);

  // Appends [begin, end) byte offsets of every non-overlapping match in s (which must be valid
  // UTF-8).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

}  // namespace tern::text

// Text normalizers applied to each stretch of text between added tokens (HF `normalizer`).
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.h"

namespace tern::text {

struct ReplaceNormalizer {
  std::string from;
  std::string to;
};
struct PrependNormalizer {
  std::string prefix;
};
struct NfcNormalizer {};

using NormalizerStep = std::variant<ReplaceNormalizer, PrependNormalizer, NfcNormalizer>;

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // s must be valid UTF-8.
  std::string apply(std::string_view s) const;

  // Whether NFC is available in this build (ICU).
  static bool nfc_supported();

 private:
  std::vector<NormalizerStep> steps_;
};

// Unicode NFC of s (s unchanged when ICU is not available).
std::string nfc(std::string_view s);

}  // namespace tern::text

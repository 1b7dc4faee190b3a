// Finds stop strings in streamed text, also when one spans several tokens: text that could still
// be the start of a stop string is held back until the next piece decides it.
#pragma once

#include <string>
#include <vector>

namespace tern {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Output {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; `text` ends right before it
    std::string matched;   // which one
  };
  // Feeds the next piece of generated text.
  Output push(const std::string& piece);
  // End of generation: whatever was held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace tern

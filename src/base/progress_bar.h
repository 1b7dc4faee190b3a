// A terminal progress bar for long loads, imports and downloads. Draws only on a TTY (stderr),
// at most ~10 times a second; silent otherwise so logs and pipes stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tern {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total_bytes);
  ~ProgressBar();
  void update(uint64_t done_bytes);
  void finish();

 private:
  void draw(bool final_draw);
  std::string label_;
  uint64_t total_;
  uint64_t done_ = 0;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

std::string format_bytes(uint64_t bytes);

}  // namespace tern

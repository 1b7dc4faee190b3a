#include "base/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace tern {

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes)
    : label_(std::move(label)),
      total_(total_bytes),
      enabled_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::update(uint64_t done_bytes) {
  done_ = done_bytes;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  done_ = total_;
  draw(true);
}

void ProgressBar::draw(bool final_draw) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  double fraction = total_ == 0 ? 1.0 : static_cast<double>(done_) / static_cast<double>(total_);
  if (fraction > 1.0) fraction = 1.0;
  int filled = static_cast<int>(fraction * kWidth);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0.0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %3.0f%% %s/%s %s/s%s", label_.c_str(), bar.c_str(),
               fraction * 100.0, format_bytes(done_).c_str(), format_bytes(total_).c_str(),
               format_bytes(static_cast<uint64_t>(rate)).c_str(), final_draw ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace tern

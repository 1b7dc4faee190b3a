// A run of streamed text whose edge whitespace is trimmed across pieces (parsers.h): the
// reasoning splitter's reasoning and the content between tool calls.
#include <utility>

#include "api/parsers/parsers.h"

namespace tern::api::parsers {

void TrimmedRun::push(std::string_view t, std::vector<OutputDelta>& out) {
  if (trim_start_) {
    while (!t.empty() && is_space(t.front())) t.remove_prefix(1);
    if (t.empty()) return;
    trim_start_ = false;
  }
  size_t body = t.size();
  while (body > 0 && is_space(t[body - 1])) --body;
  if (body == 0) {
    held_space_.append(t);
    return;
  }
  std::string text = std::move(held_space_);
  text.append(t.substr(0, body));
  held_space_.assign(t.substr(body));
  emit(std::move(text), out);
}

void TrimmedRun::end(bool trim_next_start) {
  held_space_.clear();
  trim_start_ = trim_next_start;
}

void TrimmedRun::flush(std::vector<OutputDelta>& out) {
  if (!held_space_.empty()) emit(std::exchange(held_space_, {}), out);
}

void TrimmedRun::emit(std::string text, std::vector<OutputDelta>& out) const {
  if (!out.empty() && out.back().kind == kind_) {
    out.back().text += text;
  } else {
    out.push_back({kind_, std::move(text), -1, {}, {}});
  }
}

}  // namespace tern::api::parsers

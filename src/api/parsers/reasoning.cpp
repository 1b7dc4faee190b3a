// Reasoning split from content: <think>...</think> (Qwen3, QwQ, DeepSeek-R1, SmolLM3, ...) and
// Gemma 4's <|channel>thought ... <channel|>. The open marker counts only at the start of the
// output (after whitespace); a prompt that already opened it starts the splitter inside.
#include "api/parsers/parsers.h"

namespace tern::api::parsers {

size_t partial_suffix(std::string_view text, std::string_view marker) {
  const size_t most = std::min(text.size(), marker.size() - (marker.empty() ? 0 : 1));
  for (size_t n = most; n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

ReasoningSplitter::ReasoningSplitter(std::string open, std::string close, bool inside)
    : open_(std::move(open)), close_(std::move(close)) {
  if (close_.empty()) {
    state_ = State::After;
  } else {
    state_ = inside ? State::Inside : (open_.empty() ? State::After : State::Start);
  }
}

void ReasoningSplitter::push(std::string_view text, std::vector<OutputDelta>& out,
                             std::string& content) {
  buf_.append(text);
  while (true) {
    if (state_ == State::Start) {
      size_t skip = 0;
      while (skip < buf_.size() && is_space(buf_[skip])) ++skip;
      std::string_view s = std::string_view(buf_).substr(skip);
      if (s.substr(0, open_.size()) == open_) {
        buf_.erase(0, skip + open_.size());
        state_ = State::Inside;
        continue;
      }
      if (std::string_view(open_).substr(0, s.size()) == s) return;  // may still become it
      state_ = State::After;
      continue;
    }
    if (state_ == State::Inside) {
      const size_t pos = buf_.find(close_);
      if (pos != std::string::npos) {
        reasoning_.push(std::string_view(buf_).substr(0, pos), out);
        reasoning_.end(false);
        buf_.erase(0, pos + close_.size());
        state_ = State::After;
        strip_ = true;  // the template's own spacing after the close ("</think>\n\n")
        continue;
      }
      const size_t hold = partial_suffix(buf_, close_);
      reasoning_.push(std::string_view(buf_).substr(0, buf_.size() - hold), out);
      buf_.erase(0, buf_.size() - hold);
      return;
    }
    // After: content.
    if (strip_) {
      size_t skip = 0;
      while (skip < buf_.size() && is_space(buf_[skip])) ++skip;
      buf_.erase(0, skip);
      if (buf_.empty()) return;
      strip_ = false;
    }
    content += buf_;
    buf_.clear();
    return;
  }
}

void ReasoningSplitter::finish(std::vector<OutputDelta>& out, std::string& content) {
  if (state_ == State::Inside) {
    reasoning_.push(buf_, out);
  } else if (!strip_) {
    content += buf_;
  }
  buf_.clear();
  reasoning_.end(false);
}

}  // namespace tern::api::parsers

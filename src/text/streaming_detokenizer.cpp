#include "text/tokenizer.h"
#include "text/utf8.h"

namespace tern {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tok_(tokenizer), skip_special_(skip_special) {}

std::string StreamingDetokenizer::push(int32_t id) {
  if (static_cast<size_t>(id) >= tok_.vocab_size() || id < 0) return {};
  if (skip_special_ && tok_.is_special(id)) return {};
  std::string_view b = tok_.token_bytes(id);
  if (first_ && tok_.strips_leading_space() && !b.empty() && b[0] == ' ') b.remove_prefix(1);
  first_ = false;
  pending_.append(b);
  // Hold back a trailing sequence that is valid so far but not complete.
  size_t cut = pending_.size();
  const size_t lookback = pending_.size() < 3 ? pending_.size() : 3;
  for (size_t k = 1; k <= lookback; ++k) {
    const size_t pos = pending_.size() - k;
    const auto c = static_cast<unsigned char>(pending_[pos]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    if (text::utf8_incomplete_tail(pending_, pos) > 0) cut = pos;
    break;
  }
  std::string out = text::sanitize_utf8(std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out = text::sanitize_utf8(pending_);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace tern

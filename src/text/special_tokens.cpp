#include "text/special_tokens.h"

namespace tern::text {

namespace {

bool is_space_at(std::string_view s, size_t pos, size_t* len) {
  // ASCII whitespace plus the common Unicode spaces; enough for lstrip/rstrip.
  const auto c = static_cast<unsigned char>(s[pos]);
  if (c == ' ' || (c >= '\t' && c <= '\r')) {
    *len = 1;
    return true;
  }
  if (s.substr(pos).starts_with("\xC2\xA0")) {
    *len = 2;
    return true;
  }
  return false;
}

}  // namespace

void AddedTokenMatcher::build(std::vector<AddedToken> tokens) {
  tokens_ = std::move(tokens);
  edges_.clear();
  terminal_.assign(1, -1);
  first_byte_.fill(false);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& s = tokens_[t].content;
    if (s.empty()) continue;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    int32_t node = 0;
    for (char c : s) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        const auto child = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
        it = edges_.emplace(key, child).first;
      }
      node = it->second;
    }
    // Two tokens with the same text: the first one listed wins.
    if (terminal_[static_cast<size_t>(node)] < 0)
      terminal_[static_cast<size_t>(node)] = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, bool parse_special,
                                      size_t* length) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]);
    const auto it = edges_.find(key);
    if (it == edges_.end()) break;
    node = it->second;
    const int32_t t = terminal_[static_cast<size_t>(node)];
    if (t >= 0 && (parse_special || !tokens_[static_cast<size_t>(t)].special)) {
      best = t;
      *length = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<TextSegment>& out) const {
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    const int32_t t = first_byte_[static_cast<unsigned char>(text[pos])]
                          ? longest_at(text, pos, parse_special, &len)
                          : -1;
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<size_t>(t)];
    size_t plain_end = pos;
    if (tok.lstrip) {
      // Swallow whitespace before the token (ASCII only when walking backwards).
      while (plain_end > plain_start) {
        const auto c = static_cast<unsigned char>(text[plain_end - 1]);
        if (c == ' ' || (c >= '\t' && c <= '\r'))
          --plain_end;
        else
          break;
      }
    }
    if (plain_end > plain_start)
      out.push_back({text.substr(plain_start, plain_end - plain_start), -1, plain_start});
    out.push_back({text.substr(pos, len), tok.id, pos});
    pos += len;
    if (tok.rstrip) {
      size_t sl = 0;
      while (pos < text.size() && is_space_at(text, pos, &sl)) pos += sl;
    }
    plain_start = pos;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1, plain_start});
}

}  // namespace tern::text

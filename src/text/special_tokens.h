// Added and special tokens: finds them in raw text (leftmost, then longest match, as HF's added
// vocabulary does) and cuts the text into plain stretches and token ids.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tern::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special =
      false;  // control token: matched only when parse_special; skipped by decode(skip_special)
  bool lstrip = false;  // swallows the whitespace before it
  bool rstrip = false;  // swallows the whitespace after it
};

struct TextSegment {
  std::string_view text;  // when id < 0
  int32_t id = -1;
  size_t offset = 0;  // byte offset of the segment in the input
};

class AddedTokenMatcher {
 public:
  void build(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Cuts text into segments. parse_special=false leaves special tokens as plain text (non-special
  // added tokens are still matched).
  void split(std::string_view text, bool parse_special, std::vector<TextSegment>& out) const;

 private:
  // Longest token starting at pos: its index in tokens_ and its length, or -1.
  int32_t longest_at(std::string_view text, size_t pos, bool parse_special, size_t* length) const;

  std::vector<AddedToken> tokens_;
  // Trie over bytes: edges keyed (node << 8 | byte) -> child; terminal[node] = token index or -1.
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace tern::text

// SentencePiece-style vocabularies: merges derived from the vocabulary, and token spelling.
#include <algorithm>
#include <unordered_set>

#include "text/tokenizer_parts.h"
#include "text/utf8.h"

namespace tern::text {

std::vector<std::array<int32_t, 3>> merges_from_vocab(const std::vector<std::string>& tokens,
                                                      const Vocab& vocab,
                                                      const std::vector<double>& score_of_id) {
  struct Candidate {
    double score;
    int32_t left_len;   // code points
    int32_t right_len;  // code points
    int32_t order;      // first appearance of the merged token
    std::array<int32_t, 3> ids;
  };
  std::vector<Candidate> cands;
  cands.reserve(tokens.size() * 2);
  std::unordered_set<std::string_view> seen;
  seen.reserve(tokens.size());
  int32_t order = 0;
  for (const std::string& tok : tokens) {
    if (!seen.insert(tok).second) continue;  // a duplicate spelling keeps its first position
    const auto merged = vocab.find(tok);
    if (merged == vocab.end()) continue;
    const double score = score_of_id[static_cast<size_t>(merged->second)];
    const std::string_view t = tok;
    const auto total = static_cast<int32_t>(utf8_count(t));
    int32_t left_len = 0;
    size_t pos = 0;
    while (pos < t.size()) {
      size_t n = utf8_sequence_length(t, pos);
      if (n == 0) n = 1;
      pos += n;
      ++left_len;
      if (pos >= t.size()) break;
      const auto l = vocab.find(t.substr(0, pos));
      if (l == vocab.end()) continue;
      const auto r = vocab.find(t.substr(pos));
      if (r == vocab.end()) continue;
      cands.push_back(
          {score, left_len, total - left_len, order, {l->second, r->second, merged->second}});
    }
    ++order;
  }
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_len != b.left_len) return a.left_len > b.left_len;
    if (a.right_len != b.right_len) return a.right_len > b.right_len;
    return a.order < b.order;
  });
  std::vector<std::array<int32_t, 3>> merges;
  merges.reserve(cands.size());
  for (const auto& c : cands) merges.push_back(c.ids);
  return merges;
}

std::string sentencepiece_token_bytes(std::string_view token) {
  // <0xXX>: one raw byte.
  if (token.size() == 6 && token.starts_with("<0x") && token.back() == '>') {
    const auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = hex(token[3]);
    const int lo = hex(token[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  static constexpr std::string_view kSpace = "\xE2\x96\x81";
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    if (token.substr(pos, 3) == kSpace) {
      out.push_back(' ');
      pos += 3;
    } else {
      out.push_back(token[pos++]);
    }
  }
  return out;
}

}  // namespace tern::text

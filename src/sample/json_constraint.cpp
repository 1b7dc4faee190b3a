#include "sample/json_constraint.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace tern {

namespace {

// Complete UTF-8 with no quote, backslash or control byte: cannot end or escape a JSON string.
// Returns the code point count, or -1.
int32_t count_safe_chars(const std::string& s) {
  int32_t chars = 0;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x20 || c == '"' || c == '\\') return -1;
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return -1;
    }
    if (i + len > s.size()) return -1;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if (cc < (k == 1 ? lo : 0x80) || cc > (k == 1 ? hi : 0xBF)) return -1;
    }
    i += len;
    ++chars;
  }
  return chars;
}

void build_trie(const std::vector<std::string>& bytes, std::vector<int32_t> ids,
                TokenVocabulary::Trie& trie) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)];
  });
  trie = {};
  trie.token_ids.reserve(ids.size());
  // Iterative: a node covers a sorted range of ids sharing `depth` leading bytes.
  struct Work {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Work> work;
  trie.nodes.emplace_back();
  work.push_back({0, 0, ids.size(), 0});
  while (!work.empty()) {
    Work w = work.back();
    work.pop_back();
    trie.depth = std::max(trie.depth, w.depth);
    size_t i = w.lo;
    auto& node = trie.nodes[w.node];
    node.first_token = static_cast<uint32_t>(trie.token_ids.size());
    while (i < w.hi && bytes[static_cast<size_t>(ids[i])].size() == w.depth) {
      trie.token_ids.push_back(ids[i++]);
    }
    trie.nodes[w.node].tokens =
        static_cast<uint32_t>(trie.token_ids.size()) - trie.nodes[w.node].first_token;
    trie.nodes[w.node].first_edge = static_cast<uint32_t>(trie.edge_bytes.size());
    std::vector<Work> children;
    while (i < w.hi) {
      const char b = bytes[static_cast<size_t>(ids[i])][w.depth];
      size_t j = i;
      while (j < w.hi && bytes[static_cast<size_t>(ids[j])][w.depth] == b) ++j;
      const auto child = static_cast<uint32_t>(trie.nodes.size());
      trie.nodes.emplace_back();
      trie.edge_bytes.push_back(static_cast<uint8_t>(b));
      trie.edge_nodes.push_back(child);
      children.push_back({child, i, j, w.depth + 1});
      i = j;
    }
    trie.nodes[w.node].edges =
        static_cast<uint32_t>(trie.edge_bytes.size()) - trie.nodes[w.node].first_edge;
    work.insert(work.end(), children.begin(), children.end());
  }
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes,
                                 std::vector<int32_t> end_of_generation)
    : bytes_(std::move(bytes)), eog_(std::move(end_of_generation)) {
  is_eog_.assign(bytes_.size(), 0);
  for (int32_t id : eog_) {
    if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) is_eog_[static_cast<size_t>(id)] = 1;
  }
  std::vector<int32_t> all, breaking;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i].empty() || is_eog_[i]) continue;
    const auto id = static_cast<int32_t>(i);
    all.push_back(id);
    const int32_t chars = count_safe_chars(bytes_[i]);
    if (chars < 0) {
      breaking.push_back(id);
    } else {
      safe_.push_back(id);
      safe_chars_.push_back(chars);
    }
  }
  build_trie(bytes_, std::move(all), all_);
  build_trie(bytes_, std::move(breaking), breaking_);
}

bool TokenVocabulary::is_end_of_generation(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < is_eog_.size() && is_eog_[static_cast<size_t>(id)];
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), matcher_(*grammar_) {
  levels_.resize(vocab_->all().depth + 2);
}

void GrammarConstraint::walk(const TokenVocabulary::Trie& trie, uint32_t node, size_t depth,
                             std::vector<uint8_t>& mask) {
  const auto& n = trie.nodes[node];
  const GrammarMatcher::State& here = levels_[depth];
  GrammarMatcher::State& next = levels_[depth + 1];
  for (uint32_t e = n.first_edge; e < n.first_edge + n.edges; ++e) {
    matcher_.advance(here, trie.edge_bytes[e], next);
    if (next.threads.empty()) continue;
    const auto& child = trie.nodes[trie.edge_nodes[e]];
    for (uint32_t k = child.first_token; k < child.first_token + child.tokens; ++k) {
      mask[static_cast<size_t>(trie.token_ids[k])] = 1;
    }
    if (child.edges > 0) walk(trie, trie.edge_nodes[e], depth + 1, mask);
  }
}

void GrammarConstraint::allowed(std::vector<uint8_t>& mask) {
  mask.assign(vocab_->size(), 0);
  if (broken_ || ended_) return;
  levels_[0] = matcher_.state();
  int64_t count = 0, max = -1;
  if (matcher_.in_plain_string(levels_[0], count, max)) {
    const auto& safe = vocab_->string_safe();
    const auto& chars = vocab_->string_safe_chars();
    for (size_t i = 0; i < safe.size(); ++i) {
      if (max < 0 || count + chars[i] <= max) mask[static_cast<size_t>(safe[i])] = 1;
    }
    walk(vocab_->string_breaking(), 0, 0, mask);
  } else {
    walk(vocab_->all(), 0, 0, mask);
  }
  if (matcher_.can_end()) {
    for (int32_t id : vocab_->end_of_generation()) {
      if (id >= 0 && static_cast<size_t>(id) < mask.size()) mask[static_cast<size_t>(id)] = 1;
    }
  }
}

void GrammarConstraint::apply(std::span<float> logits) {
  allowed(mask_);
  bool any = false;
  for (uint8_t m : mask_) any = any || m != 0;
  if (!any) {  // broken or finished: only the end remains
    for (int32_t id : vocab_->end_of_generation()) {
      if (id >= 0 && static_cast<size_t>(id) < mask_.size()) mask_[static_cast<size_t>(id)] = 1;
    }
  }
  const float ninf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (i >= mask_.size() || !mask_[i]) logits[i] = ninf;
  }
}

void GrammarConstraint::accept(int32_t token) {
  if (vocab_->is_end_of_generation(token)) {
    ended_ = true;
    return;
  }
  if (token < 0 || static_cast<size_t>(token) >= vocab_->size() || broken_) {
    broken_ = true;
    return;
  }
  const std::string& b = vocab_->bytes(token);
  if (b.empty() || !matcher_.feed(b)) broken_ = true;
}

}  // namespace tern

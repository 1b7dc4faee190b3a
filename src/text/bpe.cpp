#include "text/bpe.h"

#include <array>
#include <queue>

#include "text/utf8.h"

namespace tern::text {

namespace {

constexpr size_t kMaxCachedWord = 64;
constexpr size_t kMaxCacheEntries = 1 << 16;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  merges_.reserve(merges.size());
  int32_t rank = 0;
  std::string joined;
  for (const auto& [l, r] : merges) {
    const auto li = vocab_.find(l);
    const auto ri = vocab_.find(r);
    joined.assign(l).append(r);
    const auto ji = vocab_.find(joined);
    if (li == vocab_.end() || ri == vocab_.end() || ji == vocab_.end()) {
      ++dropped_merges_;
      ++rank;
      continue;
    }
    merges_.try_emplace(pair_key(li->second, ri->second), Merge{rank, ji->second});
    ++rank;
  }
  init_byte_ids();
}

BpeModel::BpeModel(Vocab vocab, const std::vector<std::array<int32_t, 3>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& m : merges) merges_.try_emplace(pair_key(m[0], m[1]), Merge{rank++, m[2]});
  init_byte_ids();
}

void BpeModel::init_byte_ids() {
  byte_ids_.fill(-1);
  if (options_.byte_fallback) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const std::string name{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      const auto it = vocab_.find(name);
      if (it != vocab_.end()) byte_ids_[static_cast<size_t>(b)] = it->second;
    }
  }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  encode_uncached(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.try_emplace(std::string(word), out.begin() + static_cast<std::ptrdiff_t>(start),
                       out.end());
  }
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols as a doubly linked list over a vector; a removed symbol has id -1.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  const auto push_symbol = [&](int32_t id) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1});
  };
  bool last_was_unk = false;
  size_t i = 0;
  while (i < word.size()) {
    size_t n = utf8_sequence_length(word, i);
    if (n == 0) n = 1;
    const auto it = vocab_.find(word.substr(i, n));
    if (it != vocab_.end()) {
      push_symbol(it->second);
      last_was_unk = false;
    } else {
      bool all_bytes = options_.byte_fallback;
      for (size_t k = 0; all_bytes && k < n; ++k)
        all_bytes = byte_ids_[static_cast<unsigned char>(word[i + k])] >= 0;
      if (all_bytes) {
        for (size_t k = 0; k < n; ++k)
          push_symbol(byte_ids_[static_cast<unsigned char>(word[i + k])]);
        last_was_unk = false;
      } else if (options_.unk_id) {
        if (!(options_.fuse_unk && last_was_unk)) push_symbol(*options_.unk_id);
        last_was_unk = true;
      }
    }
    i += n;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  // Candidate merges, lowest rank first, then leftmost position.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t next = syms[static_cast<size_t>(pos)].next;
    if (next < 0) return;
    const int32_t l = syms[static_cast<size_t>(pos)].id;
    const int32_t r = syms[static_cast<size_t>(next)].id;
    if (const Merge* m = find_merge(l, r)) queue.push({m->rank, pos, l, r});
  };
  for (int32_t p = 0; p < static_cast<int32_t>(syms.size()); ++p) consider(p);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = syms[static_cast<size_t>(c.pos)];
    if (left.id != c.left_id || left.next < 0) continue;  // stale
    Symbol& right = syms[static_cast<size_t>(left.next)];
    if (right.id != c.right_id) continue;  // stale
    left.id = find_merge(c.left_id, c.right_id)->id;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) syms[static_cast<size_t>(left.next)].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (int32_t p = 0; p >= 0; p = syms[static_cast<size_t>(p)].next)
    out.push_back(syms[static_cast<size_t>(p)].id);
}

}  // namespace tern::text

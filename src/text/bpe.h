// Byte-pair encoding over a vocabulary and ranked merges (HF `BPE` model semantics): a word starts
// as its characters (unknown ones become <0xXX> byte tokens with byte fallback, else the unknown
// token), then the adjacent pair with the lowest merge rank is merged, leftmost first, until none
// is left. A priority queue keeps this O(n log n); results are cached per word.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tern::text {

struct BpeOptions {
  bool byte_fallback = false;  // unknown characters -> <0xXX> tokens
  bool fuse_unk = false;       // consecutive unknown tokens -> one
  bool ignore_merges = false;  // a word that is itself a token is not split
  std::optional<int32_t> unk_id;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // merges: (left, right) spellings in rank order. A merge whose sides or result are not in the
  // vocabulary is dropped (counted in dropped_merges()).
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options);
  // merges as (left id, right id, merged id) in rank order.
  BpeModel(Vocab vocab, const std::vector<std::array<int32_t, 3>>& merges, BpeOptions options);

  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const Vocab& vocab() const { return vocab_; }
  size_t merge_count() const { return merges_.size(); }
  size_t dropped_merges() const { return dropped_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  void init_byte_ids();
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t left, int32_t right) const;

  Vocab vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> tokens, -1 when absent
  size_t dropped_merges_ = 0;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace tern::text

// Constrained decoding over a Grammar (sample/grammar.h): the allowed-token mask is computed by
// walking the vocabulary's byte strings, arranged in a trie, alongside the grammar automaton, so
// a prefix shared by many tokens is matched once and a rejected byte prunes its whole subtree.
// Inside a plain JSON string (most of the output's bytes) the tokens that cannot end or escape
// the string are allowed from a precomputed list and only the rest is walked.
//
//   auto vocab = std::make_shared<TokenVocabulary>(token_bytes, end_of_generation_ids);
//   auto grammar = std::make_shared<Grammar>(*Grammar::from_json_schema(schema));
//   GrammarConstraint c(grammar, vocab);   // a TokenConstraint for one sequence
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sample/grammar.h"
#include "sample/token_constraint.h"

namespace tern {

class TokenVocabulary {
 public:
  // bytes[id]: the text token id adds to the output (empty: never allowed, e.g. control
  // tokens); end_of_generation: ids that end the output (allowed when the text is complete).
  TokenVocabulary(std::vector<std::string> bytes, std::vector<int32_t> end_of_generation);

  size_t size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& end_of_generation() const { return eog_; }
  bool is_end_of_generation(int32_t id) const;

  struct Trie {
    struct Node {
      uint32_t first_edge = 0, edges = 0;    // into edge_bytes / edge_nodes
      uint32_t first_token = 0, tokens = 0;  // into token_ids: tokens ending here
    };
    std::vector<Node> nodes;
    std::vector<uint8_t> edge_bytes;
    std::vector<uint32_t> edge_nodes;
    std::vector<int32_t> token_ids;
    size_t depth = 0;
  };
  const Trie& all() const { return all_; }
  // Tokens that could end, escape or break a JSON string (a quote, a backslash, a control byte,
  // an incomplete UTF-8 sequence), and the others with their code point counts.
  const Trie& string_breaking() const { return breaking_; }
  const std::vector<int32_t>& string_safe() const { return safe_; }
  const std::vector<int32_t>& string_safe_chars() const { return safe_chars_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
  Trie all_, breaking_;
  std::vector<int32_t> safe_, safe_chars_;
};

class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                    std::shared_ptr<const TokenVocabulary> vocab);

  void apply(std::span<float> logits) override;
  void accept(int32_t token) override;

  // The ids allowed next (mask[id] = 1), sized to the vocabulary.
  void allowed(std::vector<uint8_t>& mask);
  bool complete() const { return matcher_.can_end(); }
  bool broken() const { return broken_; }

 private:
  void walk(const TokenVocabulary::Trie& trie, uint32_t node, size_t depth,
            std::vector<uint8_t>& mask);
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  GrammarMatcher matcher_;
  bool broken_ = false;
  bool ended_ = false;
  std::vector<GrammarMatcher::State> levels_;  // walk scratch, one state per trie depth
  std::vector<uint8_t> mask_;
};

}  // namespace tern

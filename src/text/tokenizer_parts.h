// The pieces a Tokenizer is assembled from; filled by the GGUF and tokenizer.json builders.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/bpe.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/special_tokens.h"

namespace tern::text {

enum class TokenizerKind { ByteLevelBpe, SentencePieceBpe };

struct TokenizerParts {
  TokenizerKind kind = TokenizerKind::ByteLevelBpe;
  std::vector<std::string> tokens;  // id -> spelling in the vocabulary
  std::vector<std::string> bytes;   // id -> decoded bytes
  std::vector<uint8_t> special;     // id -> 1 for special (control) tokens
  Normalizer normalizer;
  PreTokenizer pretokenizer;
  std::unique_ptr<BpeModel> bpe;
  AddedTokenMatcher added;
  Vocab token_ids;  // spelling -> id, vocabulary and added tokens
  std::optional<int32_t> bos, eos, eot;
  bool add_bos = false;
  bool add_eos = false;
  bool strip_leading_space = false;  // decode: drop one leading space (Metaspace prefix)
  std::vector<int32_t> end_of_generation;
};

// Fills bytes[] from tokens[] (byte-level alphabet or ▁/<0xXX> spelling), token_ids and the
// end-of-generation set.
void finish_parts(TokenizerParts& parts);

// The SentencePiece-style merges transformers derives from a vocabulary: every split of a token
// into two tokens, ordered by the token's score (higher first), then the longer left side.
std::vector<std::array<int32_t, 3>> merges_from_vocab(const std::vector<std::string>& tokens,
                                                      const Vocab& vocab,
                                                      const std::vector<double>& score_of_id);

// The bytes a SentencePiece token stands for: <0xXX> is that byte, ▁ is a space.
std::string sentencepiece_token_bytes(std::string_view token);

}  // namespace tern::text

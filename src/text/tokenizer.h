// Tokenizer: text <-> token ids for byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM, ...) and
// SentencePiece-style BPE with byte fallback (Gemma, Llama 2), built from GGUF metadata
// (TokenizerSpec) or from a Hugging Face tokenizer.json. Ids match Hugging Face's.
//
//   auto tok = Tokenizer::from_spec(spec);                  // Result<std::unique_ptr<Tokenizer>>
//   auto ids = (*tok)->encode("Hello <|im_end|>", /*add_special_tokens=*/true,
//   /*parse_special=*/true); std::string text = (*tok)->decode(ids, /*skip_special=*/false);
//
// Thread-safe: encode/decode are const and may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "config/tokenizer_spec.h"

namespace tern {

namespace text {
struct TokenizerParts;
}

class Tokenizer {
 public:
  // From GGUF metadata: model "gpt2" (byte-level BPE, pre-tokenizer by `pre`) or "llama"
  // (SentencePiece BPE with byte fallback; merges rebuilt from the vocabulary as transformers does;
  // add_space_prefix=false means Gemma's layout: no prefix, merges in vocabulary order).
  static Result<std::unique_ptr<Tokenizer>> from_spec(const TokenizerSpec& spec);

  // From a Hugging Face tokenizer.json (BPE models); reads tokenizer_config.json beside it, if
  // present, for bos/eos tokens and add_bos_token/add_eos_token.
  static Result<std::unique_ptr<Tokenizer>> from_hf_json(const std::string& path);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special_tokens: add BOS/EOS as the model's config says. parse_special: text such as
  // "<|im_end|>" becomes the special token (true) or is tokenized as plain text (false; added
  // tokens that are not special are still matched). Invalid UTF-8 bytes become U+FFFD first.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens,
                              bool parse_special) const;

  // Ids -> text. Invalid UTF-8 (e.g. a lone byte token) becomes U+FFFD; skip_special drops
  // special (control) tokens. Ids out of range are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // The token as the vocabulary spells it ("Ġhello", "▁hello", "<0x0A>", "<|im_end|>"); empty for
  // an id out of range.
  std::string_view token_text(int32_t id) const;
  // The raw bytes the token stands for in decoded text (may be part of a UTF-8 character).
  std::string_view token_bytes(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token_text) const;

  size_t vocab_size() const;
  std::optional<int32_t> bos() const;
  std::optional<int32_t> eos() const;
  std::optional<int32_t> eot() const;
  bool add_bos() const;
  bool add_eos() const;
  bool is_special(int32_t id) const;
  // EOS, EOT, EOM and other tokens that end a turn (e.g. <|im_end|>, <end_of_turn>).
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const;
  // "byte-level-bpe" or "sentencepiece-bpe".
  std::string_view kind() const;
  // Whether decode drops one leading space of the first token (SentencePiece with a prefix space).
  bool strips_leading_space() const;

  explicit Tokenizer(std::unique_ptr<text::TokenizerParts> parts);

 private:
  std::unique_ptr<text::TokenizerParts> p_;
};

// Turns ids into text one at a time, never emitting a broken UTF-8 sequence: bytes of a character
// split across tokens are held back until it is complete. Invalid bytes become U+FFFD.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);

  // The text that became complete with this token (may be empty).
  std::string push(int32_t id);
  // Flushes what is held back (an incomplete character becomes U+FFFD) and resets.
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace tern

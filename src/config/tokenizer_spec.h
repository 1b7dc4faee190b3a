// Everything a tokenizer needs, parsed once from GGUF `tokenizer.*` keys (or built from an HF
// tokenizer.json by text/). Plain data: text/ builds the tokenizer from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/gguf_file.h"

namespace tern {

// GGUF `tokenizer.ggml.token_type` values.
enum class TokenKind : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct TokenizerSpec {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SentencePiece)
  std::string pre;  // tokenizer.ggml.pre: pre-tokenizer name ("default", "llama-bpe", "qwen2", ...)
  std::vector<std::string> tokens;
  std::vector<float> scores;        // empty when the file has none
  std::vector<TokenKind> kinds;     // empty when the file has none (then all Normal)
  std::vector<std::string> merges;  // "a b" pairs, in rank order (BPE)
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::optional<int32_t> eot_id;
  std::optional<int32_t> eom_id;
  std::optional<int32_t> unknown_id;
  std::optional<int32_t> padding_id;
  std::vector<int32_t> end_of_generation_ids;  // eos, eot, eom and other tokens that end a turn
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: prepend "▁" to the text
  std::string chat_template;      // tokenizer.chat_template, empty when absent
};

// Reads the tokenizer.* keys of a GGUF file, checking every id and array length.
Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file);

}  // namespace tern

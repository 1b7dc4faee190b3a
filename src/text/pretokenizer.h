// Pre-tokenizers: cut normalized text into the pieces BPE runs on (HF `pre_tokenizer`), and the
// regexes of each model family by GGUF `tokenizer.ggml.pre` name.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.h"
#include "text/regex.h"

namespace tern::text {

enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext };

struct SplitStep {
  Regex regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
};

// Splits with the GPT-2 regex (if use_regex) and respells bytes in the byte-level alphabet.
struct ByteLevelStep {
  bool add_prefix_space = false;
  bool use_regex = true;
};

enum class PrependScheme { Always, First, Never };

// SentencePiece spaces: ' ' -> replacement, optional prefix, optional split before each
// replacement.
struct MetaspaceStep {
  std::string replacement = "\xE2\x96\x81";  // U+2581
  PrependScheme prepend = PrependScheme::Always;
  bool split = true;
};

using PreTokenizerStep = std::variant<SplitStep, ByteLevelStep, MetaspaceStep>;

class PreTokenizer {
 public:
  void add(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  bool has_byte_level() const;

  // Cuts s (valid UTF-8) into pieces. first_segment: s starts the input text (Metaspace "first").
  void apply(std::string_view s, bool first_segment, std::vector<std::string>& pieces) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// The regexes by family.
namespace patterns {
extern const char* const kGpt2;
extern const char* const kLlama3;
extern const char* const kQwen2;
extern const char* const kQwen35;
extern const char* const kTekken;
extern const char* const kGpt4o;
}  // namespace patterns

// The byte-level pre-tokenizer for a GGUF `tokenizer.ggml.pre` name ("default", "gpt2", "smollm",
// "llama-bpe", "qwen2", ...). Unknown names are an error rather than a silent guess.
Result<PreTokenizer> byte_level_pretokenizer_for(std::string_view pre_name);

// Digits pre-tokenizer (HF `Digits`): every numeric character alone, or runs of them.
Result<SplitStep> digits_step(bool individual);

}  // namespace tern::text

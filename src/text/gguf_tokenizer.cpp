// Tokenizer::from_spec: the tokenizer GGUF metadata describes, built the way transformers'
// GGUF conversion builds it (so ids match Hugging Face's).
#include <algorithm>

#include "text/byte_level.h"
#include "text/tokenizer.h"
#include "text/tokenizer_parts.h"
#include "text/utf8.h"

namespace tern {

using text::TokenizerParts;

namespace {

bool in_byte_level_alphabet(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = text::utf8_sequence_length(s, i);
    if (n == 0 || !text::byte_level_byte(text::utf8_decode(s, i, n))) return false;
    i += n;
  }
  return true;
}

// Python's str.isspace() for the characters a vocabulary is likely to hold.
bool is_unicode_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// Gemma stores tokens of spaces as real spaces; transformers spells them "▁" per character.
std::string respell_spaces(const std::string& t) {
  if (t.find(' ') == std::string::npos) return t;
  size_t i = 0;
  size_t count = 0;
  while (i < t.size()) {
    const size_t n = text::utf8_sequence_length(t, i);
    if (n == 0 || !is_unicode_space(text::utf8_decode(t, i, n))) return t;
    i += n;
    ++count;
  }
  std::string out;
  for (size_t k = 0; k < count; ++k) out += "\xE2\x96\x81";
  return out;
}

Result<void> check_spec(const TokenizerSpec& spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return make_error("tokenizer: the GGUF has no tokenizer.ggml.tokens");
  if (!spec.scores.empty() && spec.scores.size() != n)
    return make_error("tokenizer: {} scores for {} tokens (tokenizer.ggml.scores)",
                      spec.scores.size(), n);
  if (!spec.kinds.empty() && spec.kinds.size() != n)
    return make_error("tokenizer: {} token types for {} tokens (tokenizer.ggml.token_type)",
                      spec.kinds.size(), n);
  for (const auto& [name, id] :
       {std::pair{"bos", spec.bos_id}, std::pair{"eos", spec.eos_id}, std::pair{"eot", spec.eot_id},
        std::pair{"eom", spec.eom_id}, std::pair{"unknown", spec.unknown_id}}) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n))
      return make_error("tokenizer: {} token id {} is outside the vocabulary of {} tokens", name,
                        *id, n);
  }
  return ok_result();
}

TokenKind kind_of(const TokenizerSpec& spec, size_t i) {
  return spec.kinds.empty() ? TokenKind::Normal : spec.kinds[i];
}

void common_fields(const TokenizerSpec& spec, TokenizerParts& p) {
  p.tokens = spec.tokens;
  p.special.assign(spec.tokens.size(), 0);
  p.bos = spec.bos_id;
  p.eos = spec.eos_id;
  p.eot = spec.eot_id;
  p.add_bos = spec.add_bos;
  p.add_eos = spec.add_eos;
  p.end_of_generation = spec.end_of_generation_ids;
  if (spec.eom_id) p.end_of_generation.push_back(*spec.eom_id);
}

// Control tokens become special added tokens; user-defined ones (when `in_vocab`) plain added
// tokens.
template <typename InVocab>
void add_added_tokens(const TokenizerSpec& spec, TokenizerParts& p, bool byte_level,
                      InVocab in_vocab) {
  std::vector<text::AddedToken> added;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const TokenKind k = kind_of(spec, i);
    const std::string& t = spec.tokens[i];
    const auto id = static_cast<int32_t>(i);
    if (k == TokenKind::Control && (!byte_level || in_byte_level_alphabet(t))) {
      added.push_back({t, id, true, false, false});
      p.special[i] = 1;
    }
  }
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const std::string& t = spec.tokens[i];
    if (kind_of(spec, i) == TokenKind::UserDefined && in_vocab(t))
      added.push_back({t, static_cast<int32_t>(i), false, false, false});
  }
  p.added.build(std::move(added));
}

Result<std::unique_ptr<Tokenizer>> build_byte_level(const TokenizerSpec& spec) {
  auto p = std::make_unique<TokenizerParts>();
  p->kind = text::TokenizerKind::ByteLevelBpe;
  common_fields(spec, *p);
  text::Vocab vocab;
  vocab.reserve(spec.tokens.size());
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const std::string& t = spec.tokens[i];
    vocab.insert_or_assign(in_byte_level_alphabet(t) ? t : text::to_byte_level(t),
                           static_cast<int32_t>(i));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(spec.merges.size());
  for (const auto& m : spec.merges) {
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos)
      return make_error(
          "tokenizer: merge '{}' has no space between its two sides (tokenizer.ggml.merges)", m);
    merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  auto pre = text::byte_level_pretokenizer_for(spec.pre.empty() ? "default" : spec.pre);
  if (!pre) return pre.error();
  p->pretokenizer = std::move(pre.value());
  add_added_tokens(spec, *p, true, [&](const std::string& t) { return vocab.contains(t); });
  text::BpeOptions opts;
  p->bpe = std::make_unique<text::BpeModel>(std::move(vocab), merges, opts);
  text::finish_parts(*p);
  return std::make_unique<Tokenizer>(std::move(p));
}

Result<std::unique_ptr<Tokenizer>> build_sentencepiece(const TokenizerSpec& spec) {
  auto p = std::make_unique<TokenizerParts>();
  p->kind = text::TokenizerKind::SentencePieceBpe;
  common_fields(spec, *p);
  // Gemma's layout (no prefix space): spaces are respelled and merges follow vocabulary order;
  // otherwise (Llama 2 style) merges follow the scores and the text gets a "▁" prefix.
  const bool gemma_style = !spec.add_space_prefix;
  std::vector<std::string> spelled;
  spelled.reserve(spec.tokens.size());
  text::Vocab vocab;
  vocab.reserve(spec.tokens.size());
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    spelled.push_back(gemma_style ? respell_spaces(spec.tokens[i]) : spec.tokens[i]);
    vocab.insert_or_assign(spelled.back(), static_cast<int32_t>(i));
  }
  std::vector<double> score(spec.tokens.size(), 0.0);
  for (size_t i = 0; i < score.size(); ++i)
    score[i] = gemma_style ? -static_cast<double>(i) : (spec.scores.empty() ? 0.0 : spec.scores[i]);
  std::vector<std::array<int32_t, 3>> merges;
  if (!spec.merges.empty()) {
    for (const auto& m : spec.merges) {
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      const auto l = vocab.find(std::string_view(m).substr(0, sp));
      const auto r = vocab.find(std::string_view(m).substr(sp + 1));
      const auto j = vocab.find(m.substr(0, sp) + m.substr(sp + 1));
      if (l != vocab.end() && r != vocab.end() && j != vocab.end())
        merges.push_back({l->second, r->second, j->second});
    }
  } else {
    merges = text::merges_from_vocab(spelled, vocab, score);
  }
  static constexpr const char* kSpace = "\xE2\x96\x81";
  if (gemma_style) {
    p->normalizer.add(text::ReplaceNormalizer{" ", kSpace});
  } else {
    p->pretokenizer.add(text::MetaspaceStep{kSpace, text::PrependScheme::First, false});
    p->strip_leading_space = true;
  }
  add_added_tokens(spec, *p, false, [&](const std::string& t) { return vocab.contains(t); });
  text::BpeOptions opts;
  opts.byte_fallback = true;
  opts.fuse_unk = true;
  opts.unk_id = spec.unknown_id;
  if (!opts.unk_id) {
    const auto it = vocab.find(std::string_view("<unk>"));
    if (it != vocab.end()) opts.unk_id = it->second;
  }
  p->bpe = std::make_unique<text::BpeModel>(std::move(vocab), merges, opts);
  text::finish_parts(*p);
  return std::make_unique<Tokenizer>(std::move(p));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_spec(const TokenizerSpec& spec) {
  TERN_TRY(check_spec(spec));
  if (spec.model == "gpt2") return build_byte_level(spec);
  if (spec.model == "llama") return build_sentencepiece(spec);
  return make_error("tokenizer: unsupported tokenizer.ggml.model '{}' (supported: gpt2, llama)",
                    spec.model);
}

}  // namespace tern

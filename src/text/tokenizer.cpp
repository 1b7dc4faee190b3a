#include "text/tokenizer.h"

#include <algorithm>

#include "text/byte_level.h"
#include "text/tokenizer_parts.h"
#include "text/utf8.h"

namespace tern {

using text::TokenizerParts;

namespace text {

void finish_parts(TokenizerParts& parts) {
  const size_t n = parts.tokens.size();
  parts.bytes.resize(n);
  parts.special.resize(n, 0);
  parts.token_ids.clear();
  parts.token_ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = parts.tokens[i];
    if (parts.kind == TokenizerKind::ByteLevelBpe) {
      auto raw = from_byte_level(t);
      parts.bytes[i] = raw ? std::move(*raw) : t;
    } else {
      parts.bytes[i] = sentencepiece_token_bytes(t);
    }
    parts.token_ids.insert_or_assign(t, static_cast<int32_t>(i));
  }
  // End of generation: the ids the config names plus the usual end-of-turn tokens.
  std::vector<int32_t>& eog = parts.end_of_generation;
  for (auto id : {parts.eos, parts.eot})
    if (id) eog.push_back(*id);
  for (std::string_view name : {"<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>",
                                "<|endoftext|>", "<|end|>", "<|return|>", "<|end_of_text|>"}) {
    const auto it = parts.token_ids.find(name);
    if (it != parts.token_ids.end() && parts.special[static_cast<size_t>(it->second)])
      eog.push_back(it->second);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
}

}  // namespace text

Tokenizer::Tokenizer(std::unique_ptr<TokenizerParts> parts) : p_(std::move(parts)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                       bool parse_special) const {
  std::string clean;
  if (!text::is_valid_utf8(text)) {
    clean = text::sanitize_utf8(text);
    text = clean;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens && p_->add_bos && p_->bos) out.push_back(*p_->bos);
  std::vector<text::TextSegment> segments;
  if (p_->added.empty()) {
    segments.push_back({text, -1, 0});
  } else {
    p_->added.split(text, parse_special, segments);
  }
  std::vector<std::string> pieces;
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    const std::string normalized =
        p_->normalizer.empty() ? std::string(seg.text) : p_->normalizer.apply(seg.text);
    if (p_->pretokenizer.empty()) {
      p_->bpe->encode_word(normalized, out);
      continue;
    }
    pieces.clear();
    p_->pretokenizer.apply(normalized, seg.offset == 0, pieces);
    for (const auto& piece : pieces) p_->bpe->encode_word(piece, out);
  }
  if (add_special_tokens && p_->add_eos && p_->eos) out.push_back(*p_->eos);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= p_->bytes.size()) continue;
    if (skip_special && p_->special[static_cast<size_t>(id)]) continue;
    std::string_view b = p_->bytes[static_cast<size_t>(id)];
    if (first && p_->strip_leading_space && !b.empty() && b[0] == ' ') b.remove_prefix(1);
    first = false;
    out.append(b);
  }
  return text::is_valid_utf8(out) ? out : text::sanitize_utf8(out);
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= p_->tokens.size()) return {};
  return p_->tokens[static_cast<size_t>(id)];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= p_->bytes.size()) return {};
  return p_->bytes[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  const auto it = p_->token_ids.find(token_text);
  if (it == p_->token_ids.end()) return std::nullopt;
  return it->second;
}

size_t Tokenizer::vocab_size() const {
  return p_->tokens.size();
}
std::optional<int32_t> Tokenizer::bos() const {
  return p_->bos;
}
std::optional<int32_t> Tokenizer::eos() const {
  return p_->eos;
}
std::optional<int32_t> Tokenizer::eot() const {
  return p_->eot;
}
bool Tokenizer::add_bos() const {
  return p_->add_bos;
}
bool Tokenizer::add_eos() const {
  return p_->add_eos;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < p_->special.size() &&
         p_->special[static_cast<size_t>(id)];
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(p_->end_of_generation.begin(), p_->end_of_generation.end(), id);
}

const std::vector<int32_t>& Tokenizer::end_of_generation_ids() const {
  return p_->end_of_generation;
}

std::string_view Tokenizer::kind() const {
  return p_->kind == text::TokenizerKind::ByteLevelBpe ? "byte-level-bpe" : "sentencepiece-bpe";
}

bool Tokenizer::strips_leading_space() const {
  return p_->strip_leading_space;
}

}  // namespace tern

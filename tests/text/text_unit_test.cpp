// Small, model-free checks of the tokenizer building blocks.
#include <gtest/gtest.h>

#include "text/bpe.h"
#include "text/byte_level.h"
#include "text/pretokenizer.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace tern {
namespace {

TEST(Utf8, ValidatesAndSanitizes) {
  EXPECT_TRUE(text::is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x8E\x89"));
  EXPECT_FALSE(text::is_valid_utf8("\xC3"));
  EXPECT_FALSE(text::is_valid_utf8("\xED\xA0\x80"));  // surrogate
  EXPECT_FALSE(text::is_valid_utf8("\xC0\xAF"));      // overlong
  EXPECT_EQ(text::sanitize_utf8("a\xFF"
                                "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(text::sanitize_utf8("a\xF0\x9F\x8E"),
            "a\xEF\xBF\xBD");  // one U+FFFD for the cut sequence
  EXPECT_EQ(text::utf8_incomplete_tail("x\xF0\x9F", 1), 2u);
  EXPECT_EQ(text::utf8_incomplete_tail("x\xF0\x41", 1), 0u);
}

TEST(ByteLevel, MapsEveryByteReversibly) {
  EXPECT_EQ(text::byte_level_char(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(text::byte_level_char('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(text::byte_level_char('A'), "A");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(text::from_byte_level(text::to_byte_level(all)), all);
  EXPECT_FALSE(text::from_byte_level("\xE2\x96\x81").has_value());  // ▁ is not in the alphabet
}

TEST(Bpe, MergesLowestRankFirstThenLeftmost) {
  text::Vocab v{{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}};
  text::BpeModel bpe(v, {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}}, {});
  std::vector<int32_t> out;
  bpe.encode_word("abc", out);  // b+c (rank 0) first, then a+bc
  EXPECT_EQ(out, (std::vector<int32_t>{5}));
  out.clear();
  bpe.encode_word("aaa", out);  // leftmost pair first
  EXPECT_EQ(out, (std::vector<int32_t>{6, 0}));
  out.clear();
  bpe.encode_word("abx", out);  // x is unknown and there is no unk token: dropped
  EXPECT_EQ(out, (std::vector<int32_t>{3}));
}

TEST(Bpe, ByteFallbackAndUnknown) {
  text::Vocab v{{"a", 0}, {"<unk>", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  text::BpeOptions o;
  o.byte_fallback = true;
  o.fuse_unk = true;
  o.unk_id = 1;
  text::BpeModel bpe(v, std::vector<std::pair<std::string, std::string>>{}, o);
  std::vector<int32_t> out;
  bpe.encode_word("a\xC3\xA9zz", out);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 2, 3, 1}));
}

TEST(AddedTokens, LeftmostLongestAndParseSpecial) {
  text::AddedTokenMatcher m;
  m.build({{"<a>", 10, true}, {"<a><b>", 11, true}, {"<user>", 12, false}});
  std::vector<text::TextSegment> segs;
  m.split("x<a><b>y<a>z<user>", true, segs);
  ASSERT_EQ(segs.size(), 6u);
  EXPECT_EQ(segs[0].text, "x");
  EXPECT_EQ(segs[1].id, 11);
  EXPECT_EQ(segs[3].id, 10);
  EXPECT_EQ(segs[5].id, 12);
  segs.clear();
  m.split("x<a>y<user>", false, segs);  // special tokens stay text, the user-defined one matches
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].text, "x<a>y");
  EXPECT_EQ(segs[1].id, 12);
}

TEST(PreTokenizer, Gpt2AndLlama3Regexes) {
  auto gpt2 = text::byte_level_pretokenizer_for("gpt2");
  ASSERT_TRUE(gpt2.ok());
  std::vector<std::string> pieces;
  gpt2->apply("Hello  world's 123", true, pieces);
  EXPECT_EQ(pieces, (std::vector<std::string>{"Hello", "\xC4\xA0", "\xC4\xA0world", "'s",
                                              "\xC4\xA0"
                                              "123"}));
  auto llama3 = text::byte_level_pretokenizer_for("llama-bpe");
  ASSERT_TRUE(llama3.ok());
  pieces.clear();
  llama3->apply("12345", true, pieces);
  EXPECT_EQ(pieces, (std::vector<std::string>{"123", "45"}));
  EXPECT_FALSE(text::byte_level_pretokenizer_for("no-such-family").ok());
}

// A tiny byte-level vocabulary: the 256 byte tokens, one merge, two special tokens.
TokenizerSpec tiny_spec() {
  TokenizerSpec s;
  s.model = "gpt2";
  s.pre = "default";
  for (int b = 0; b < 256; ++b)
    s.tokens.emplace_back(text::byte_level_char(static_cast<uint8_t>(b)));
  s.kinds.assign(256, TokenKind::Normal);
  s.tokens.push_back("he");
  s.kinds.push_back(TokenKind::Normal);
  s.merges = {"h e"};
  s.tokens.push_back("<|end|>");
  s.kinds.push_back(TokenKind::Control);
  s.eos_id = 257;
  return s;
}

TEST(Tokenizer, FromSpecEncodesDecodes) {
  auto tok = Tokenizer::from_spec(tiny_spec());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const auto ids = (*tok)->encode("hehe<|end|>", false, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 256, 257}));
  EXPECT_EQ((*tok)->decode(ids, false), "hehe<|end|>");
  EXPECT_EQ((*tok)->decode(ids, true), "hehe");
  EXPECT_TRUE((*tok)->is_end_of_generation(257));
  // Invalid UTF-8 input becomes U+FFFD rather than an error.
  EXPECT_EQ((*tok)->decode((*tok)->encode("a\xFF", false, true), false), "a\xEF\xBF\xBD");
}

TEST(Tokenizer, FromSpecRejectsBadInput) {
  TokenizerSpec s = tiny_spec();
  s.model = "bert";
  EXPECT_FALSE(Tokenizer::from_spec(s).ok());
  s = tiny_spec();
  s.bos_id = 100000;
  EXPECT_FALSE(Tokenizer::from_spec(s).ok());
  EXPECT_FALSE(Tokenizer::from_hf_json("/nonexistent/tokenizer.json").ok());
}

TEST(StreamingDetokenizer, HoldsBackSplitCharacters) {
  auto tok = Tokenizer::from_spec(tiny_spec());
  ASSERT_TRUE(tok.ok());
  StreamingDetokenizer s(**tok);
  // "é" = C3 A9 and "🎉" = F0 9F 8E 89, one byte token each.
  EXPECT_EQ(s.push('a'), "a");
  EXPECT_EQ(s.push(0xC3), "");
  EXPECT_EQ(s.push(0xA9), "\xC3\xA9");
  EXPECT_EQ(s.push(0xF0), "");
  EXPECT_EQ(s.push(0x9F), "");
  EXPECT_EQ(s.push(0x8E), "");
  EXPECT_EQ(s.push(0x89), "\xF0\x9F\x8E\x89");
  // An invalid byte is replaced at once; a cut sequence is replaced at finish.
  EXPECT_EQ(s.push(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(s.push(0xE2), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
  // A sequence broken by an ASCII byte: U+FFFD, then the byte.
  EXPECT_EQ(s.push(0xE2), "");
  EXPECT_EQ(s.push('x'), "\xEF\xBF\xBDx");
}

}  // namespace
}  // namespace tern

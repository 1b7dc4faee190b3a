#include <gtest/gtest.h>

#include <random>

#include "sample/grammar.h"
#include "sample/json_constraint.h"

namespace tern {
namespace {

using nlohmann::json;

bool matches(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.feed(text) && m.can_end();
}

// Every prefix of an accepted text is accepted (a constraint never paints itself into a corner
// on the way to valid output).
void expect_all_prefixes(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_TRUE(m.feed(text.substr(i, 1))) << "rejected at byte " << i << " of " << text;
  }
  EXPECT_TRUE(m.can_end()) << text;
}

json random_json(std::mt19937& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 3 ? 5 : 7));
  auto str = [&] {
    static const std::vector<std::string> pieces = {"a", "Z",  " ", "\"", "\\",   "/",   "\n",
                                                    "é", "中", "😀", "\t", "\x01", "key", "0"};
    std::string s;
    for (size_t n = rng() % 6; n > 0; --n) s += pieces[rng() % pieces.size()];
    return s;
  };
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3:
      return (static_cast<double>(rng() % 100000) - 50000) / 7.0;
    case 4:
      return str();
    case 5: {
      json a = json::array();
      for (size_t n = rng() % 4; n > 0; --n) a.push_back(random_json(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (size_t n = rng() % 4; n > 0; --n) o[str()] = random_json(rng, depth + 1);
      return o;
    }
  }
}

TEST(Grammar, JsonObjectAgreesWithParserOnRandomTexts) {
  const Grammar g = Grammar::json_object();
  std::mt19937 rng(7);
  int valid = 0, invalid = 0;
  for (int i = 0; i < 3000; ++i) {
    json o = json::object();
    for (size_t n = rng() % 4; n > 0; --n) o[std::to_string(rng() % 100)] = random_json(rng, 1);
    std::string text = (i % 3 == 0) ? o.dump(1) : o.dump();
    expect_all_prefixes(g, text);
    if (HasFatalFailure()) return;
    // Mutations: a byte replaced, dropped or inserted; a prefix.
    std::string bad = text;
    const size_t at = rng() % bad.size();
    static const std::string alphabet = "{}[]\":,0123456789-+.eEtrufalsn \\u\x01\xc3\xa9";
    switch (rng() % 4) {
      case 0:
        bad[at] = alphabet[rng() % alphabet.size()];
        break;
      case 1:
        bad.erase(at, 1);
        break;
      case 2:
        bad.insert(at, 1, alphabet[rng() % alphabet.size()]);
        break;
      default:
        bad.resize(at);
        break;
    }
    if (bad.empty() || bad.back() == ' ' || bad.back() == '\n') continue;
    auto parsed = json::parse(bad, nullptr, false);
    const bool ok = !parsed.is_discarded() && parsed.is_object();
    EXPECT_EQ(matches(g, bad), ok) << bad;
    (ok ? valid : invalid)++;
  }
  EXPECT_GT(invalid, 1000);
}

TEST(Grammar, StringsEscapesAndUtf8) {
  const Grammar g = *Grammar::from_json_schema(json{{"type", "string"}});
  for (const char* ok : {R"("")", R"("a\"b")", R"("\u00e9\n\t\\\/")", R"("\ud83d\ude00")",
                         "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\""}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad :
       {R"("\x")", R"("\u12")", R"("\ud83d")", R"("\ude00")", "\"\x01\"", "\"\xc3\"",
        "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf5\x80\x80\x80\"", R"("a)", R"(a")"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
}

TEST(Grammar, NumbersAndIntegers) {
  const Grammar num = *Grammar::from_json_schema(json{{"type", "number"}});
  const Grammar integer = *Grammar::from_json_schema(json{{"type", "integer"}});
  for (const char* ok : {"0", "-0", "12", "-3.25", "1e5", "2.5E-3", "0.0"}) {
    EXPECT_TRUE(matches(num, ok)) << ok;
  }
  for (const char* bad : {"01", "-", "1.", ".5", "1e", "+1", "1.2.3", "--1"}) {
    EXPECT_FALSE(matches(num, bad)) << bad;
  }
  EXPECT_TRUE(matches(integer, "-42"));
  EXPECT_FALSE(matches(integer, "4.2"));
  EXPECT_FALSE(matches(integer, "4e2"));
}

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer"},
    "kind": {"enum": ["cat", "dog", 3]},
    "version": {"const": "v1"},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    "owner": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/person"}]},
    "score": {"type": ["number", "null"]},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "kind"],
  "additionalProperties": false,
  "$defs": {"person": {"type": "object", "properties": {"id": {"type": "integer"},
                       "friend": {"$ref": "#/$defs/person"}}, "required": ["id"]}}
})");

TEST(Grammar, JsonSchemaSubset) {
  auto g = Grammar::from_json_schema(kSchema);
  ASSERT_TRUE(g) << g.error().message;
  for (const char* ok : {
           R"({"name": "Tom", "kind": "cat"})",
           R"({"kind":3,"name":""})",
           R"({"name": "ab", "kind": "dog", "age": -5, "version": "v1", "tags": ["x"],
               "owner": {"id": 1, "friend": {"id": 2}}, "score": 1.5, "ok": true})",
           R"({"name": "ab", "kind": "dog", "owner": null, "score": null, "tags": ["a", "b"]})",
       }) {
    expect_all_prefixes(*g, ok);
  }
  for (const char* bad : {
           R"({"name": "Tom"})",                             // kind missing
           R"({"name": "Tom", "kind": "cow"})",              // not in enum
           R"({"name": "Tom", "kind": "cat", "x": 1})",      // extra key
           R"({"name": "Tom", "kind": "cat", "age": 1.5})",  // not an integer
           R"({"name": "Tom", "kind": "cat", "version": "v2"})",
           R"({"name": "Tom", "kind": "cat", "tags": []})",
           R"({"name": "Tom", "kind": "cat", "tags": ["a", "b", "c"]})",
           R"({"name": "123456789", "kind": "cat"})",  // longer than maxLength
           R"({"name": "Tom", "kind": "cat", "owner": {"friend": {"id": 1}}})",
           R"({"name": "Tom", "kind": "cat", "name": "Tim"})",  // duplicate
           R"({"name": "Tom", "kind": "cat", "ok": "true"})",
       }) {
    EXPECT_FALSE(matches(*g, bad)) << bad;
  }
}

TEST(Grammar, SchemaErrorsNameTheProblem) {
  EXPECT_FALSE(Grammar::from_json_schema(json{{"type", "tuple"}}));
  EXPECT_FALSE(Grammar::from_json_schema(json{{"$ref", "#/$defs/missing"}}));
  EXPECT_FALSE(Grammar::from_json_schema(
      json::parse(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})")));
}

TEST(Grammar, LiteralsSequencesAndRawText) {
  Grammar g;
  auto args = g.add_schema(json::parse(R"({"type": "object", "properties": {"q": {"type":
      "string"}}, "required": ["q"]})"));
  ASSERT_TRUE(args);
  const int32_t call = g.sequence({g.literal("<tool_call>\n{\"name\": \"search\", \"arguments\": "),
                                   *args, g.literal("}\n</tool_call>")});
  const int32_t xml = g.sequence({g.literal("<p>\n"), g.raw_text("<", 100), g.literal("\n</p>")});
  g.set_root(g.choice({call, xml}));
  expect_all_prefixes(
      g, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>");
  expect_all_prefixes(g, "<p>\nline one\nline two\n</p>");
  EXPECT_FALSE(matches(g, "<p>\na < b\n</p>"));
  EXPECT_FALSE(matches(g, "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>"));
}

// A small vocabulary with multi-byte tokens and split UTF-8; the mask must agree with feeding
// each token's bytes, and a random walk over allowed tokens must end in valid output.
std::vector<std::string> test_vocabulary() {
  std::vector<std::string> v = {"<eos>"};
  for (int c = 0x20; c < 0x7f; ++c) v.emplace_back(1, static_cast<char>(c));
  for (const char* t :
       {"{\"",     "\":",  "\": ", "\",",      "\"}",          "},",       "true",
        "false",   "null", "na",   "name",     "\"name\"",     "kind",     "cat",
        "dog",     " \"",  "\n",   "\n  ",     "12",           "\\n",      "\\u00e9",
        "\\ud83d", "\xc3", "\xa9", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f", "\x98\x80",
        "tags",    "[\"",  "\"]",  "owner",    "id",           "score",    "1.5",
        "e+",      "ok",   "\t",   "\x01",     "abcdefghij"}) {
    v.emplace_back(t);
  }
  return v;
}

TEST(GrammarConstraint, MaskAgreesWithBytesAndOutputParses) {
  auto grammar = std::make_shared<Grammar>(*Grammar::from_json_schema(kSchema));
  auto vocab = std::make_shared<TokenVocabulary>(test_vocabulary(), std::vector<int32_t>{0});
  int finished = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937 rng(seed);
    GrammarConstraint c(grammar, vocab);
    GrammarMatcher shadow(*grammar);
    std::string text;
    std::vector<uint8_t> mask;
    bool ended = false;
    for (int step = 0; step < 400 && !ended; ++step) {
      c.allowed(mask);
      std::vector<int32_t> allowed;
      for (size_t id = 1; id < vocab->size(); ++id) {
        GrammarMatcher m = shadow;
        const bool ok = m.feed(vocab->bytes(static_cast<int32_t>(id)));
        ASSERT_EQ(mask[id] != 0, ok)
            << "token '" << vocab->bytes(static_cast<int32_t>(id)) << "' after '" << text << "'";
        if (ok) allowed.push_back(static_cast<int32_t>(id));
      }
      ASSERT_EQ(mask[0] != 0, shadow.can_end()) << text;
      if (mask[0] && (allowed.empty() || rng() % 4 == 0)) {
        ended = true;
        break;
      }
      ASSERT_FALSE(allowed.empty()) << text;
      const int32_t tok = allowed[rng() % allowed.size()];
      c.accept(tok);
      ASSERT_TRUE(shadow.feed(vocab->bytes(tok)));
      text += vocab->bytes(tok);
    }
    if (!ended) continue;
    ++finished;
    auto parsed = json::parse(text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << text;
    EXPECT_TRUE(parsed.contains("name") && parsed.contains("kind")) << text;
  }
  EXPECT_GT(finished, 20);
}

TEST(GrammarConstraint, ApplyMasksLogits) {
  auto grammar = std::make_shared<Grammar>(*Grammar::from_json_schema(json{{"enum", {"dog"}}}));
  auto vocab = std::make_shared<TokenVocabulary>(test_vocabulary(), std::vector<int32_t>{0});
  GrammarConstraint c(grammar, vocab);
  std::vector<float> logits(vocab->size() + 3, 1.0f);
  c.apply(logits);
  std::vector<std::string> allowed;
  for (size_t i = 0; i < vocab->size(); ++i) {
    if (logits[i] == 1.0f) allowed.push_back(vocab->bytes(static_cast<int32_t>(i)));
  }
  EXPECT_EQ(allowed, (std::vector<std::string>{" ", "\"", " \"", "\n", "\n  ", "\t"}));
  EXPECT_TRUE(std::isinf(logits[vocab->size() + 1]));
  for (const char* t : {"\"", "dog", "\""}) {
    for (size_t i = 0; i < vocab->size(); ++i) {
      if (vocab->bytes(static_cast<int32_t>(i)) == t) {
        c.accept(static_cast<int32_t>(i));
        break;
      }
    }
  }
  EXPECT_TRUE(c.complete());
  std::fill(logits.begin(), logits.end(), 1.0f);
  c.apply(logits);
  EXPECT_EQ(logits[0], 1.0f);
  for (size_t i = 1; i < logits.size(); ++i) EXPECT_TRUE(std::isinf(logits[i]));
}

}  // namespace
}  // namespace tern

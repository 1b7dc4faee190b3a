// Expression and statement semantics: the snippets of tests/data/chat-templates/semantics.json
// (rendered by Python jinja2 in transformers' environment, see tools/chat_templates/
// make_semantics.py) must render identically, or fail where jinja2 raised; plus the engine's own
// API behaviour (error line/column, ordered_json vs json, strftime_now pinning).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/jinja/chat_template.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using tern::jinja::ChatTemplate;
using tern::jinja::RenderOptions;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RenderOptions pinned() {
  RenderOptions o;
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 30;
  tm.tm_sec = 5;
  tm.tm_wday = 6;
  tm.tm_yday = 206;
  o.now = tm;
  return o;
}

// Renders `source`; returns the output or "ERROR: <message>".
std::string render(std::string_view source, const ordered_json& ctx = ordered_json::object()) {
  auto t = ChatTemplate::parse(source);
  if (!t.ok()) return "ERROR: " + t.error().message;
  auto r = t->render(ctx, pinned());
  return r.ok() ? r.value() : "ERROR: " + r.error().message;
}

TEST(JinjaSemantics, MatchesJinja2Snippets) {
  auto spec = ordered_json::parse(
      read_file(fs::path(TERN_TEST_DATA_DIR) / "chat-templates" / "semantics.json"));
  int checked = 0;
  for (const auto& c : spec["cases"]) {
    std::string source = c["template"];
    std::string got = render(source, spec["context"]);
    if (c.contains("error")) {
      EXPECT_EQ(got.rfind("ERROR: ", 0), 0u) << "jinja2 raised " << c["error"] << " for\n  "
                                             << source << "\nbut Tern rendered\n  " << got;
    } else {
      EXPECT_EQ(got, c["output"].get<std::string>()) << "template:\n  " << source;
    }
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(JinjaSemantics, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(render("hello\n  {{ 1 + }}"),
            "ERROR: chat template: line 2, column 10: expected an expression, got '}}'");
  EXPECT_EQ(render("{% if x %}\nno end"),
            "ERROR: chat template: line 2, column 7: unexpected end of template, expected 'elif' "
            "or 'else' or 'endif'");
  EXPECT_EQ(render("a\n\n {% include 'x' %}"),
            "ERROR: chat template: line 3, column 5: unsupported or unknown tag 'include'");
  EXPECT_EQ(render("{{ x | nope }}"),
            "ERROR: chat template: line 1, column 8: no filter named 'nope'");
  EXPECT_EQ(render("{{ 'abc }}"),
            "ERROR: chat template: line 1, column 4: unterminated string literal");
  EXPECT_EQ(render("{{ a ! b }}"),
            "ERROR: chat template: line 1, column 6: unexpected character '!'");
}

TEST(JinjaSemantics, RuntimeErrorsNameLineAndColumn) {
  EXPECT_EQ(render("x\n{{ raise_exception('bad role') }}"),
            "ERROR: chat template: line 2, column 4: bad role");
  EXPECT_EQ(render("{% for m in messages %}\n  {{ m.a.b }}{% endfor %}",
                   {{"messages", ordered_json::array({ordered_json::object()})}}),
            "ERROR: chat template: line 2, column 9: 'dict object' has no attribute 'a'");
  EXPECT_EQ(
      render("{% set l = [] %}{% set _ = l.append(1) %}"),
      "ERROR: chat template: line 1, column 29: access to attribute 'append' of 'list' object "
      "is unsafe.");
}

TEST(JinjaSemantics, KeyOrderFollowsTheJsonType) {
  ordered_json ordered = {{"d", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(render("{{ d|tojson }}", ordered), "{\"b\": 1, \"a\": 2}");
  auto t = ChatTemplate::parse("{{ d|tojson }}");
  ASSERT_TRUE(t.ok());
  nlohmann::json sorted = {{"d", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(t->render(sorted).value(), "{\"a\": 2, \"b\": 1}");
}

TEST(JinjaSemantics, ContextMustBeAnObject) {
  auto t = ChatTemplate::parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(ordered_json::array()).ok());
}

TEST(JinjaSemantics, StrftimeNowUsesThePinnedClock) {
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}"), "26 Jul 2025");
  auto t = ChatTemplate::parse("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->render(ordered_json::object()).value().size(), 4u);  // the real clock
}

TEST(JinjaSemantics, TemplatesAreReusableAndIndependent) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n "
      "}}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->render(ordered_json{{"xs", {1, 2}}}).value(), "3");
  EXPECT_EQ(t->render(ordered_json{{"xs", {5}}}).value(), "5");
}

TEST(JinjaSemantics, HostileNestingFailsCleanly) {
  EXPECT_EQ(render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .rfind("ERROR: ", 0),
            0u);
  EXPECT_EQ(render("{{ " + std::string(5000, '-') + "1 }}").rfind("ERROR: ", 0), 0u);
  std::string deep_ifs;
  for (int i = 0; i < 3000; ++i) deep_ifs += "{% if true %}";
  EXPECT_EQ(render(deep_ifs).rfind("ERROR: ", 0), 0u);
  EXPECT_EQ(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").rfind("ERROR: ", 0), 0u);
  EXPECT_EQ(render(std::string(100, '(') + "1" + std::string(100, ')')),
            std::string(100, '(') + "1" + std::string(100, ')'));  // plain text
}

// A template is untrusted input (GGUF files carry theirs): sizes and loops a hostile one asks for
// fail with an error, before the memory or the time is spent; what jinja2 does with negative
// widths and self-referencing namespaces still works.
TEST(JinjaSemantics, HostileSizesAndLoopsFailCleanly) {
  auto fails_with = [](std::string_view source, std::string_view what,
                       int64_t max_steps = 1000000) {
    auto t = ChatTemplate::parse(source);
    ASSERT_TRUE(t.ok()) << t.error().message;
    RenderOptions o = pinned();
    o.max_steps = max_steps;
    auto r = t->render(ordered_json::object(), o);
    ASSERT_FALSE(r.ok()) << source;
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
  };
  fails_with("{{ 'a' * 1000000000000 }}", "more than 64 MiB");
  fails_with("{{ 'x'|center(100000000000) }}", "more than 64 MiB");
  fails_with("{{ 'x'|indent(100000000000, true) }}", "more than 64 MiB");
  fails_with("{{ '5'.zfill(100000000000) }}", "more than 64 MiB");
  fails_with("{{ 'ab'.replace('', 'x' * 40000000) }}", "more than 64 MiB");
  fails_with(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "more than 64 MiB");
  fails_with(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
      "{% endfor %}",
      "more than 1048576 items");
  fails_with("{{ ([1, 2] * 100000000000)|length }}", "more than 1048576 items");
  fails_with("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             "more than 1000 loop iterations", 1000);
  fails_with(
      "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
      "{{ f(30) }}",
      "more than 1000 loop iterations and macro calls", 1000);
  EXPECT_EQ(render("{{ '' * 1000000000000000000 }}|{{ [] * 1000000000000000000 }}"), "|[]");
  // Found by the fuzzer: a slice inside a tuple subscript was evaluated without its object.
  EXPECT_EQ(render("{{ 'abc'[:1, 2:] }}"),
            "ERROR: chat template: line 1, column 10: a slice inside a tuple subscript");
  EXPECT_EQ(render("{{ '5'.zfill(-1) }}|{{ 'x'|center(-3) }}|{{ 'ab'|indent(-2, true) }}"),
            "5|x|ab");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% set ns.x = ns %}{{ ns.x.x.x is defined }}"),
            "True");
}

// Every prefix of every real template (cut each 37 bytes) either parses or fails with an error;
// whatever parses renders or fails with an error. Nothing crashes.
TEST(JinjaSemantics, TruncatedRealTemplatesFailCleanly) {
  fs::path dir = fs::path(TERN_TEST_DATA_DIR) / "chat-templates" / "templates";
  ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                      {"add_generation_prompt", true},
                      {"tools", nullptr}};
  int parsed = 0, failed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string source = read_file(entry.path());
    for (size_t cut = 0; cut < source.size(); cut += 37) {
      auto t = ChatTemplate::parse(std::string_view(source).substr(0, cut));
      if (!t.ok()) {
        EXPECT_FALSE(t.error().message.empty());
        ++failed;
        continue;
      }
      ++parsed;
      auto r = t->render(ctx, pinned());
      if (!r.ok()) {
        EXPECT_FALSE(r.error().message.empty());
      }
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace

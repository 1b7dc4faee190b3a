// Every real chat template in tests/data/chat-templates/templates/ rendered through every scenario
// of scenarios.json must match Python jinja2's rendering byte for byte (the oracle files are made
// by tools/chat_templates/make_expected.py); where jinja2 raised, Tern must fail too.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/jinja/chat_template.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

const fs::path kDir = fs::path(TERN_TEST_DATA_DIR) / "chat-templates";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& spec() {
  static const ordered_json kSpec = ordered_json::parse(read_file(kDir / "scenarios.json"));
  return kSpec;
}

struct Case {
  std::string template_name;
  std::string scenario;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kDir / "templates")) {
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    for (auto it = spec()["scenarios"].begin(); it != spec()["scenarios"].end(); ++it) {
      cases.push_back({name, it.key()});
    }
  }
  return cases;
}

// The context make_expected.py renders with: the template's tokens, tools/documents = None, then
// the scenario's variables.
ordered_json context_for(const Case& c) {
  const auto& tokens = spec()["tokens"];
  ordered_json ctx = tokens.contains(c.template_name) ? tokens[c.template_name] : tokens["default"];
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  for (auto it = spec()["scenarios"][c.scenario].begin();
       it != spec()["scenarios"][c.scenario].end(); ++it) {
    ctx[it.key()] = it.value();
  }
  return ctx;
}

std::tm fixed_now() {
  std::tm tm{};  // 2025-07-26T14:30:05, a Saturday: the scenarios file's "now"
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 14;
  tm.tm_min = 30;
  tm.tm_sec = 5;
  tm.tm_wday = 6;
  tm.tm_yday = 206;
  return tm;
}

std::string excerpt(const std::string& s, size_t at) {
  size_t b = at >= 60 ? at - 60 : 0;
  std::string e = s.substr(b, std::min<size_t>(120, s.size() - std::min(b, s.size())));
  std::string out;
  for (char ch : e) out += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  return out;
}

class ChatTemplateOracle : public ::testing::TestWithParam<Case> {};

TEST_P(ChatTemplateOracle, MatchesJinja2) {
  const Case& c = GetParam();
  ASSERT_EQ(spec()["now"], "2025-07-26T14:30:05") << "update fixed_now() with the scenarios file";
  auto tmpl = tern::jinja::ChatTemplate::parse(
      read_file(kDir / "templates" / (c.template_name + ".jinja")));
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  tern::jinja::RenderOptions options;
  options.now = fixed_now();
  auto rendered = tmpl->render(context_for(c), options);
  fs::path base = kDir / "expected" / (c.template_name + "__" + c.scenario);
  if (fs::exists(base.string() + ".error")) {
    EXPECT_FALSE(rendered.ok()) << "jinja2 raised " << read_file(base.string() + ".error")
                                << "but Tern rendered:\n"
                                << rendered.value();
    return;
  }
  ASSERT_TRUE(rendered.ok()) << rendered.error().message;
  std::string expected = read_file(base.string() + ".txt");
  const std::string& got = rendered.value();
  if (got == expected) return;
  size_t at = 0;
  while (at < got.size() && at < expected.size() && got[at] == expected[at]) ++at;
  ADD_FAILURE() << "first difference at byte " << at << " (expected " << expected.size()
                << " bytes, got " << got.size() << ")\n  expected: ..." << excerpt(expected, at)
                << "...\n  got:      ..." << excerpt(got, at) << "...";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.template_name + "__" + info.param.scenario;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(RealTemplates, ChatTemplateOracle, ::testing::ValuesIn(all_cases()),
                         case_name);

}  // namespace

#include "api/output_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace tern::api {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "verbose": {"type": "boolean"}, "opts": {"type": "object"},
                   "code": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
    "properties": {"query": {"type": "string"}}}}}
])");

OutputFormat format_of(ToolCallFormat tools, bool think) {
  OutputFormat f;
  f.tools = tools;
  if (think) {
    f.reasoning_open = "<think>";
    f.reasoning_close = "</think>";
  }
  return f;
}

struct Result {
  std::string content, reasoning;
  std::vector<std::pair<std::string, json>> calls;
  bool operator==(const Result&) const = default;
};

void PrintTo(const Result& r, std::ostream* os) {
  *os << "content=" << json(r.content) << " reasoning=" << json(r.reasoning) << " calls=[";
  for (const auto& [n, a] : r.calls) *os << n << a.dump() << " ";
  *os << "]";
}

Result run(const OutputFormat& f, const std::vector<std::string>& pieces, bool with_tools = true,
           bool in_reasoning = false) {
  ParserOptions o;
  if (with_tools) o.tools = tool_infos(kTools);
  o.in_reasoning = in_reasoning;
  auto p = make_output_parser(f, o);
  ParsedOutput out;
  int begun = 0, ended = 0;
  auto take = [&](const std::vector<OutputDelta>& ds) {
    for (const auto& d : ds) {
      if (d.kind == OutputDelta::Kind::ToolCallBegin) {
        EXPECT_EQ(d.index, begun++);
        EXPECT_EQ(d.id.rfind("call_", 0), 0u);
      }
      if (d.kind == OutputDelta::Kind::ToolCallEnd) {
        EXPECT_EQ(d.index, ended++);
      }
      if (d.kind == OutputDelta::Kind::Content || d.kind == OutputDelta::Kind::Reasoning) {
        EXPECT_FALSE(d.text.empty());
      }
    }
    out.add(ds);
  };
  for (const auto& s : pieces) take(p->push(s));
  take(p->finish());
  EXPECT_EQ(begun, ended);
  Result r{out.content, out.reasoning, {}};
  for (const auto& c : out.tool_calls) {
    auto args = json::parse(c.arguments, nullptr, false);
    EXPECT_FALSE(args.is_discarded()) << c.arguments;
    EXPECT_TRUE(args.is_object()) << c.arguments;
    r.calls.emplace_back(c.name, args);
  }
  return r;
}

// The same result for the whole text, every split into two pieces, and byte by byte.
void expect_every_split(const OutputFormat& f, const std::string& text, const Result& want,
                        bool with_tools = true, bool in_reasoning = false) {
  EXPECT_EQ(run(f, {text}, with_tools, in_reasoning), want) << "whole";
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(run(f, {text.substr(0, i), text.substr(i)}, with_tools, in_reasoning), want)
        << "split at " << i;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(run(f, bytes, with_tools, in_reasoning), want) << "byte by byte";
}

TEST(OutputParser, PlainTextPassesThrough) {
  const auto f = format_of(ToolCallFormat::Hermes, true);
  expect_every_split(f, "Hello, world! 1 < 2 and <b>bold</b>.\n",
                     {"Hello, world! 1 < 2 and <b>bold</b>.\n", "", {}});
}

TEST(OutputParser, HermesCallAfterText) {
  const auto f = format_of(ToolCallFormat::Hermes, true);
  expect_every_split(f,
                     "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                     "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
                     {"Let me check.", "", {{"get_weather", {{"city", "Paris"}, {"days", 3}}}}});
}

TEST(OutputParser, WhitespaceIsKeptInTextAndDroppedAroundCalls) {
  const auto f = format_of(ToolCallFormat::Hermes, true);
  // Text alone keeps its own leading and trailing whitespace (indented code, a final newline).
  expect_every_split(f, "  indented\n\n", {"  indented\n\n", "", {}});
  // Whitespace right before and after a call is dropped, the text's own spaces stay.
  expect_every_split(f,
                     "Checking it. \n<tool_call>\n{\"name\": \"search\", \"arguments\": "
                     "{}}\n</tool_call>\n\n Done, \n",
                     {"Checking it.Done,", "", {{"search", json::object()}}});
  // Reasoning loses the whitespace inside its markers only.
  expect_every_split(f, "<think>\n  a  b \n</think>\n ok", {"ok", "a  b", {}});
}

TEST(OutputParser, HermesMultipleCallsAndStringArguments) {
  const auto f = format_of(ToolCallFormat::Hermes, false);
  expect_every_split(
      f,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n</tool_call>\n"
      "<tool_call>\n{\"arguments\": \"{\\\"query\\\": \\\"a}b\\\"}\", \"name\": \"search\"}\n"
      "</tool_call>\n",
      {"", "", {{"get_weather", {{"city", "Oslo"}}}, {"search", {{"query", "a}b"}}}}});
}

TEST(OutputParser, HermesMalformedBlockIsContent) {
  const auto f = format_of(ToolCallFormat::Hermes, false);
  const std::string bad =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city}}\n</tool_call>";
  expect_every_split(f, "Before " + bad + " after", {"Before " + bad + " after", "", {}});
  // Not an object / no name / arguments not an object.
  for (std::string body :
       {"[1, 2]", "{\"arguments\": {}}", "{\"name\": \"x\", \"arguments\": 3}"}) {
    const std::string text = "<tool_call>" + body + "</tool_call>";
    EXPECT_EQ(run(f, {text}), (Result{text, "", {}}));
  }
  // A good call after a bad one keeps its index 0.
  auto r = run(f, {bad + "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>"});
  EXPECT_EQ(r.content, bad);
  ASSERT_EQ(r.calls.size(), 1u);
}

TEST(OutputParser, UnterminatedBlockAtFinish) {
  const auto f = format_of(ToolCallFormat::Hermes, false);
  EXPECT_EQ(run(f, {"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n"}),
            (Result{"", "", {{"search", {{"query", "x"}}}}}));
  EXPECT_EQ(run(f, {"<tool_call>\n{\"name\": \"search\", \"argu"}),
            (Result{"<tool_call>\n{\"name\": \"search\", \"argu", "", {}}));
}

TEST(OutputParser, PartialMarkerIsHeldBack) {
  const auto f = format_of(ToolCallFormat::Hermes, true);
  ParserOptions o;
  o.tools = tool_infos(kTools);
  auto p = make_output_parser(f, o);
  ParsedOutput out;
  out.add(p->push("Hello <tool"));
  EXPECT_EQ(out.content, "Hello");
  out.add(p->push("_ca"));
  EXPECT_EQ(out.content, "Hello");
  out.add(p->push("r is here"));
  EXPECT_EQ(out.content, "Hello <tool_car is here");
  out.add(p->finish());
  EXPECT_EQ(out.content, "Hello <tool_car is here");
}

TEST(OutputParser, NoToolsMeansNoCalls) {
  const auto f = format_of(ToolCallFormat::Hermes, false);
  const std::string text = "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>";
  expect_every_split(f, text, {text, "", {}}, /*with_tools=*/false);
}

TEST(OutputParser, ThinkThenContent) {
  const auto f = format_of(ToolCallFormat::Hermes, true);
  expect_every_split(f, "<think>\nHmm, 2+2.\nIt is 4.\n</think>\n\nThe answer is 4.",
                     {"The answer is 4.", "Hmm, 2+2.\nIt is 4.", {}});
  // A <think> later in the text is content.
  expect_every_split(f, "Say <think> please", {"Say <think> please", "", {}});
}

TEST(OutputParser, ReasoningAndCalls) {
  const auto f = format_of(ToolCallFormat::Hermes, true);
  expect_every_split(f,
                     "<think>\nNeed weather.\n</think>\n\n<tool_call>\n{\"name\": "
                     "\"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
                     {"", "Need weather.", {{"get_weather", {{"city", "Rome"}}}}});
  // A call inside reasoning is reasoning.
  auto r = run(f, {"<think><tool_call>{\"name\": \"search\"}</tool_call></think>ok"});
  EXPECT_EQ(r.reasoning, "<tool_call>{\"name\": \"search\"}</tool_call>");
  EXPECT_TRUE(r.calls.empty());
}

TEST(OutputParser, PromptOpenedReasoning) {
  const auto f = format_of(ToolCallFormat::Hermes, true);
  expect_every_split(f, "Let me think.\n</think>\n\nHi!", {"Hi!", "Let me think.", {}}, true, true);
  // Output cut off inside reasoning: all of it is reasoning.
  expect_every_split(f, "Still thinking </thi", {"", "Still thinking </thi", {}}, true, true);
  EXPECT_TRUE(prompt_opens_reasoning(f, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning(f, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning(f, "<think>a</think>b<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning(f, "user said <think> hi<|im_start|>assistant\n"));
}

TEST(OutputParser, Qwen3CoderXmlTypedValues) {
  const auto f = format_of(ToolCallFormat::Qwen3CoderXml, false);
  expect_every_split(
      f,
      "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n5\n</parameter>\n<parameter=verbose>\ntrue\n</parameter>\n"
      "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=code>\n42\n</parameter>\n"
      "<parameter=extra>\n7\n</parameter>\n</function>\n</tool_call>",
      {"I'll look.",
       "",
       {{"get_weather",
         {{"city", "New York"},
          {"days", 5},
          {"verbose", true},
          {"opts", {{"a", {1, 2}}}},
          {"code", "42"},
          {"extra", "7"}}}}});
  // Multi-line string values keep their inner newlines; a bad number stays text.
  auto r =
      run(f, {"<tool_call>\n<function=get_weather>\n<parameter=city>\nline1\nline2\n"
              "</parameter>\n<parameter=days>\nmany\n</parameter>\n</function>\n</tool_call>"});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].second, (json{{"city", "line1\nline2"}, {"days", "many"}}));
  // Malformed: no function tag.
  const std::string bad = "<tool_call>\n<parameter=city>\nX\n</parameter>\n</tool_call>";
  EXPECT_EQ(run(f, {bad}), (Result{bad, "", {}}));
}

TEST(OutputParser, Llama3Json) {
  const auto f = format_of(ToolCallFormat::Llama3Json, false);
  expect_every_split(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}",
                     {"", "", {{"get_weather", {{"city", "Lima"}}}}});
  expect_every_split(f, "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"q\"}}",
                     {"", "", {{"search", {{"query", "q"}}}}});
  // JSON that is not a call of an offered tool is content.
  expect_every_split(f, "{\"name\": \"unknown\", \"parameters\": {}}",
                     {"{\"name\": \"unknown\", \"parameters\": {}}", "", {}});
  expect_every_split(f, "{\"answer\": 42}", {"{\"answer\": 42}", "", {}});
  expect_every_split(f, "Plain {\"name\": \"search\"} text",
                     {"Plain {\"name\": \"search\"} text", "", {}});
  // Two calls separated by ';'.
  auto r = run(f, {"{\"name\": \"search\", \"parameters\": {}}; {\"name\": \"search\", "
                   "\"parameters\": {\"query\": \"b\"}}"});
  EXPECT_EQ(r.calls.size(), 2u);
}

TEST(OutputParser, Gemma4) {
  OutputFormat f;
  f.tools = ToolCallFormat::Gemma4;
  f.reasoning_open = "<|channel>thought";
  f.reasoning_close = "<channel|>";
  expect_every_split(
      f,
      "<|channel>thought\nweather?<channel|><|tool_call>call:get_weather{city:<|\"|>"
      "São Paulo<|\"|>,days:3,opts:{deep:[1,<|\"|>x<|\"|>],on:true}}<tool_call|>",
      {"",
       "weather?",
       {{"get_weather",
         {{"city", "São Paulo"}, {"days", 3}, {"opts", {{"deep", {1, "x"}}, {"on", true}}}}}}});
  const std::string bad = "<|tool_call>call:get_weather{city:<|\"|>unterminated}<tool_call|>";
  EXPECT_EQ(run(f, {bad}), (Result{bad, "", {}}));
}

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(TERN_TEST_DATA_DIR) + "/chat-templates/templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(OutputParser, DetectsFamiliesFromRealTemplates) {
  struct Case {
    const char* file;
    ToolCallFormat tools;
    const char* think;
  };
  const Case cases[] = {
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::Hermes, "<think>"},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::Hermes, ""},
      {"Qwen-QwQ-32B.jinja", ToolCallFormat::Hermes, "<think>"},
      {"Qwen3-Coder.jinja", ToolCallFormat::Qwen3CoderXml, ""},
      {"Qwen3.5-4B.jinja", ToolCallFormat::Qwen3CoderXml, "<think>"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::Hermes, ""},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::Llama3Json, ""},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::Llama3Json, ""},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::Llama3Json, ""},
      {"google-gemma-4-31B-it.jinja", ToolCallFormat::Gemma4, "<|channel>thought"},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::None, ""},
      {"HuggingFaceTB-SmolLM2-135M-Instruct.jinja", ToolCallFormat::None, ""},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolCallFormat::None, "<think>"},
  };
  for (const auto& c : cases) {
    const std::string src = read_template(c.file);
    ASSERT_FALSE(src.empty()) << c.file;
    const auto f = detect_output_format(src);
    EXPECT_EQ(f.tools, c.tools) << c.file;
    EXPECT_EQ(f.reasoning_open, c.think) << c.file;
  }
}

}  // namespace
}  // namespace tern::api

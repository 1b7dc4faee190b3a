// Output split by the model-family parser -> Anthropic content blocks and Responses output
// items, with their stream events, for an output holding reasoning, text and a tool call, fed in
// pieces of every small size.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

#include "api/anthropic_assembler.h"
#include "api/anthropic_blocks.h"
#include "api/responses_assembler.h"

namespace tern::api {
namespace {

using nlohmann::ordered_json;

// A template that writes Hermes-style calls and <think> reasoning (Qwen3-like).
const std::string kTemplate = "{{ '<tool_call>' }}{{ '<think>' }}";
const std::string kPrompt = "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n";
const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
const std::string kOutput =
    "<think>\nParis weather needed.\n</think>\n\nLet me check.\n<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

std::vector<OutputPiece> split_in_pieces(size_t size) {
  OutputSplitter splitter(kTemplate, kPrompt, kTools);
  std::vector<OutputPiece> pieces;
  for (size_t at = 0; at < kOutput.size(); at += size) {
    for (auto& p : splitter.feed(kOutput.substr(at, size))) pieces.push_back(std::move(p));
  }
  for (auto& p : splitter.finish()) pieces.push_back(std::move(p));
  return pieces;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \n");
  const size_t e = s.find_last_not_of(" \n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

TEST(AnthropicAssembler, ThinkingTextAndToolUseBlocksAtEverySplit) {
  for (size_t size : {1, 2, 3, 7, 1000}) {
    SCOPED_TRACE(size);
    std::vector<std::pair<std::string, ordered_json>> events;
    AnthropicBlockAssembler blocks(
        [&](const char* name, const ordered_json& data) { events.emplace_back(name, data); });
    for (const auto& p : split_in_pieces(size)) blocks.add(p);
    blocks.finish();
    const ordered_json& content = blocks.content();
    ASSERT_EQ(content.size(), 3u) << content.dump();
    EXPECT_EQ(content[0]["type"], "thinking");
    EXPECT_EQ(trimmed(content[0]["thinking"].get<std::string>()), "Paris weather needed.");
    EXPECT_EQ(content[0]["signature"], kThinkingSignature);
    EXPECT_EQ(content[1]["type"], "text");
    EXPECT_EQ(trimmed(content[1]["text"].get<std::string>()), "Let me check.");
    EXPECT_EQ(content[2]["type"], "tool_use");
    EXPECT_EQ(content[2]["name"], "get_weather");
    EXPECT_EQ(content[2]["input"], ordered_json({{"city", "Paris"}}));
    EXPECT_EQ(content[2]["id"].get<std::string>().rfind("toolu_", 0), 0u);
    EXPECT_TRUE(blocks.used_tools());

    // Events: each block starts, grows and stops in order; deltas rebuild the blocks; the
    // thinking block gets its signature_delta right before it stops.
    int open = -1;
    std::string thinking, text, json_text;
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& [name, data] = events[i];
      if (name == "content_block_start") {
        EXPECT_EQ(data["index"], open + 1);
        open = data["index"].get<int>();
        EXPECT_EQ(data["content_block"]["type"], content[static_cast<size_t>(open)]["type"]);
      } else if (name == "content_block_delta") {
        EXPECT_EQ(data["index"], open);
        const auto& d = data["delta"];
        if (d["type"] == "thinking_delta") thinking += d["thinking"].get<std::string>();
        if (d["type"] == "text_delta") text += d["text"].get<std::string>();
        if (d["type"] == "input_json_delta") json_text += d["partial_json"].get<std::string>();
        if (d["type"] == "signature_delta") {
          ASSERT_LT(i + 1, events.size());
          EXPECT_EQ(events[i + 1].first, "content_block_stop");
          EXPECT_EQ(open, 0);
        }
      } else {
        EXPECT_EQ(name, "content_block_stop");
        EXPECT_EQ(data["index"], open);
      }
    }
    EXPECT_EQ(open, 2);
    EXPECT_EQ(thinking, content[0]["thinking"]);
    EXPECT_EQ(text, content[1]["text"]);
    EXPECT_EQ(ordered_json::parse(json_text), content[2]["input"]);
  }
}

TEST(AnthropicAssembler, PlainTextIsOneTextBlock) {
  AnthropicBlockAssembler blocks([](const char*, const ordered_json&) {});
  OutputSplitter splitter("{{ messages }}", "", ordered_json::array());
  for (const char* piece : {"Hel", "lo <tool_call>", " world"}) {
    for (const auto& p : splitter.feed(piece)) blocks.add(p);
  }
  for (const auto& p : splitter.finish()) blocks.add(p);
  blocks.finish();
  ASSERT_EQ(blocks.content().size(), 1u);
  EXPECT_EQ(blocks.content()[0]["text"], "Hello <tool_call> world");
  EXPECT_FALSE(blocks.used_tools());
}

TEST(ResponseItemAssembler, ReasoningMessageAndFunctionCallItemsAtEverySplit) {
  for (size_t size : {1, 3, 1000}) {
    SCOPED_TRACE(size);
    std::vector<ordered_json> events;
    ResponseItemAssembler items([&](const ordered_json& e) { events.push_back(e); });
    for (const auto& p : split_in_pieces(size)) items.add(p);
    items.finish("completed");
    const ordered_json& output = items.output();
    ASSERT_EQ(output.size(), 3u) << output.dump();
    EXPECT_EQ(output[0]["type"], "reasoning");
    EXPECT_EQ(trimmed(output[0]["content"][0]["text"].get<std::string>()), "Paris weather needed.");
    EXPECT_EQ(output[1]["type"], "message");
    EXPECT_EQ(output[1]["role"], "assistant");
    EXPECT_EQ(output[1]["content"][0]["type"], "output_text");
    EXPECT_EQ(trimmed(output[1]["content"][0]["text"].get<std::string>()), "Let me check.");
    EXPECT_EQ(output[2]["type"], "function_call");
    EXPECT_EQ(output[2]["name"], "get_weather");
    EXPECT_EQ(ordered_json::parse(output[2]["arguments"].get<std::string>()),
              ordered_json({{"city", "Paris"}}));
    EXPECT_EQ(output[2]["call_id"].get<std::string>().rfind("call_", 0), 0u);
    for (const auto& item : output) EXPECT_EQ(item["status"], "completed");
    EXPECT_TRUE(items.used_tools());

    std::vector<std::string> types;
    std::string arguments;
    for (const auto& e : events) {
      types.push_back(e["type"].get<std::string>());
      if (e["type"] == "response.function_call_arguments.delta") arguments += e["delta"];
      if (e["type"] == "response.function_call_arguments.done") {
        EXPECT_EQ(e["arguments"], output[2]["arguments"]);
      }
      if (e["type"] == "response.output_item.done") {
        EXPECT_EQ(e["item"], output[e["output_index"].get<size_t>()]);
      }
    }
    EXPECT_EQ(arguments, output[2]["arguments"]);
    auto count = [&](const std::string& t) { return std::count(types.begin(), types.end(), t); };
    EXPECT_EQ(count("response.output_item.added"), 3);
    EXPECT_EQ(count("response.output_item.done"), 3);
    EXPECT_EQ(count("response.content_part.added"), 2);
    EXPECT_EQ(count("response.content_part.done"), 2);
    EXPECT_EQ(count("response.reasoning_text.done"), 1);
    EXPECT_EQ(count("response.output_text.done"), 1);
    EXPECT_EQ(count("response.function_call_arguments.done"), 1);
    EXPECT_EQ(types.front(), "response.output_item.added");
    EXPECT_EQ(types.back(), "response.output_item.done");
  }
}

}  // namespace
}  // namespace tern::api

// Each API's JSON -> the neutral ChatRequest: the same meaning reads the same from every wire
// format (tool choice, thinking, sampling), and errors name the field.
#include <gtest/gtest.h>

#include "api/anthropic_messages.h"
#include "api/chat_preparation.h"
#include "api/openai_chat.h"
#include "api/responses.h"

namespace tern::api {
namespace {

using nlohmann::json;
using Mode = ToolChoice::Mode;

const json kUser = json::array({{{"role", "user"}, {"content", "hi"}}});

json openai_tool(const std::string& name) {
  return {{"type", "function"},
          {"function", {{"name", name}, {"parameters", {{"type", "object"}}}}}};
}
json anthropic_tool(const std::string& name) {
  return {{"name", name}, {"input_schema", {{"type", "object"}}}};
}

TEST(OpenAIChatRequest, ToolChoiceSamplingAndThinking) {
  json body = {{"messages", kUser},
               {"tools", {openai_tool("a"), openai_tool("b")}},
               {"tool_choice", {{"type", "function"}, {"function", {{"name", "b"}}}}},
               {"parallel_tool_calls", false},
               {"reasoning_effort", "none"},
               {"temperature", 0.5},
               {"stop", "END"},
               {"max_tokens", 7},
               {"logprobs", true},
               {"top_logprobs", 50}};
  auto chat = openai_chat_request(body, 100);
  ASSERT_TRUE(chat) << chat.error().message;
  EXPECT_EQ(chat->tool_choice.mode, Mode::Named);
  EXPECT_EQ(chat->tool_choice.name, "b");
  EXPECT_EQ(chat->tools.size(), 2u);
  EXPECT_FALSE(chat->parallel_tool_calls);
  EXPECT_EQ(chat->thinking, false);
  EXPECT_EQ(chat->sampling.temperature, 0.5f);
  EXPECT_EQ(chat->sampling.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(chat->sampling.max_tokens, 7);
  EXPECT_EQ(chat->top_logprobs, 20);  // clamped

  auto plain = openai_chat_request({{"messages", kUser}}, 100);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->tool_choice.mode, Mode::Auto);
  EXPECT_FALSE(plain->sampling.temperature);  // the server's default decides
  EXPECT_FALSE(plain->sampling.max_tokens);
  EXPECT_EQ(plain->top_logprobs, -1);
}

TEST(OpenAIChatRequest, ErrorsNameTheField) {
  auto field_of = [](const json& body) {
    auto chat = openai_chat_request(body, 100);
    EXPECT_FALSE(chat);
    return chat ? std::string("<ok>") : chat.error().field;
  };
  EXPECT_EQ(field_of(json::object()), "messages");
  EXPECT_EQ(field_of({{"messages", kUser}, {"tools", "all"}}), "tools");
  EXPECT_EQ(field_of({{"messages", kUser}, {"tool_choice", "required"}}), "tool_choice");
  EXPECT_EQ(field_of({{"messages", kUser}, {"response_format", {{"type", "xml"}}}}),
            "response_format");
  EXPECT_EQ(field_of({{"messages", kUser}, {"max_tokens", 101}}), "");
}

TEST(AnthropicChatRequest, AnyAndToolForceTheCallOverAllTools) {
  json body = {{"max_tokens", 5},
               {"messages", kUser},
               {"tools", {anthropic_tool("a"), anthropic_tool("b")}},
               {"tool_choice", {{"type", "any"}}}};
  auto any = anthropic_chat_request(body);
  ASSERT_TRUE(any) << any.error().message;
  EXPECT_EQ(any->tool_choice.mode, Mode::Required);
  EXPECT_EQ(any->tools.size(), 2u);
  EXPECT_EQ(any->thinking, false);  // the Messages API thinks only when asked
  EXPECT_EQ(any->sampling.max_tokens, 5);

  body["tool_choice"] = {{"type", "tool"}, {"name", "b"}, {"disable_parallel_tool_use", true}};
  auto named = anthropic_chat_request(body);
  ASSERT_TRUE(named) << named.error().message;
  EXPECT_EQ(named->tool_choice.mode, Mode::Named);
  EXPECT_EQ(named->tool_choice.name, "b");
  EXPECT_EQ(named->tools.size(), 2u);  // offered as OpenAI's named choice offers them
  EXPECT_FALSE(named->parallel_tool_calls);

  body["tool_choice"] = {{"type", "tool"}, {"name", "c"}};
  EXPECT_FALSE(anthropic_chat_request(body));
  body["tool_choice"] = {{"type", "none"}};
  auto none = anthropic_chat_request(body);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->tool_choice.mode, Mode::None);
  EXPECT_TRUE(none->tools.empty());
}

TEST(AnthropicChatRequest, AnyWithoutCallableToolsForcesNothing) {
  json body = {{"max_tokens", 5},
               {"messages", kUser},
               {"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}},
               {"tool_choice", {{"type", "any"}}}};
  auto chat = anthropic_chat_request(body);
  ASSERT_TRUE(chat) << chat.error().message;
  EXPECT_EQ(chat->tool_choice.mode, Mode::Auto);
}

TEST(AnthropicChatRequest, SamplingAndStopSequences) {
  json body = {{"max_tokens", 9},
               {"messages", kUser},
               {"top_k", 20},
               {"thinking", {{"type", "enabled"}}},
               {"stop_sequences", {"", "X"}}};
  auto chat = anthropic_chat_request(body);
  ASSERT_TRUE(chat) << chat.error().message;
  EXPECT_EQ(chat->sampling.params.top_k, 20);
  EXPECT_EQ(chat->sampling.stop, std::vector<std::string>{"X"});  // empty ones dropped
  EXPECT_EQ(chat->thinking, true);
  EXPECT_FALSE(anthropic_chat_request({{"messages", kUser}}));  // max_tokens is required
  EXPECT_TRUE(anthropic_conversation({{"messages", kUser}}));   // count_tokens needs none
}

TEST(ResponsesChatRequest, ToolsNarrowedNotForced) {
  json items = json::array({{{"type", "message"}, {"role", "user"}, {"content", "hi"}}});
  json fn = {{"type", "function"}, {"name", "shell"}, {"parameters", {{"type", "object"}}}};
  json body = {{"tools", {fn, {{"type", "web_search"}}}},
               {"tool_choice", "required"},
               {"reasoning", {{"effort", "high"}}},
               {"max_output_tokens", 3}};
  auto chat = responses_chat_request(body, items, 100);
  ASSERT_TRUE(chat) << chat.error().message;
  EXPECT_EQ(chat->tool_choice.mode, Mode::Auto);
  EXPECT_EQ(chat->tools.size(), 1u);
  EXPECT_EQ(chat->thinking, true);
  EXPECT_EQ(chat->sampling.max_tokens, 3);
  body["instructions"] = 5;
  auto bad = responses_chat_request(body, items, 100);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "instructions");
}

TEST(GenerateOptions, UnsetFieldsTakeTheDefaults) {
  SamplingRequest s;
  s.params.top_p = 0.9f;
  GenerateOptions o = generate_options(s, 0.3f, 64);
  EXPECT_EQ(o.sampling.temperature, 0.3f);
  EXPECT_EQ(o.sampling.top_p, 0.9f);
  EXPECT_EQ(o.max_tokens, 64);
  s.temperature = 0.0f;
  s.max_tokens = 5;
  o = generate_options(s, 0.3f, 64);
  EXPECT_EQ(o.sampling.temperature, 0.0f);
  EXPECT_EQ(o.max_tokens, 5);
}

}  // namespace
}  // namespace tern::api

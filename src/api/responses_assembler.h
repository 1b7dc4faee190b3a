// Responses output items (message, reasoning, function_call) from the split output
// (api/anthropic_blocks.h), with the stream's response.* item events as items open, grow and
// close (sequence numbers are the caller's).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "api/anthropic_blocks.h"
#include "api/openai_common.h"

namespace tern::api {

// Output items from pieces of generated text, with the stream's events as items open, grow and
// close. The non-streaming response uses the same machine with events dropped.
class ResponseItemAssembler {
 public:
  using json = nlohmann::ordered_json;
  using Emit = std::function<void(const json& event)>;  // event without sequence_number
  explicit ResponseItemAssembler(Emit emit) : emit_(std::move(emit)) {}

  void add(const OutputPiece& piece) {
    using Kind = OutputPiece::Kind;
    switch (piece.kind) {
      case Kind::Text:
        if (piece.text.empty()) return;
        if (open_ != "message") {
          open({{"id", random_id("msg_")},
                {"type", "message"},
                {"status", "in_progress"},
                {"content", json::array()},
                {"role", "assistant"}});
          part_added(text_part(""));
        }
        text_ += piece.text;
        emit_({{"type", "response.output_text.delta"},
               {"item_id", item_id()},
               {"output_index", output_index()},
               {"content_index", 0},
               {"delta", piece.text},
               {"logprobs", json::array()}});
        return;
      case Kind::Reasoning:
        if (piece.text.empty()) return;
        if (open_ != "reasoning") {
          open({{"id", random_id("rs_")},
                {"type", "reasoning"},
                {"summary", json::array()},
                {"status", "in_progress"}});
          part_added(reasoning_part(""));
        }
        text_ += piece.text;
        emit_({{"type", "response.reasoning_text.delta"},
               {"item_id", item_id()},
               {"output_index", output_index()},
               {"content_index", 0},
               {"delta", piece.text}});
        return;
      case Kind::ToolCallStart:
        open({{"id", random_id("fc_")},
              {"type", "function_call"},
              {"status", "in_progress"},
              {"arguments", ""},
              {"call_id", piece.id.empty() ? random_id("call_") : piece.id},
              {"name", piece.text}});
        return;
      case Kind::ToolCallArguments:
        if (open_ != "function_call" || piece.text.empty()) return;
        text_ += piece.text;
        emit_({{"type", "response.function_call_arguments.delta"},
               {"item_id", item_id()},
               {"output_index", output_index()},
               {"delta", piece.text}});
        return;
      case Kind::ToolCallEnd:
        if (open_ == "function_call") close("completed");
        return;
    }
  }
  // status of the item left open: "completed", or "incomplete" when generation was cut short.
  void finish(const std::string& status) { close(status); }
  const json& output() const { return output_; }
  bool used_tools() const { return used_tools_; }

 private:
  static json text_part(const std::string& text) {
    return {{"type", "output_text"},
            {"annotations", json::array()},
            {"logprobs", json::array()},
            {"text", text}};
  }
  static json reasoning_part(const std::string& text) {
    return {{"type", "reasoning_text"}, {"text", text}};
  }
  std::string item_id() const { return output_.back()["id"].get<std::string>(); }
  int64_t output_index() const { return static_cast<int64_t>(output_.size()) - 1; }

  void open(json item) {
    close("completed");
    open_ = item["type"].get<std::string>();
    text_.clear();
    output_.push_back(item);
    emit_({{"type", "response.output_item.added"},
           {"output_index", output_index()},
           {"item", std::move(item)}});
  }
  void part_added(const json& part) {
    emit_({{"type", "response.content_part.added"},
           {"item_id", item_id()},
           {"output_index", output_index()},
           {"content_index", 0},
           {"part", part}});
  }
  void part_done(const json& part) {
    emit_({{"type", "response.content_part.done"},
           {"item_id", item_id()},
           {"output_index", output_index()},
           {"content_index", 0},
           {"part", part}});
  }
  void close(const std::string& status) {
    if (open_.empty()) return;
    json& item = output_.back();
    if (open_ == "message") {
      emit_({{"type", "response.output_text.done"},
             {"item_id", item_id()},
             {"output_index", output_index()},
             {"content_index", 0},
             {"text", text_},
             {"logprobs", json::array()}});
      part_done(text_part(text_));
      item["content"] = json::array({text_part(text_)});
    } else if (open_ == "reasoning") {
      emit_({{"type", "response.reasoning_text.done"},
             {"item_id", item_id()},
             {"output_index", output_index()},
             {"content_index", 0},
             {"text", text_}});
      part_done(reasoning_part(text_));
      item["content"] = json::array({reasoning_part(text_)});
    } else if (open_ == "function_call") {
      emit_({{"type", "response.function_call_arguments.done"},
             {"item_id", item_id()},
             {"output_index", output_index()},
             {"name", item["name"]},
             {"arguments", text_}});
      item["arguments"] = text_;
      used_tools_ = true;
    }
    item["status"] = status;
    emit_(
        {{"type", "response.output_item.done"}, {"output_index", output_index()}, {"item", item}});
    open_.clear();
    text_.clear();
  }

  Emit emit_;
  json output_ = json::array();
  std::string open_;  // type of the open item; empty when none
  std::string text_;  // the open item's text / reasoning / arguments so far
  bool used_tools_ = false;
};

}  // namespace tern::api

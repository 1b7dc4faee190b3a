// Anthropic content blocks from the split output (api/anthropic_blocks.h), with the stream's
// events (content_block_start / _delta / _stop) as blocks open, grow and close.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "api/anthropic_blocks.h"
#include "api/openai_common.h"

namespace tern::api {

// The opaque signature of thinking blocks (clients expect one; it is ignored when sent back).
inline constexpr const char* kThinkingSignature = "tern-local-thinking";

// Pieces of generated text -> content blocks, emitting the stream events as blocks open, grow
// and close. The non-streaming response uses the same machine with events dropped.
class AnthropicBlockAssembler {
 public:
  using json = nlohmann::ordered_json;
  using Emit = std::function<void(const char* name, const json& data)>;
  explicit AnthropicBlockAssembler(Emit emit) : emit_(std::move(emit)) {}

  void add(const OutputPiece& piece) {
    using Kind = OutputPiece::Kind;
    switch (piece.kind) {
      case Kind::Text:
        if (piece.text.empty()) return;
        if (open_ != "text") open({{"type", "text"}, {"text", ""}});
        content_.back()["text"] = content_.back()["text"].get<std::string>() + piece.text;
        delta({{"type", "text_delta"}, {"text", piece.text}});
        return;
      case Kind::Reasoning:
        if (piece.text.empty()) return;
        if (open_ != "thinking") open({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        content_.back()["thinking"] = content_.back()["thinking"].get<std::string>() + piece.text;
        delta({{"type", "thinking_delta"}, {"thinking", piece.text}});
        return;
      case Kind::ToolCallStart:
        open({{"type", "tool_use"},
              {"id", random_id("toolu_")},
              {"name", piece.text},
              {"input", json::object()}});
        arguments_.clear();
        return;
      case Kind::ToolCallArguments:
        if (open_ != "tool_use" || piece.text.empty()) return;
        arguments_ += piece.text;
        delta({{"type", "input_json_delta"}, {"partial_json", piece.text}});
        return;
      case Kind::ToolCallEnd:
        if (open_ == "tool_use") close();
        return;
    }
  }
  void finish() { close(); }
  const json& content() const { return content_; }
  bool used_tools() const { return used_tools_; }

 private:
  void open(json block) {
    close();
    open_ = block["type"].get<std::string>();
    json start = block;
    content_.push_back(std::move(block));
    const int64_t index = static_cast<int64_t>(content_.size()) - 1;
    emit_("content_block_start",
          {{"type", "content_block_start"}, {"index", index}, {"content_block", start}});
  }
  void delta(const json& d) {
    const int64_t index = static_cast<int64_t>(content_.size()) - 1;
    emit_("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", d}});
  }
  void close() {
    if (open_.empty()) return;
    json& block = content_.back();
    if (open_ == "thinking") {
      block["signature"] = kThinkingSignature;
      delta({{"type", "signature_delta"}, {"signature", kThinkingSignature}});
    } else if (open_ == "tool_use") {
      json input = json::parse(arguments_, nullptr, false);
      block["input"] = input.is_object() ? input : json::object();
      used_tools_ = true;
    }
    const int64_t index = static_cast<int64_t>(content_.size()) - 1;
    emit_("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
    open_.clear();
  }

  Emit emit_;
  json content_ = json::array();
  std::string open_;  // type of the open block; empty when none is open
  std::string arguments_;
  bool used_tools_ = false;
};

}  // namespace tern::api

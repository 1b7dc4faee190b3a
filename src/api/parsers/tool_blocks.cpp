// Tool calls in content: the block extractor for formats with open/close markers (Hermes,
// Qwen3-Coder XML, Gemma 4) and the whole-output extractor of Llama 3.x JSON calls.
#include "api/openai_common.h"
#include "api/parsers/parsers.h"

namespace tern::api::parsers {

using nlohmann::ordered_json;

const nlohmann::json* find_schema(const std::vector<ToolInfo>& tools, const std::string& name) {
  for (const auto& t : tools) {
    if (t.name == name) return t.parameters.is_object() ? &t.parameters : nullptr;
  }
  return nullptr;
}

std::optional<ordered_json> arguments_object(const ordered_json& value) {
  if (value.is_object()) return value;
  if (value.is_null()) return ordered_json::object();
  if (value.is_string()) {
    auto inner = ordered_json::parse(value.get<std::string>(), nullptr, false);
    if (!inner.is_discarded() && inner.is_object()) return inner;
  }
  return std::nullopt;
}

void ContentSink::text(std::string_view t, std::vector<OutputDelta>& out) {
  run_.push(t, out);
}

void ContentSink::call(const Call& c, std::vector<OutputDelta>& out) {
  run_.end(true);  // whitespace between content and a call, or after it, is dropped
  const int index = next_index_++;
  out.push_back({OutputDelta::Kind::ToolCallBegin, {}, index, random_id("call_"), c.name});
  out.push_back({OutputDelta::Kind::ToolCallArguments,
                 c.arguments.dump(-1, ' ', false, ordered_json::error_handler_t::replace),
                 index,
                 {},
                 {}});
  out.push_back({OutputDelta::Kind::ToolCallEnd, {}, index, {}, {}});
}

void ContentSink::finish(std::vector<OutputDelta>& out) {
  // Output that is only text keeps its trailing whitespace; after a call it is dropped.
  if (next_index_ == 0) run_.flush(out);
  run_.end(false);
}

namespace {

// Formats whose calls sit between an open and a close marker.
class BlockExtractor : public ToolExtractor {
 public:
  BlockExtractor(ToolCallFormat format, std::vector<ToolInfo> tools)
      : format_(format), tools_(std::move(tools)) {
    if (format == ToolCallFormat::Gemma4) {
      open_ = "<|tool_call>";
      close_ = "<tool_call|>";
    } else {
      open_ = "<tool_call>";
      close_ = "</tool_call>";
    }
  }

  void push(std::string_view text, std::vector<OutputDelta>& out) override {
    buf_.append(text);
    while (true) {
      if (!in_block_) {
        const size_t pos = buf_.find(open_);
        if (pos == std::string::npos) {
          const size_t hold = partial_suffix(buf_, open_);
          sink_.text(std::string_view(buf_).substr(0, buf_.size() - hold), out);
          buf_.erase(0, buf_.size() - hold);
          return;
        }
        sink_.text(std::string_view(buf_).substr(0, pos), out);
        buf_.erase(0, pos + open_.size());
        in_block_ = true;
        continue;
      }
      const size_t pos = buf_.find(close_);
      if (pos == std::string::npos) return;  // the block is still being written
      block(std::string_view(buf_).substr(0, pos), true, out);
      buf_.erase(0, pos + close_.size());
      in_block_ = false;
    }
  }

  void finish(std::vector<OutputDelta>& out) override {
    if (in_block_) {
      block(buf_, false, out);
    } else {
      sink_.text(buf_, out);
    }
    buf_.clear();
    in_block_ = false;
    sink_.finish(out);
  }

 private:
  void block(std::string_view body, bool closed, std::vector<OutputDelta>& out) {
    std::optional<std::vector<Call>> calls;
    switch (format_) {
      case ToolCallFormat::Qwen3CoderXml:
        calls = parse_qwen3_xml_body(body, tools_);
        break;
      case ToolCallFormat::Gemma4:
        calls = parse_gemma4_body(body);
        break;
      default:
        calls = parse_hermes_body(body);
        break;
    }
    if (calls && !calls->empty()) {
      for (const auto& c : *calls) sink_.call(c, out);
      return;
    }
    // Malformed: the model's text, markers included, is content.
    std::string raw = open_;
    raw.append(body);
    if (closed) raw += close_;
    sink_.text(raw, out);
  }

  ToolCallFormat format_;
  std::vector<ToolInfo> tools_;
  std::string open_, close_;
  std::string buf_;
  bool in_block_ = false;
  ContentSink sink_;
};

// Llama 3.x: a call is the whole output, a JSON object (maybe after <|python_tag|>). Output that
// starts like one is held until the end and then parsed; anything else streams as content.
class Llama3Extractor : public ToolExtractor {
 public:
  explicit Llama3Extractor(std::vector<ToolInfo> tools) : tools_(std::move(tools)) {}

  void push(std::string_view text, std::vector<OutputDelta>& out) override {
    if (state_ == State::Plain) {
      sink_.text(text, out);
      return;
    }
    buf_.append(text);
    if (state_ == State::Candidate) return;
    size_t skip = 0;
    while (skip < buf_.size() && is_space(buf_[skip])) ++skip;
    std::string_view s = std::string_view(buf_).substr(skip);
    if (s.empty()) return;
    static constexpr std::string_view kTag = "<|python_tag|>";
    if (s.front() == '{' || s.substr(0, kTag.size()) == kTag) {
      state_ = State::Candidate;
    } else if (kTag.substr(0, s.size()) != s) {
      state_ = State::Plain;
      sink_.text(buf_, out);
      buf_.clear();
    }
  }

  void finish(std::vector<OutputDelta>& out) override {
    if (state_ == State::Candidate) {
      static constexpr std::string_view kTag = "<|python_tag|>";
      std::string_view s = buf_;
      while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
      if (s.substr(0, kTag.size()) == kTag) s.remove_prefix(kTag.size());
      auto calls = parse_llama3_output(s, tools_);
      if (calls && !calls->empty()) {
        for (const auto& c : *calls) sink_.call(c, out);
      } else {
        sink_.text(buf_, out);
      }
    } else {
      sink_.text(buf_, out);
    }
    buf_.clear();
    sink_.finish(out);
  }

 private:
  enum class State { Undecided, Candidate, Plain };
  std::vector<ToolInfo> tools_;
  State state_ = State::Undecided;
  std::string buf_;
  ContentSink sink_;
};

}  // namespace

std::unique_ptr<ToolExtractor> make_block_extractor(ToolCallFormat format,
                                                    std::vector<ToolInfo> tools) {
  return std::make_unique<BlockExtractor>(format, std::move(tools));
}

std::unique_ptr<ToolExtractor> make_llama3_extractor(std::vector<ToolInfo> tools) {
  return std::make_unique<Llama3Extractor>(std::move(tools));
}

}  // namespace tern::api::parsers

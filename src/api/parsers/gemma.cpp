// Gemma 4 calls (google-gemma-4 template): <|tool_call>call:NAME{key:VALUE,...}<tool_call|>,
// where strings are quoted with <|"|>, keys of the arguments are bare, numbers and booleans are
// plain, and objects / arrays nest with {} and []. Gemma 2 and 3 templates know no tools.
#include "api/parsers/parsers.h"

namespace tern::api::parsers {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kQuote = "<|\"|>";

class GemmaValueParser {
 public:
  explicit GemmaValueParser(std::string_view s) : s_(s) {}

  std::optional<ordered_json> value(int depth = 0) {
    if (depth > 64) return std::nullopt;
    space();
    if (at(kQuote)) return quoted();
    if (i_ >= s_.size()) return std::nullopt;
    if (s_[i_] == '{') return object(depth);
    if (s_[i_] == '[') return array(depth);
    // A bare scalar up to the next delimiter.
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']') ++i_;
    std::string_view raw = s_.substr(start, i_ - start);
    while (!raw.empty() && is_space(raw.back())) raw.remove_suffix(1);
    if (raw.empty()) return std::nullopt;
    auto parsed = ordered_json::parse(raw, nullptr, false);
    if (!parsed.is_discarded() && !parsed.is_object() && !parsed.is_array()) return parsed;
    return ordered_json(std::string(raw));
  }

  std::optional<ordered_json> object(int depth) {
    if (!eat('{')) return std::nullopt;
    ordered_json out = ordered_json::object();
    space();
    if (eat('}')) return out;
    while (true) {
      space();
      std::string key;
      if (at(kQuote)) {
        auto k = quoted();
        if (!k) return std::nullopt;
        key = k->get<std::string>();
      } else {
        const size_t start = i_;
        while (i_ < s_.size() && s_[i_] != ':' && s_[i_] != '}' && s_[i_] != ',') ++i_;
        key = std::string(s_.substr(start, i_ - start));
        while (!key.empty() && is_space(key.back())) key.pop_back();
      }
      if (key.empty()) return std::nullopt;
      space();
      if (!eat(':')) return std::nullopt;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      out[key] = std::move(*v);
      space();
      if (eat('}')) return out;
      if (!eat(',')) return std::nullopt;
    }
  }

  std::optional<ordered_json> array(int depth) {
    if (!eat('[')) return std::nullopt;
    ordered_json out = ordered_json::array();
    space();
    if (eat(']')) return out;
    while (true) {
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      space();
      if (eat(']')) return out;
      if (!eat(',')) return std::nullopt;
    }
  }

  bool done() {
    space();
    return i_ == s_.size();
  }

 private:
  std::optional<ordered_json> quoted() {
    i_ += kQuote.size();
    const size_t end = s_.find(kQuote, i_);
    if (end == std::string_view::npos) return std::nullopt;
    ordered_json out = std::string(s_.substr(i_, end - i_));
    i_ = end + kQuote.size();
    return out;
  }
  bool at(std::string_view t) const { return s_.substr(i_, t.size()) == t; }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void space() {
    while (i_ < s_.size() && is_space(s_[i_])) ++i_;
  }
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<std::vector<Call>> parse_gemma4_body(std::string_view body) {
  while (!body.empty() && is_space(body.front())) body.remove_prefix(1);
  static constexpr std::string_view kCall = "call:";
  if (body.substr(0, kCall.size()) != kCall) return std::nullopt;
  body.remove_prefix(kCall.size());
  const size_t brace = body.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  Call c;
  c.name = std::string(body.substr(0, brace));
  while (!c.name.empty() && is_space(c.name.back())) c.name.pop_back();
  if (c.name.empty() || c.name.find_first_of(" \n{}<>") != std::string::npos) return std::nullopt;
  GemmaValueParser p(body.substr(brace));
  auto args = p.object(0);
  if (!args || !p.done()) return std::nullopt;
  c.arguments = std::move(*args);
  return std::vector<Call>{std::move(c)};
}

}  // namespace tern::api::parsers

#include "sample/grammar.h"

#include <fmt/format.h>

namespace tern {

using nlohmann::json;

// ---- compiling -------------------------------------------------------------------------------

int32_t Grammar::add(GrammarNode n) {
  nodes_.push_back(std::move(n));
  return static_cast<int32_t>(nodes_.size() - 1);
}

int32_t Grammar::literal(std::string text, bool ws_before) {
  GrammarNode n;
  n.kind = GrammarNode::Kind::Literal;
  n.text = std::move(text);
  n.ws_before = ws_before;
  return add(std::move(n));
}

int32_t Grammar::sequence(std::vector<int32_t> children) {
  GrammarNode n;
  n.kind = GrammarNode::Kind::Sequence;
  n.children = std::move(children);
  return add(std::move(n));
}

int32_t Grammar::choice(std::vector<int32_t> children) {
  GrammarNode n;
  n.kind = GrammarNode::Kind::Choice;
  n.children = std::move(children);
  return add(std::move(n));
}

int32_t Grammar::raw_text(std::string stop_bytes, int64_t max_bytes) {
  GrammarNode n;
  n.kind = GrammarNode::Kind::RawText;
  n.stop_bytes = std::move(stop_bytes);
  n.max = max_bytes;
  return add(std::move(n));
}

int32_t Grammar::any_value() {
  if (any_ >= 0) return any_;
  any_ = choice({});
  GrammarNode obj;
  obj.kind = GrammarNode::Kind::Object;
  obj.additional = any_;
  GrammarNode arr;
  arr.kind = GrammarNode::Kind::Array;
  arr.items = any_;
  GrammarNode str;
  str.kind = GrammarNode::Kind::String;
  GrammarNode num;
  num.kind = GrammarNode::Kind::Number;
  std::vector<int32_t> alts = {add(std::move(obj)),  add(std::move(arr)),   add(std::move(str)),
                               add(std::move(num)),  literal("true", true), literal("false", true),
                               literal("null", true)};
  nodes_[static_cast<size_t>(any_)].children = std::move(alts);
  return any_;
}

Grammar Grammar::json_object() {
  Grammar g;
  GrammarNode obj;
  obj.kind = GrammarNode::Kind::Object;
  obj.additional = g.any_value();
  g.root_ = g.add(std::move(obj));
  return g;
}

Result<Grammar> Grammar::from_json_schema(const json& schema) {
  Grammar g;
  auto root = g.add_schema(schema);
  if (!root) return root.error();
  g.root_ = *root;
  return g;
}

Result<int32_t> Grammar::add_schema(const json& schema) {
  document_ = &schema;
  refs_.clear();
  auto r = compile(schema, 0);
  document_ = nullptr;
  return r;
}

namespace {

int64_t int_field(const json& s, const char* key, int64_t fallback) {
  if (s.contains(key) && s[key].is_number_integer()) return s[key].get<int64_t>();
  return fallback;
}

}  // namespace

Result<int32_t> Grammar::compile(const json& s, int depth) {
  if (depth > 64) return Error{"the JSON schema is nested too deeply (more than 64 levels)"};
  if (s.is_boolean()) {
    if (s.get<bool>()) return any_value();
    return Error{"the JSON schema 'false' accepts nothing"};
  }
  if (!s.is_object()) return make_error("a JSON schema must be an object, not {}", s.dump());
  if (s.contains("$ref")) {
    if (!s["$ref"].is_string()) return Error{"'$ref' must be a string"};
    const std::string ref = s["$ref"].get<std::string>();
    for (const auto& [name, node] : refs_) {
      if (name == ref) return node;
    }
    const json* target = nullptr;
    if (ref == "#") {
      target = document_;
    } else if (ref.rfind("#/", 0) == 0 && document_ != nullptr) {
      try {
        target = &document_->at(json::json_pointer(ref.substr(1)));
      } catch (const std::exception&) {
        target = nullptr;
      }
    }
    if (target == nullptr) return make_error("'$ref' '{}' does not point into this schema", ref);
    const int32_t slot = choice({});  // filled below; recursion refers to it
    refs_.emplace_back(ref, slot);
    auto inner = compile(*target, depth + 1);
    if (!inner) return inner.error();
    nodes_[static_cast<size_t>(slot)].children = {*inner};
    return slot;
  }
  if (s.contains("const")) return literal(s["const"].dump(), true);
  if (s.contains("enum")) {
    if (!s["enum"].is_array() || s["enum"].empty())
      return Error{"'enum' must be a non-empty array"};
    std::vector<int32_t> alts;
    for (const auto& v : s["enum"]) alts.push_back(literal(v.dump(), true));
    return choice(std::move(alts));
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    if (!s[key].is_array() || s[key].empty())
      return make_error("'{}' must be a non-empty array", key);
    std::vector<int32_t> alts;
    for (const auto& sub : s[key]) {
      auto a = compile(sub, depth + 1);
      if (!a) return a.error();
      alts.push_back(*a);
    }
    return choice(std::move(alts));
  }
  if (s.contains("allOf")) {
    if (!s["allOf"].is_array() || s["allOf"].size() != 1)
      return Error{"'allOf' is supported with one schema only"};
    return compile(s["allOf"][0], depth + 1);
  }
  if (s.contains("type")) {
    const json& t = s["type"];
    if (t.is_string()) return compile_typed(s, t.get<std::string>(), depth);
    if (!t.is_array() || t.empty())
      return Error{"'type' must be a string or a non-empty array of strings"};
    std::vector<int32_t> alts;
    for (const auto& one : t) {
      if (!one.is_string()) return Error{"'type' must be a string or an array of strings"};
      auto a = compile_typed(s, one.get<std::string>(), depth);
      if (!a) return a.error();
      alts.push_back(*a);
    }
    return choice(std::move(alts));
  }
  if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
    return compile_typed(s, "object", depth);
  if (s.contains("items")) return compile_typed(s, "array", depth);
  return any_value();
}

Result<int32_t> Grammar::compile_typed(const json& s, const std::string& type, int depth) {
  GrammarNode n;
  if (type == "string") {
    n.kind = GrammarNode::Kind::String;
    n.min = int_field(s, "minLength", 0);
    n.max = int_field(s, "maxLength", -1);
    if (n.max >= 0 && n.max < n.min) return Error{"'maxLength' is below 'minLength'"};
    return add(std::move(n));
  }
  if (type == "number" || type == "integer") {
    n.kind = GrammarNode::Kind::Number;
    n.integer = type == "integer";
    return add(std::move(n));
  }
  if (type == "boolean") return choice({literal("true", true), literal("false", true)});
  if (type == "null") return literal("null", true);
  if (type == "object") {
    n.kind = GrammarNode::Kind::Object;
    bool declared = false;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return Error{"'properties' must be an object"};
      if (s["properties"].size() > 64)
        return Error{"objects with more than 64 properties are not supported"};
      for (const auto& [key, sub] : s["properties"].items()) {
        auto v = compile(sub, depth + 1);
        if (!v) return v.error();
        const std::string quoted = json(key).dump();
        n.properties.push_back({quoted.substr(1, quoted.size() - 2), *v, false});
        declared = true;
      }
    }
    if (s.contains("required") && s["required"].is_array()) {
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return Error{"'required' must list property names"};
        const std::string quoted = json(r.get<std::string>()).dump();
        const std::string key = quoted.substr(1, quoted.size() - 2);
        bool found = false;
        for (auto& p : n.properties) {
          if (p.key == key) p.required = found = true;
        }
        if (!found) {
          return make_error("required property '{}' is not among 'properties'",
                            r.get<std::string>());
        }
      }
    }
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        n.additional = a.get<bool>() ? any_value() : -1;
      } else {
        auto v = compile(a, depth + 1);
        if (!v) return v.error();
        n.additional = *v;
      }
    } else {
      n.additional = declared ? -1 : any_value();
    }
    return add(std::move(n));
  }
  if (type == "array") {
    n.kind = GrammarNode::Kind::Array;
    if (s.contains("items")) {
      auto v = compile(s["items"], depth + 1);
      if (!v) return v.error();
      n.items = *v;
    } else {
      n.items = any_value();
    }
    n.min = int_field(s, "minItems", 0);
    n.max = int_field(s, "maxItems", -1);
    if (n.max >= 0 && n.max < n.min) return Error{"'maxItems' is below 'minItems'"};
    return add(std::move(n));
  }
  return make_error("JSON schema type '{}' is not supported", type);
}

// ---- matching --------------------------------------------------------------------------------

namespace {

using Frame = GrammarMatcher::Frame;
using Thread = GrammarMatcher::Thread;

bool is_ws(int c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}
bool is_digit(int c) {
  return c >= '0' && c <= '9';
}
int hex_value(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Starts a UTF-8 sequence at lead byte c; false for a byte that cannot lead one.
bool utf8_lead(Frame& f, int c) {
  f.lo = 0x80;
  f.hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    f.utf8 = 1;
  } else if (c == 0xE0) {
    f.utf8 = 2;
    f.lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    f.utf8 = 2;
  } else if (c == 0xED) {
    f.utf8 = 2;
    f.hi = 0x9F;
  } else if (c == 0xF0) {
    f.utf8 = 3;
    f.lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    f.utf8 = 3;
  } else if (c == 0xF4) {
    f.utf8 = 3;
    f.hi = 0x8F;
  } else {
    return false;
  }
  return true;
}

enum class Lex { Reject, Char, Close };

// One byte inside a JSON string: escapes (with surrogate pairs), UTF-8, at most `max` code
// points (counted in f.count; -1: any).
Lex lex_string(Frame& f, int c, int64_t max) {
  if (c < 0) return Lex::Reject;
  if (f.esc == 1) {
    if (c == 'u') {
      f.esc = 2;
      f.uval = 0;
      return Lex::Char;
    }
    if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
        c == 't') {
      f.esc = 0;
      return Lex::Char;
    }
    return Lex::Reject;
  }
  if ((f.esc >= 2 && f.esc <= 5) || (f.esc >= 8 && f.esc <= 11)) {
    const int h = hex_value(c);
    if (h < 0) return Lex::Reject;
    // Surrogates are checked digit by digit so that no prefix leads to a dead end: a low
    // surrogate (DC00-DFFF) may not come first, and must come after a high one (D800-DBFF).
    if (f.esc == 3 && f.uval == 0xD && h >= 0xC) return Lex::Reject;
    if (f.esc == 8 && h != 0xD) return Lex::Reject;
    if (f.esc == 9 && h < 0xC) return Lex::Reject;
    f.uval = static_cast<uint16_t>(f.uval * 16 + h);
    ++f.esc;
    if (f.esc == 6) {
      if (f.uval >= 0xDC00 && f.uval <= 0xDFFF) return Lex::Reject;  // a lone low surrogate
      if (f.uval < 0xD800 || f.uval > 0xDBFF) f.esc = 0;  // else a low surrogate must follow
    } else if (f.esc == 12) {
      if (f.uval < 0xDC00 || f.uval > 0xDFFF) return Lex::Reject;
      f.esc = 0;
    }
    return Lex::Char;
  }
  if (f.esc == 6) {
    if (c != '\\') return Lex::Reject;
    f.esc = 7;
    return Lex::Char;
  }
  if (f.esc == 7) {
    if (c != 'u') return Lex::Reject;
    f.esc = 8;
    f.uval = 0;
    return Lex::Char;
  }
  if (f.utf8 > 0) {
    if (c < f.lo || c > f.hi) return Lex::Reject;
    --f.utf8;
    f.lo = 0x80;
    f.hi = 0xBF;
    return Lex::Char;
  }
  if (c == '"') return Lex::Close;
  if (c < 0x20) return Lex::Reject;
  if (max >= 0 && f.count >= max) return Lex::Reject;
  if (c == '\\') {
    f.esc = 1;
  } else if (c >= 0x80 && !utf8_lead(f, c)) {
    return Lex::Reject;
  }
  ++f.count;
  return Lex::Char;
}

}  // namespace

GrammarMatcher::GrammarMatcher(const Grammar& grammar) : g_(grammar) {
  Thread t;
  if (grammar.root() >= 0) {
    t.stack.push_back(Frame{});
    t.stack.back().node = grammar.root();
  }
  state_.threads.push_back(std::move(t));
}

// Pops the finished top frame and tells its parents.
void GrammarMatcher::complete(Thread& t) const {
  t.stack.pop_back();
  while (!t.stack.empty()) {
    Frame& p = t.stack.back();
    const GrammarNode& pn = g_.node(p.node);
    if (pn.kind == GrammarNode::Kind::Sequence) {
      if (++p.count < static_cast<int32_t>(pn.children.size())) return;
      t.stack.pop_back();
      continue;
    }
    if (pn.kind == GrammarNode::Kind::Object) {
      p.phase = 5;
    } else if (pn.kind == GrammarNode::Kind::Array) {
      ++p.count;
      p.phase = 3;
    }
    return;
  }
}

bool GrammarMatcher::push_value(Thread& t, int32_t node) const {
  Frame f;
  f.node = node;
  t.stack.push_back(f);
  return true;
}

void GrammarMatcher::step(Thread& t, int c, std::vector<Thread>& out) const {
  auto accept = [&] { out.push_back(std::move(t)); };
  auto space = [&] {
    if (t.spaces >= Grammar::kMaxSpaces) return;
    ++t.spaces;
    accept();
  };
  while (true) {
    if (t.stack.empty()) {
      if (c < 0) accept();
      return;
    }
    Frame& f = t.stack.back();
    const GrammarNode& n = g_.node(f.node);
    switch (n.kind) {
      case GrammarNode::Kind::Literal: {
        if (f.count == 0 && n.ws_before && is_ws(c)) return space();
        if (c < 0 || static_cast<unsigned char>(n.text[static_cast<size_t>(f.count)]) != c) return;
        t.spaces = 0;
        if (++f.count == static_cast<int32_t>(n.text.size())) complete(t);
        return accept();
      }
      case GrammarNode::Kind::Sequence:
        if (n.children.empty()) {
          complete(t);
          continue;
        }
        push_value(t, n.children[static_cast<size_t>(f.count)]);
        continue;
      case GrammarNode::Kind::Choice:
        for (int32_t child : n.children) {
          Thread copy = t;
          copy.stack.back() = Frame{};
          copy.stack.back().node = child;
          step(copy, c, out);
        }
        return;
      case GrammarNode::Kind::String: {
        if (f.phase == 0) {
          if (is_ws(c)) return space();
          if (c != '"') return;
          f.phase = 1;
          t.spaces = 0;
          return accept();
        }
        const Lex r = lex_string(f, c, n.max);
        if (r == Lex::Reject) return;
        if (r == Lex::Close) {
          if (f.count < n.min) return;
          complete(t);
        }
        t.spaces = 0;
        return accept();
      }
      case GrammarNode::Kind::Number: {
        auto digit = [&](uint8_t next) {
          if (++f.count > 40) return;  // no endless digits
          // At most two exponent digits: 1e99 stays a finite double.
          if (next == 8 && ++f.key_len > 2) return;
          f.phase = next;
          t.spaces = 0;
          accept();
        };
        auto to = [&](uint8_t next) {
          f.phase = next;
          t.spaces = 0;
          accept();
        };
        switch (f.phase) {
          case 0:
            if (is_ws(c)) return space();
            if (c == '-') return to(1);
            [[fallthrough]];
          case 1:
            if (c == '0') return digit(2);
            if (c >= '1' && c <= '9') return digit(3);
            return;
          case 2:
          case 3:
            if (f.phase == 3 && is_digit(c)) return digit(3);
            if (!n.integer && c == '.') return to(4);
            if (!n.integer && (c == 'e' || c == 'E')) return to(6);
            break;
          case 4:
            if (is_digit(c)) return digit(5);
            return;
          case 5:
            if (is_digit(c)) return digit(5);
            if (c == 'e' || c == 'E') return to(6);
            break;
          case 6:
            if (c == '+' || c == '-') return to(7);
            [[fallthrough]];
          case 7:
            if (is_digit(c)) return digit(8);
            return;
          case 8:
            if (is_digit(c)) return digit(8);
            break;
          default:
            return;
        }
        complete(t);  // the number ended before c; c belongs to what follows
        continue;
      }
      case GrammarNode::Kind::RawText: {
        if (f.utf8 == 0) {  // the text may end here
          Thread end = t;
          complete(end);
          step(end, c, out);
        }
        Frame& g = t.stack.back();
        if (c < 0 || n.stop_bytes.find(static_cast<char>(c)) != std::string::npos) return;
        if (n.max >= 0 && g.count >= n.max) return;
        if (g.utf8 > 0) {
          if (c < g.lo || c > g.hi) return;
          --g.utf8;
          g.lo = 0x80;
          g.hi = 0xBF;
        } else if (c == 0 || (c >= 0x80 && !utf8_lead(g, c))) {
          return;
        }
        ++g.count;
        t.spaces = 0;
        return accept();
      }
      case GrammarNode::Kind::Object: {
        auto required_met = [&] {
          for (size_t i = 0; i < n.properties.size(); ++i) {
            if (n.properties[i].required && !(f.seen >> i & 1)) return false;
          }
          return true;
        };
        auto unseen = [&] {
          uint64_t m = 0;
          for (size_t i = 0; i < n.properties.size(); ++i) {
            if (!(f.seen >> i & 1)) m |= uint64_t{1} << i;
          }
          return m;
        };
        auto begin_key = [&] {
          f.cand = unseen();
          f.free_key = n.additional >= 0;
          if (f.cand == 0 && !f.free_key) return;
          f.key_len = 0;
          f.count = 0;
          f.esc = 0;
          f.utf8 = 0;
          f.phase = 2;
          t.spaces = 0;
          accept();
        };
        switch (f.phase) {
          case 0:
            if (is_ws(c)) return space();
            if (c != '{') return;
            f.phase = 1;
            t.spaces = 0;
            return accept();
          case 1:
          case 5:
          case 6:
            if (is_ws(c)) return space();
            if (f.phase != 5 && c == '"') return begin_key();
            if (f.phase != 6 && c == '}' && required_met()) {
              t.spaces = 0;
              complete(t);
              return accept();
            }
            if (f.phase == 5 && c == ',' && (unseen() != 0 || n.additional >= 0)) {
              f.phase = 6;
              t.spaces = 0;
              return accept();
            }
            return;
          case 2: {
            const Lex r = lex_string(f, c, 128);
            if (r == Lex::Reject) return;
            if (r == Lex::Close) {
              f.child = -1;
              for (size_t i = 0; i < n.properties.size(); ++i) {
                if ((f.cand >> i & 1) &&
                    n.properties[i].key.size() == static_cast<size_t>(f.key_len)) {
                  f.child = n.properties[i].value;
                  f.seen |= uint64_t{1} << i;
                }
              }
              if (f.child < 0) {
                if (!f.free_key) return;
                f.child = n.additional;
              }
              f.phase = 3;
              t.spaces = 0;
              return accept();
            }
            for (size_t i = 0; i < n.properties.size(); ++i) {
              const std::string& key = n.properties[i].key;
              if ((f.cand >> i & 1) &&
                  (static_cast<size_t>(f.key_len) >= key.size() ||
                   static_cast<unsigned char>(key[static_cast<size_t>(f.key_len)]) != c)) {
                f.cand &= ~(uint64_t{1} << i);
              }
            }
            ++f.key_len;
            if (f.cand == 0 && !f.free_key) return;
            t.spaces = 0;
            return accept();
          }
          case 3: {
            if (is_ws(c)) return space();
            if (c != ':') return;
            f.phase = 4;
            const int32_t child = f.child;
            t.spaces = 0;
            push_value(t, child);
            return accept();
          }
          default:
            return;
        }
      }
      case GrammarNode::Kind::Array: {
        switch (f.phase) {
          case 0:
            if (is_ws(c)) return space();
            if (c != '[') return;
            f.phase = 1;
            t.spaces = 0;
            return accept();
          case 1:
          case 3:
          case 4:
            if (is_ws(c)) return space();
            if (f.phase != 4 && c == ']' && f.count >= n.min) {
              t.spaces = 0;
              complete(t);
              return accept();
            }
            if (f.phase == 3) {
              if (c != ',' || (n.max >= 0 && f.count >= n.max)) return;
              f.phase = 4;
              t.spaces = 0;
              return accept();
            }
            if (n.max == 0) return;
            f.phase = 2;
            push_value(t, n.items);
            continue;
          default:
            return;
        }
      }
    }
    return;
  }
}

void GrammarMatcher::advance(const State& in, int c, State& out) const {
  out.threads.clear();
  for (const auto& t : in.threads) {
    Thread copy = t;
    step(copy, c, out.threads);
  }
}

bool GrammarMatcher::state_can_end(const State& s) const {
  State tmp;
  advance(s, -1, tmp);
  return !tmp.threads.empty();
}

bool GrammarMatcher::can_end() const {
  return state_can_end(state_);
}

bool GrammarMatcher::feed(std::string_view bytes) {
  State next;
  for (char ch : bytes) {
    advance(state_, static_cast<unsigned char>(ch), next);
    std::swap(state_, next);
    if (state_.threads.empty()) return false;
  }
  return true;
}

bool GrammarMatcher::in_plain_string(const State& s, int64_t& count, int64_t& max) const {
  if (s.threads.size() != 1 || s.threads[0].stack.empty()) return false;
  const Frame& f = s.threads[0].stack.back();
  const GrammarNode& n = g_.node(f.node);
  if (n.kind != GrammarNode::Kind::String || f.phase != 1 || f.esc != 0 || f.utf8 != 0)
    return false;
  count = f.count;
  max = n.max;
  return true;
}

}  // namespace tern

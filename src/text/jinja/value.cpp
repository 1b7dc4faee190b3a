#include "text/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace tern::jinja {

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keywords) {
    if (key == name) return &value;
  }
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.string_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>();
  return v;
}

Value Value::namespace_object() {
  Value v = dict();
  v.dict_->is_namespace = true;
  return v;
}

Value Value::callable(std::string name, NativeFunction function) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<Callable>(Callable{std::move(name), std::move(function)});
  return v;
}

bool Value::is_namespace() const {
  return kind_ == Kind::kDict && dict_->is_namespace;
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return string_ ? *string_ : kEmpty;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_;
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !string_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+02": split sign, digits and exponent.
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else {
      auto point = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= point) {
        out += digits + std::string(point - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, point) + "." + digits.substr(point);
      }
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += ".";
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + n > s.size()) n = s.size() - i;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  for (auto ch : utf8_chars(s)) {
    auto c = static_cast<unsigned char>(ch[0]);
    uint32_t cp = ch.size() == 1 ? c
                                 : c & (ch.size() == 2   ? 0x1Fu
                                        : ch.size() == 3 ? 0x0Fu
                                                         : 0x07u);
    for (size_t k = 1; k < ch.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(ch[k]) & 0x3F);
    out.push_back(cp);
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::string python_string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return python_float_repr(float_);
    case Kind::kString:
      return *string_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kString:
      return python_string_repr(*string_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      if (dict_->is_namespace) {
        std::string out = "<Namespace {";
        for (size_t i = 0; i < dict_->items.size(); ++i) {
          if (i) out += ", ";
          out += dict_->items[i].first.repr() + ": " + dict_->items[i].second.repr();
        }
        return out + "}>";
      }
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        out += dict_->items[i].first.repr() + ": " + dict_->items[i].second.repr();
      }
      return out + "}";
    }
    case Kind::kCallable:
      return "<function " + callable_->name + ">";
    default:
      return str();
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

bool Value::same_object(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kList:
      return list_ == other.list_;
    case Kind::kDict:
      return dict_ == other.dict_;
    case Kind::kCallable:
      return callable_ == other.callable_;
    default:
      return *this == other;
  }
}

bool operator==(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return *a.string_ == *b.string_;
    case K::kList:
      return *a.list_ == *b.list_;
    case K::kDict: {
      if (a.dict_ == b.dict_) return true;
      if (a.dict_->items.size() != b.dict_->items.size()) return false;
      for (const auto& [key, value] : a.dict_->items) {
        const Value* other = b.dict_->find(key);
        if (!other || !(*other == value)) return false;
      }
      return true;
    }
    case K::kCallable:
      return a.callable_ == b.callable_;
    default:
      return false;
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& item : items) {
    if (item.first == key) return &item.second;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& item : items) {
    if (item.first.is_string() && item.first.as_string() == key) return &item.second;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& item : items) {
    if (item.first == key) {
      item.second = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

}  // namespace tern::jinja

// The Python methods of str, list and dict that chat templates call, and the string helpers the
// filters share. As in transformers' ImmutableSandboxedEnvironment, methods that modify a list or
// dict in place are unsafe: looking one up gives an undefined value whose use fails.
#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "text/jinja/internal.h"

namespace tern::jinja {
namespace {

bool is_py_space(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 28 && c <= 32) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

const Value& need(const CallArgs& a, size_t i, const char* what) {
  if (i >= a.positional.size())
    throw TemplateError(std::string(what) + " missing a required argument");
  return a.positional[i];
}

std::string need_str(const CallArgs& a, size_t i, const char* what) {
  const Value& v = need(a, i, what);
  if (!v.is_string()) {
    throw TemplateError(std::string(what) + " argument must be str, not " + v.type_name());
  }
  return v.as_string();
}

// Python's find over code points: returns a code-point index or -1.
int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
  size_t pos = from_right ? s.rfind(sub) : s.find(sub);
  if (pos == std::string::npos) return -1;
  return static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, pos)));
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string())
      throw TemplateError("startswith/endswith argument must be str or a tuple of str");
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  }
  return one(affix);
}

// Python str.format with {}, {0} and {name} fields (format specs unsupported).
std::string py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t end = fmt.find('}', i);
      if (end == std::string::npos) throw TemplateError("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, end - i - 1);
      if (field.find_first_of(":!") != std::string::npos) {
        throw TemplateError("format specs in str.format are not supported");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        size_t idx = std::stoul(field);
        v = idx < a.positional.size() ? &a.positional[idx] : nullptr;
      } else {
        for (const auto& [k, val] : a.keywords) {
          if (k == field) v = &val;
        }
      }
      if (!v) throw TemplateError("Replacement index " + field + " out of range for str.format");
      out += v->str();
      i = end;
    } else {
      out += c;
    }
  }
  return out;
}

Value bind_method(const Value& self, const std::string& name,
                  std::function<Value(const Value&, const CallArgs&)> fn) {
  return Value::callable(
      name, [self, fn = std::move(fn)](Interpreter&, const CallArgs& a) { return fn(self, a); });
}

Value string_method(const Value& self, const std::string& name) {
  using F = std::function<Value(const Value&, const CallArgs&)>;
  F fn;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    fn = [left, right](const Value& s, const CallArgs& a) {
      return Value::string(py_strip(s.as_string(), a.get(0, "chars"), left, right));
    };
  } else if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    fn = [prefix](const Value& s, const CallArgs& a) {
      return Value::boolean(affix_match(s.as_string(), need(a, 0, "startswith/endswith"), prefix));
    };
  } else if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    fn = [right](const Value& s, const CallArgs& a) {
      const Value* max = a.get(1, "maxsplit");
      return Value::list(py_split(s.as_string(), a.get(0, "sep"), max ? max->as_int() : -1, right));
    };
  } else if (name == "splitlines") {
    fn = [](const Value& s, const CallArgs& a) {
      bool keep = a.get(0, "keepends") && a.get(0, "keepends")->truthy();
      List out;
      const std::string& str = s.as_string();
      size_t start = 0;
      while (start < str.size()) {
        size_t nl = str.find_first_of("\r\n", start);
        if (nl == std::string::npos) {
          out.push_back(Value::string(str.substr(start)));
          break;
        }
        size_t end = nl + ((str[nl] == '\r' && nl + 1 < str.size() && str[nl + 1] == '\n') ? 2 : 1);
        out.push_back(Value::string(str.substr(start, (keep ? end : nl) - start)));
        start = end;
      }
      return Value::list(std::move(out));
    };
  } else if (name == "replace") {
    fn = [](const Value& s, const CallArgs& a) {
      const Value* count = a.get(2, "count");
      return Value::string(py_replace(s.as_string(), need_str(a, 0, "replace"),
                                      need_str(a, 1, "replace"), count ? count->as_int() : -1));
    };
  } else if (name == "upper") {
    fn = [](const Value& s, const CallArgs&) { return Value::string(py_upper(s.as_string())); };
  } else if (name == "lower" || name == "casefold") {
    fn = [](const Value& s, const CallArgs&) { return Value::string(py_lower(s.as_string())); };
  } else if (name == "title") {
    fn = [](const Value& s, const CallArgs&) { return Value::string(py_title(s.as_string())); };
  } else if (name == "capitalize") {
    fn = [](const Value& s, const CallArgs&) {
      return Value::string(py_capitalize(s.as_string()));
    };
  } else if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool right = name[0] == 'r';
    bool raise = name.find("index") != std::string::npos;
    fn = [right, raise](const Value& s, const CallArgs& a) {
      int64_t r = py_find(s.as_string(), need_str(a, 0, "find"), right);
      if (raise && r < 0) throw TemplateError("substring not found");
      return Value::integer(r);
    };
  } else if (name == "count") {
    fn = [](const Value& s, const CallArgs& a) {
      return Value::integer(py_count(s.as_string(), need_str(a, 0, "count")));
    };
  } else if (name == "format") {
    fn = [](const Value& s, const CallArgs& a) {
      return Value::string(py_format(s.as_string(), a));
    };
  } else if (name == "join") {
    fn = [](const Value& s, const CallArgs& a) {
      std::string out;
      bool first = true;
      for (const auto& item : iterate(need(a, 0, "join"))) {
        if (!item.is_string())
          throw TemplateError("sequence item: expected str instance, " + item.type_name() +
                              " found");
        if (!first) append_bounded(out, s.as_string());
        first = false;
        append_bounded(out, item.as_string());
      }
      return Value::string(std::move(out));
    };
  } else if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
             name == "isupper" || name == "islower") {
    fn = [name](const Value& s, const CallArgs&) {
      const std::string& str = s.as_string();
      if (str.empty()) return Value::boolean(false);
      if (name == "isupper" || name == "islower") {
        std::string up = py_upper(str), low = py_lower(str);
        return Value::boolean(name == "isupper" ? (up == str && low != str)
                                                : (low == str && up != str));
      }
      for (uint32_t c : utf8_decode(str)) {
        bool ok = name == "isspace"   ? is_py_space(c)
                  : name == "isdigit" ? (c >= '0' && c <= '9')
                  : name == "isalpha" ? (c >= 0x80 || std::isalpha(static_cast<int>(c)))
                                      : (c >= 0x80 || std::isalnum(static_cast<int>(c)));
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    };
  } else if (name == "zfill") {
    fn = [](const Value& s, const CallArgs& a) {
      std::string str = s.as_string();
      const size_t width = bounded_width(need(a, 0, "zfill").as_int());
      size_t len = utf8_length(str);
      if (len >= width) return Value::string(str);
      size_t at = (!str.empty() && (str[0] == '-' || str[0] == '+')) ? 1 : 0;
      str.insert(at, std::string(width - len, '0'));
      return Value::string(str);
    };
  } else {
    return Value::undefined("'str object' has no attribute '" + name + "'");
  }
  return bind_method(self, name, std::move(fn));
}

Value list_method(const Value& self, const std::string& name) {
  static const char* kUnsafe[] = {"append", "clear", "pop",    "reverse",
                                  "insert", "sort",  "extend", "remove"};
  for (const char* u : kUnsafe) {
    if (name == u) {
      return Value::undefined("access to attribute '" + name + "' of '" + self.type_name() +
                              "' object is unsafe.");
    }
  }
  if (name == "index") {
    return bind_method(self, name, [](const Value& l, const CallArgs& a) {
      const Value& x = need(a, 0, "index");
      const List& items = l.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i] == x) return Value::integer(static_cast<int64_t>(i));
      }
      throw TemplateError(x.repr() + " is not in list");
    });
  }
  if (name == "count") {
    return bind_method(self, name, [](const Value& l, const CallArgs& a) {
      const Value& x = need(a, 0, "count");
      return Value::integer(std::count(l.as_list().begin(), l.as_list().end(), x));
    });
  }
  if (name == "copy") {
    return bind_method(self, name,
                       [](const Value& l, const CallArgs&) { return Value::list(l.as_list()); });
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", self.type_name(), name));
}

Value dict_method(const Value& self, const std::string& name) {
  static const char* kUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
  for (const char* u : kUnsafe) {
    if (name == u)
      return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe.");
  }
  if (name == "get") {
    return bind_method(self, name, [](const Value& d, const CallArgs& a) {
      const Value* v = d.as_dict().find(need(a, 0, "get"));
      if (v) return *v;
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return bind_method(self, name, [name](const Value& d, const CallArgs&) {
      List out;
      for (const auto& [k, v] : d.as_dict().items) {
        out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "copy") {
    return bind_method(self, name, [](const Value& d, const CallArgs&) {
      Value c = Value::dict();
      c.as_dict().items = d.as_dict().items;
      return c;
    });
  }
  return Value::undefined("'dict object' has no attribute '" + name + "'");
}

}  // namespace

Value get_method(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') {
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                            "' object is unsafe.");
  }
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  if (obj.is_dict()) return dict_method(obj, name);
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
}

std::string py_strip(std::string_view s, const Value* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  bool whitespace = !chars || chars->is_none() || chars->is_undefined();
  if (!whitespace) set = utf8_decode(chars->str());
  auto strip_it = [&](uint32_t c) {
    return whitespace ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  auto pieces = utf8_chars(s);
  auto cps = utf8_decode(s);
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += pieces[i];
  return out;
}

namespace {

// Simple Unicode case mapping for the scripts chat text commonly holds: ASCII, Latin-1,
// Latin Extended-A, Greek and Cyrillic (Python maps every script; others pass through).
uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c == 0xB5) return 0x39C;
  if (c == 0xFF) return 0x178;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    bool odd_is_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (odd_is_lower) return (c & 1) ? c - 1 : c;
    return (c & 1) ? c : c - 1;  // 0x139-0x148 and 0x179-0x17E: even code points are lower
  }
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c == 0x178) return 0xFF;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    bool odd_is_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (odd_is_lower) return (c & 1) ? c : c + 1;
    return (c & 1) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased_letter(uint32_t c) {
  return to_upper_cp(c) != c || to_lower_cp(c) != c || c == 0xDF;
}

std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t c : utf8_decode(s)) {
    if (upper && c == 0xDF) {
      out += "SS";
    } else {
      append_utf8(out, upper ? to_upper_cp(c) : to_lower_cp(c));
    }
  }
  return out;
}

}  // namespace

bool is_word_char(uint32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) || c == '_';
  if (c <= 0xBF)
    return c == 0xAA || c == 0xB5 || c == 0xBA || c == 0xB2 || c == 0xB3 || c == 0xB9 ||
           (c >= 0xBC && c <= 0xBE);
  if (c == 0xD7 || c == 0xF7) return false;
  if (c >= 0x2000 && c <= 0x2BFF) return false;  // punctuation, symbols, arrows, dingbats
  if (c >= 0x3000 && c <= 0x303F) return false;  // CJK punctuation
  if (c >= 0xFE30 && c <= 0xFE4F) return false;
  if (c >= 0xFF00 && c <= 0xFF0F) return false;
  if (c >= 0x1F000 && c <= 0x1FAFF) return false;  // emoji
  return !is_py_space(c);
}

std::string py_upper(std::string_view s) {
  return map_case(s, true);
}

std::string py_lower(std::string_view s) {
  return map_case(s, false);
}

std::string py_capitalize(std::string_view s) {
  auto chars = utf8_chars(s);
  if (chars.empty()) return "";
  std::string out = py_upper(chars[0]);
  out += py_lower(s.substr(chars[0].size()));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (auto ch : utf8_chars(s)) {
    uint32_t c = utf8_decode(ch)[0];
    bool cased = is_cased_letter(c);
    out += cased ? (prev_cased ? py_lower(ch) : py_upper(ch)) : std::string(ch);
    prev_cased = cased;
  }
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    auto chars = utf8_chars(s);
    int64_t done = 0;
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || done < count) {
        append_bounded(out, repl);
        ++done;
      }
      if (i < chars.size()) append_bounded(out, chars[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    append_bounded(out, s.substr(pos, hit - pos));
    append_bounded(out, repl);
    pos = hit + old.size();
    ++done;
  }
  append_bounded(out, s.substr(pos));
  return out;
}

List py_split(std::string_view s, const Value* sep, int64_t maxsplit, bool from_right) {
  List out;
  if (!sep || sep->is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace yields no empty strings.
    auto pieces = utf8_chars(s);
    auto cps = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;  // code-point ranges
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t b = i;
      while (i < cps.size() && !is_py_space(cps[i])) ++i;
      words.emplace_back(b, i);
    }
    auto text = [&](size_t b, size_t e) {
      std::string r;
      for (size_t k = b; k < e; ++k) r += pieces[k];
      return r;
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) out.push_back(Value::string(text(b, e)));
      return out;
    }
    auto m = static_cast<size_t>(maxsplit);
    if (!from_right) {
      for (size_t k = 0; k < m; ++k)
        out.push_back(Value::string(text(words[k].first, words[k].second)));
      out.push_back(Value::string(text(words[m].first, cps.size())));
    } else {
      size_t n = words.size();
      out.push_back(Value::string(text(0, words[n - m - 1].second)));
      for (size_t k = n - m; k < n; ++k)
        out.push_back(Value::string(text(words[k].first, words[k].second)));
    }
    return out;
  }
  if (!sep->is_string()) throw TemplateError("must be str or None, not " + sep->type_name());
  const std::string& d = sep->as_string();
  if (d.empty()) throw TemplateError("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
      size_t hit = s.find(d, pos);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + d.size();
      ++done;
    }
    parts.emplace_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
      if (end < d.size()) break;
      size_t hit = s.rfind(d, end - d.size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + d.size(), end - hit - d.size()));
      end = hit;
      ++done;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

}  // namespace tern::jinja

// Jinja2's builtin filters, plus transformers' own `tojson` (json.dumps with ensure_ascii=False).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include "text/jinja/internal.h"

namespace tern::jinja {
namespace {

using FilterFn = std::function<Value(Interpreter&, const Value&, const CallArgs&)>;

const Value* arg(const CallArgs& a, size_t i, std::string_view name) {
  return a.get(i, name);
}
bool flag(const CallArgs& a, size_t i, std::string_view name, bool def) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : def;
}
int64_t int_arg(const CallArgs& a, size_t i, std::string_view name, int64_t def) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return def;
  if (!v->is_number()) throw TemplateError("argument '" + std::string(name) + "' must be a number");
  return v->is_float() ? static_cast<int64_t>(v->as_float()) : v->as_int();
}

// Jinja2's attribute getter: "a.b.0" walks items/attributes; digits are list indexes.
Value get_path(Interpreter& in, const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    cur = in.get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// The key a case-insensitive sort or unique compares: lowercased strings.
Value fold_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else if (c >= 0x80 && ensure_ascii) {
          size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
          uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
          for (size_t k = 1; k < n && i + k < s.size(); ++k) {
            cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
          }
          i += n - 1;
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                          0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
      }
    }
  }
  out += '"';
}

struct JsonWriter {
  std::string indent;  // empty with has_indent=false: one line
  bool has_indent = false;
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::string item_sep, key_sep;

  void newline(std::string& out, int level) const {
    out += '\n';
    for (int i = 0; i < level; ++i) append_bounded(out, indent);
  }

  void write(std::string& out, const Value& v, int level) const {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return;
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat: {
        double f = v.as_float();
        if (std::isnan(f)) {
          out += "NaN";
        } else if (std::isinf(f)) {
          out += f > 0 ? "Infinity" : "-Infinity";
        } else {
          out += python_float_repr(f);
        }
        return;
      }
      case Value::Kind::kString:
        json_string(out, v.as_string(), ensure_ascii);
        return;
      case Value::Kind::kList: {
        const List& l = v.as_list();
        if (l.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < l.size(); ++i) {
          if (i) out += item_sep;
          if (has_indent) newline(out, level + 1);
          write(out, l[i], level + 1);
        }
        if (has_indent) newline(out, level);
        out += ']';
        return;
      }
      case Value::Kind::kDict: {
        if (v.is_namespace()) break;
        std::vector<std::pair<Value, Value>> items = v.as_dict().items;
        if (items.empty()) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [key, value] : items) {
          std::string k;
          if (key.is_string()) {
            k = key.as_string();
          } else if (key.is_none()) {
            k = "null";
          } else if (key.is_bool()) {
            k = key.as_bool() ? "true" : "false";
          } else if (key.is_int() || key.is_float()) {
            k = key.str();
          } else {
            throw TemplateError("keys must be str, int, float, bool or None, not " +
                                key.type_name());
          }
          entries.emplace_back(std::move(k), &value);
        }
        if (sort_keys) {
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out += '{';
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += item_sep;
          if (has_indent) newline(out, level + 1);
          json_string(out, entries[i].first, ensure_ascii);
          out += key_sep;
          write(out, *entries[i].second, level + 1);
        }
        if (has_indent) newline(out, level);
        out += '}';
        return;
      }
      default:
        break;
    }
    throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
  }
};

Value filter_tojson(Interpreter&, const Value& v, const CallArgs& a) {
  JsonWriter w;
  w.ensure_ascii = flag(a, 0, "ensure_ascii", false);
  const Value* indent = arg(a, 1, "indent");
  if (indent && !indent->is_none()) {
    w.has_indent = true;
    w.indent = indent->is_string() ? indent->as_string()
                                   : std::string(bounded_width(indent->as_int()), ' ');
  }
  w.item_sep = w.has_indent ? "," : ", ";
  w.key_sep = ": ";
  const Value* seps = arg(a, 2, "separators");
  if (seps && !seps->is_none()) {
    List s = iterate(*seps);
    if (s.size() != 2) throw TemplateError("separators must be a pair of strings");
    w.item_sep = s[0].str();
    w.key_sep = s[1].str();
  }
  w.sort_keys = flag(a, 3, "sort_keys", false);
  std::string out;
  w.write(out, v, 0);
  return Value::string(std::move(out));
}

Value do_sort_list(List items, bool reverse, bool case_sensitive,
                   const std::function<Value(const Value&)>& key) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(fold_case(key(item), case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  List out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr share one shape: keep items whose test result is `keep`.
Value select_items(Interpreter& in, const Value& seq, const CallArgs& a, bool by_attr, bool keep) {
  List out;
  size_t first = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty()) throw TemplateError("selectattr/rejectattr need an attribute name");
    attr = a.positional[0].str();
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (a.positional.size() > first) {
    test = a.positional[first].str();
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1,
                                a.positional.end());
    test_args.keywords = a.keywords;
  }
  for (const auto& item : iterate(seq)) {
    Value subject = by_attr ? get_path(in, item, attr) : item;
    bool r = test.empty() ? subject.truthy() : apply_test(in, test, subject, test_args);
    if (r == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

std::string printf_format(const std::string& fmt, const List& values) {
  std::string out;
  size_t vi = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out += fmt[i];
      continue;
    }
    char c = fmt[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (vi >= values.size()) throw TemplateError("not enough arguments for format string");
    const Value& v = values[vi++];
    if (c == 's') {
      out += v.str();
    } else if (c == 'r') {
      out += v.repr();
    } else if (c == 'd' || c == 'i') {
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int());
    } else if (c == 'f') {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%f", v.as_float());
      out += buf;
    } else {
      throw TemplateError(std::string("unsupported format character '") + c + "'");
    }
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::optional<int64_t> parse_int(std::string s) {
  s = py_strip(s, nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    int64_t v = std::stoll(s, &used, 10);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<double> parse_float(std::string s) {
  s = py_strip(s, nullptr, true, true);
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> kFilters = [] {
    std::unordered_map<std::string, FilterFn> f;
    f["tojson"] = filter_tojson;
    f["safe"] = [](Interpreter&, const Value& v, const CallArgs&) { return v; };
    f["string"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value::string(v.str());
    };
    f["length"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value::integer(length(v));
    };
    f["count"] = f["length"];
    f["trim"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return Value::string(py_strip(v.str(), arg(a, 0, "chars"), true, true));
    };
    f["upper"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value::string(py_upper(v.str()));
    };
    f["lower"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value::string(py_lower(v.str()));
    };
    f["capitalize"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value::string(py_capitalize(v.str()));
    };
    f["title"] = [](Interpreter&, const Value& v, const CallArgs&) {
      // Words begin after runs of whitespace, '-', '(', '{', '[' or '<'.
      std::string s = v.str(), out;
      bool word_start = true;
      for (auto ch : utf8_chars(s)) {
        bool sep =
            ch.size() == 1 && (std::isspace(static_cast<unsigned char>(ch[0])) || ch[0] == '-' ||
                               ch[0] == '(' || ch[0] == '{' || ch[0] == '[' || ch[0] == '<');
        if (sep) {
          out += ch;
          word_start = true;
        } else {
          out += word_start ? py_upper(ch) : py_lower(ch);
          word_start = false;
        }
      }
      return Value::string(std::move(out));
    };
    f["replace"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* old = arg(a, 0, "old");
      const Value* repl = arg(a, 1, "new");
      if (!old || !repl) throw TemplateError("replace() needs the old and new strings");
      return Value::string(
          py_replace(v.str(), old->str(), repl->str(), int_arg(a, 2, "count", -1)));
    };
    f["join"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      const Value* sep = arg(a, 0, "d");
      const Value* attr = arg(a, 1, "attribute");
      std::string out;
      bool first = true;
      for (const auto& item : iterate(v)) {
        if (!first && sep) append_bounded(out, sep->str());
        first = false;
        append_bounded(out,
                       (attr && !attr->is_none() ? get_path(in, item, attr->str()) : item).str());
      }
      return Value::string(std::move(out));
    };
    f["first"] = [](Interpreter&, const Value& v, const CallArgs&) {
      List items = iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    f["last"] = [](Interpreter&, const Value& v, const CallArgs&) {
      List items = iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    f["default"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* def = arg(a, 0, "default_value");
      bool boolean = flag(a, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value::string("");
      return v;
    };
    f["d"] = f["default"];
    f["int"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      Value def = arg(a, 0, "default") ? *arg(a, 0, "default") : Value::integer(0);
      if (v.is_bool() || v.is_int()) return Value::integer(v.as_int());
      if (v.is_float()) return Value::integer(static_cast<int64_t>(v.as_float()));
      if (v.is_string()) {
        if (auto i = parse_int(v.as_string())) return Value::integer(*i);
        if (auto d = parse_float(v.as_string())) return Value::integer(static_cast<int64_t>(*d));
      }
      return def;
    };
    f["float"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      Value def = arg(a, 0, "default") ? *arg(a, 0, "default") : Value::floating(0.0);
      if (v.is_number()) return Value::floating(v.as_float());
      if (v.is_string()) {
        if (auto d = parse_float(v.as_string())) return Value::floating(*d);
      }
      return def;
    };
    f["abs"] = [](Interpreter&, const Value& v, const CallArgs&) {
      if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
      if (v.is_number()) return Value::integer(std::llabs(v.as_int()));
      throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
    };
    f["round"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      int64_t precision = int_arg(a, 0, "precision", 0);
      std::string method = arg(a, 1, "method") ? arg(a, 1, "method")->str() : "common";
      double scale = std::pow(10.0, static_cast<double>(precision));
      double x = v.as_float() * scale;
      double r = method == "ceil"    ? std::ceil(x)
                 : method == "floor" ? std::floor(x)
                                     : std::nearbyint(x);
      return Value::floating(r / scale);
    };
    f["list"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value::list(iterate(v));
    };
    f["items"] = [](Interpreter&, const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value::list();
      if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
      List out;
      for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::tuple({k, val}));
      return Value::list(std::move(out));
    };
    f["dictsort"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      if (!v.is_dict()) throw TemplateError("dictsort needs a mapping");
      bool cs = flag(a, 0, "case_sensitive", false);
      std::string by = arg(a, 1, "by") ? arg(a, 1, "by")->str() : "key";
      bool rev = flag(a, 2, "reverse", false);
      List pairs;
      for (const auto& [k, val] : v.as_dict().items) pairs.push_back(Value::tuple({k, val}));
      size_t pos = by == "value" ? 1 : 0;
      return do_sort_list(std::move(pairs), rev, cs,
                          [pos](const Value& p) { return p.as_list()[pos]; });
    };
    f["sort"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      bool rev = flag(a, 0, "reverse", false);
      bool cs = flag(a, 1, "case_sensitive", false);
      const Value* attr = arg(a, 2, "attribute");
      std::string path = attr && !attr->is_none() ? attr->str() : "";
      return do_sort_list(iterate(v), rev, cs, [&](const Value& item) {
        return path.empty() ? item : get_path(in, item, path);
      });
    };
    f["unique"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      bool cs = flag(a, 0, "case_sensitive", false);
      const Value* attr = arg(a, 1, "attribute");
      List out, seen;
      for (const auto& item : iterate(v)) {
        Value key =
            fold_case(attr && !attr->is_none() ? get_path(in, item, attr->str()) : item, cs);
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
        seen.push_back(key);
        out.push_back(item);
      }
      return Value::list(std::move(out));
    };
    f["reverse"] = [](Interpreter&, const Value& v, const CallArgs&) {
      if (v.is_string()) {
        auto chars = utf8_chars(v.as_string());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return Value::string(std::move(out));
      }
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    f["map"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      List out;
      const Value* attr = a.get(SIZE_MAX, "attribute");
      if (attr) {
        const Value* def = a.get(SIZE_MAX, "default");
        for (const auto& item : iterate(v)) {
          Value r = get_path(in, item, attr->str());
          out.push_back(r.is_undefined() && def ? *def : r);
        }
        return Value::list(std::move(out));
      }
      if (a.positional.empty()) throw TemplateError("map needs a filter name or attribute=");
      std::string name = a.positional[0].str();
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.keywords = a.keywords;
      for (const auto& item : iterate(v)) out.push_back(apply_filter(in, name, item, rest));
      return Value::list(std::move(out));
    };
    f["select"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      return select_items(in, v, a, false, true);
    };
    f["reject"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      return select_items(in, v, a, false, false);
    };
    f["selectattr"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      return select_items(in, v, a, true, true);
    };
    f["rejectattr"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      return select_items(in, v, a, true, false);
    };
    auto minmax = [](bool want_max) {
      return [want_max](Interpreter& in, const Value& v, const CallArgs& a) {
        bool cs = flag(a, 0, "case_sensitive", false);
        const Value* attr = arg(a, 1, "attribute");
        List items = iterate(v);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        auto key = [&](const Value& item) {
          return fold_case(attr && !attr->is_none() ? get_path(in, item, attr->str()) : item, cs);
        };
        Value best = items[0];
        for (size_t i = 1; i < items.size(); ++i) {
          int c = compare(key(items[i]), key(best));
          if (want_max ? c > 0 : c < 0) best = items[i];
        }
        return best;
      };
    };
    f["max"] = minmax(true);
    f["min"] = minmax(false);
    f["sum"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      const Value* attr = arg(a, 0, "attribute");
      Value total = arg(a, 1, "start") ? *arg(a, 1, "start") : Value::integer(0);
      for (const auto& item : iterate(v)) {
        total = binary_op("+", total,
                          attr && !attr->is_none() ? get_path(in, item, attr->str()) : item);
      }
      return total;
    };
    f["batch"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      int64_t n = int_arg(a, 0, "linecount", 1);
      if (n <= 0) throw TemplateError("batch size must be positive");
      const Value* fill = arg(a, 1, "fill_with");
      List out, cur;
      for (const auto& item : iterate(v)) {
        cur.push_back(item);
        if (static_cast<int64_t>(cur.size()) == n) {
          out.push_back(Value::list(std::move(cur)));
          cur.clear();
        }
      }
      if (!cur.empty()) {
        if (fill && !fill->is_none()) {
          while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
        }
        out.push_back(Value::list(std::move(cur)));
      }
      return Value::list(std::move(out));
    };
    f["indent"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* w = arg(a, 0, "width");
      std::string pad = w && w->is_string()
                            ? w->as_string()
                            : std::string(bounded_width(int_arg(a, 0, "width", 4)), ' ');
      bool first = flag(a, 1, "first", false);
      bool blank = flag(a, 2, "blank", false);
      std::string s = v.str() + "\n";
      std::vector<std::string> lines;
      size_t start = 0;
      while (start < s.size()) {
        size_t nl = s.find('\n', start);
        lines.push_back(s.substr(start, nl - start));
        start = nl + 1;
      }
      std::string out;
      if (first) out = pad;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i) append_bounded(out, "\n");
        if (i && (blank || !lines[i].empty())) append_bounded(out, pad);
        append_bounded(out, lines[i]);
      }
      return Value::string(std::move(out));
    };
    f["center"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      std::string s = v.str();
      const size_t width = bounded_width(int_arg(a, 0, "width", 80));
      size_t len = utf8_length(s);
      if (len >= width) return Value::string(s);
      size_t total = width - len, left = total / 2 + (total & width & 1);
      return Value::string(std::string(left, ' ') + s + std::string(total - left, ' '));
    };
    f["wordcount"] = [](Interpreter&, const Value& v, const CallArgs&) {
      int64_t n = 0;
      bool in_word = false;
      for (uint32_t c : utf8_decode(v.str())) {
        bool w = is_word_char(c);
        if (w && !in_word) ++n;
        in_word = w;
      }
      return Value::integer(n);
    };
    f["escape"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return Value::string(html_escape(v.str()));
    };
    f["e"] = f["escape"];
    f["format"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return Value::string(printf_format(v.str(), a.positional));
    };
    f["attr"] = [](Interpreter& in, const Value& v, const CallArgs& a) {
      if (a.positional.empty()) throw TemplateError("attr needs a name");
      return in.get_attr(v, a.positional[0].str());
    };
    return f;
  }();
  return kFilters;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) != 0;
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& subject,
                   const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError("no filter named '" + name + "'");
  return it->second(in, subject, args);
}

}  // namespace tern::jinja

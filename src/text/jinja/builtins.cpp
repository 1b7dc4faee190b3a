// Jinja2's tests (`x is defined`, `x is string`, ...) and the global functions a chat template
// sees in transformers: range, namespace, dict, raise_exception, strftime_now.
#include <ctime>
#include <functional>
#include <unordered_map>

#include "text/jinja/internal.h"

namespace tern::jinja {
namespace {

using TestFn = std::function<bool(Interpreter&, const Value&, const CallArgs&)>;

const Value& need_arg(const CallArgs& a, const char* test) {
  if (a.positional.empty())
    throw TemplateError(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}

// Python's str.isupper()/islower(): every cased character in that case, and at least one.
bool all_cased(const std::string& s, bool upper) {
  std::string up = py_upper(s), low = py_lower(s);
  return upper ? (up == s && low != s) : (low == s && up != s);
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> kTests = [] {
    std::unordered_map<std::string, TestFn> t;
    t["defined"] = [](Interpreter&, const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_none(); };
    t["boolean"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return v.is_bool() && v.as_bool();
    };
    t["false"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return v.is_bool() && !v.as_bool();
    };
    t["integer"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_float(); };
    t["number"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_number(); };
    t["string"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_string(); };
    t["mapping"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return v.is_dict() && !v.is_namespace();
    };
    t["iterable"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
    };
    t["sequence"] = t["iterable"];
    t["callable"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_callable(); };
    t["escaped"] = [](Interpreter&, const Value&, const CallArgs&) { return false; };
    t["odd"] = [](Interpreter&, const Value& v, const CallArgs&) {
      if (!v.is_number() || v.is_float()) throw TemplateError("test 'odd' needs an integer");
      return v.as_int() % 2 != 0;
    };
    t["even"] = [](Interpreter&, const Value& v, const CallArgs&) {
      if (!v.is_number() || v.is_float()) throw TemplateError("test 'even' needs an integer");
      return v.as_int() % 2 == 0;
    };
    t["divisibleby"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value& n = need_arg(a, "divisibleby");
      if (n.as_int() == 0) throw TemplateError("integer division or modulo by zero");
      return v.as_int() % n.as_int() == 0;
    };
    t["eq"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return v == need_arg(a, "eq");
    };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["ne"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return !(v == need_arg(a, "ne"));
    };
    t["!="] = t["ne"];
    t["lt"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return compare(v, need_arg(a, "lt")) < 0;
    };
    t["lessthan"] = t["lt"];
    t["<"] = t["lt"];
    t["le"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return compare(v, need_arg(a, "le")) <= 0;
    };
    t["<="] = t["le"];
    t["gt"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return compare(v, need_arg(a, "gt")) > 0;
    };
    t["greaterthan"] = t["gt"];
    t[">"] = t["gt"];
    t["ge"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return compare(v, need_arg(a, "ge")) >= 0;
    };
    t[">="] = t["ge"];
    t["in"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return contains(need_arg(a, "in"), v);
    };
    t["sameas"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return v.same_object(need_arg(a, "sameas"));
    };
    t["lower"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return all_cased(v.str(), false);
    };
    t["upper"] = [](Interpreter&, const Value& v, const CallArgs&) {
      return all_cased(v.str(), true);
    };
    t["filter"] = [](Interpreter&, const Value& v, const CallArgs&) { return has_filter(v.str()); };
    t["test"] = [](Interpreter&, const Value& v, const CallArgs&) { return has_test(v.str()); };
    return t;
  }();
  return kTests;
}

Value make_range(Interpreter&, const CallArgs& a) {
  auto num = [](const Value& v) {
    if (!v.is_number() || v.is_float()) throw TemplateError("range() arguments must be integers");
    return v.as_int();
  };
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = num(a.positional[0]);
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = num(a.positional[0]);
    stop = num(a.positional[1]);
    if (a.positional.size() == 3) step = num(a.positional[2]);
  } else {
    throw TemplateError("range expected 1 to 3 arguments");
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000)
      throw TemplateError(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

Value fill_dict(Value d, const CallArgs& a) {
  for (const auto& p : a.positional) {
    if (!p.is_dict())
      throw TemplateError("dict()/namespace() positional argument must be a mapping");
    for (const auto& [k, v] : p.as_dict().items) d.as_dict().set(k, v);
  }
  for (const auto& [k, v] : a.keywords) d.as_dict().set(Value::string(k), v);
  return d;
}

}  // namespace

bool has_test(const std::string& name) {
  return tests().count(name) != 0;
}

bool apply_test(Interpreter& in, const std::string& name, const Value& subject,
                const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("no test named '" + name + "'");
  return it->second(in, subject, args);
}

void add_globals(Scope& scope) {
  scope.vars["range"] = Value::callable("range", make_range);
  scope.vars["namespace"] = Value::callable("namespace", [](Interpreter& in, const CallArgs& a) {
    return fill_dict(in.make_namespace(), a);
  });
  scope.vars["dict"] = Value::callable(
      "dict", [](Interpreter&, const CallArgs& a) { return fill_dict(Value::dict(), a); });
  scope.vars["raise_exception"] =
      Value::callable("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
        throw TemplateError(a.positional.empty() ? "raise_exception() called"
                                                 : a.positional[0].str());
      });
  scope.vars["strftime_now"] =
      Value::callable("strftime_now", [](Interpreter& in, const CallArgs& a) {
        if (a.positional.empty()) throw TemplateError("strftime_now needs a format");
        std::tm tm{};
        if (in.settings().now) {
          tm = *in.settings().now;
        } else {
          std::time_t t = std::time(nullptr);
          localtime_r(&t, &tm);
        }
        std::string fmt = a.positional[0].str();
        if (fmt.empty()) return Value::string("");
        std::string buf(256 + fmt.size() * 8, '\0');
        size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
        buf.resize(n);
        return Value::string(std::move(buf));
      });
}

}  // namespace tern::jinja

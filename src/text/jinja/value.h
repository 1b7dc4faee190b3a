// A dynamic value with Python semantics, as Jinja2 templates see them: undefined, None, bool, int,
// float, str, list, dict (insertion-ordered like a Python dict) and callables (builtins, macros,
// bound methods). Lists and dicts are shared by reference, like Python objects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tern::jinja {

// Internal error carried through evaluation; converted to tern::Error at the API boundary.
struct TemplateError : std::runtime_error {
  explicit TemplateError(const std::string& message, bool located = false)
      : std::runtime_error(message), has_location(located) {}
  bool has_location = false;
};

class Value;
class Interpreter;
using List = std::vector<Value>;

struct Dict;

// Arguments of a call: positional values then keyword values, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // The argument called `name` at `index` if given by position, else by keyword, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};

using NativeFunction = std::function<Value(Interpreter&, const CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction function;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict();
  static Value namespace_object();
  static Value callable(std::string name, NativeFunction function);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_namespace() const;

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return is_bool() ? (bool_ ? 1 : 0) : int_; }  // int or bool
  double as_float() const { return is_float() ? float_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *string_; }
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  const Callable& as_callable() const { return *callable_; }
  const std::string& undefined_hint() const;

  bool truthy() const;                         // Python bool()
  std::string str() const;                     // Python str(); undefined prints as ""
  std::string repr() const;                    // Python repr()
  std::string type_name() const;               // Python type name: 'dict', 'str', 'NoneType', ...
  bool same_object(const Value& other) const;  // Python `is`

  friend bool operator==(const Value& a, const Value& b);

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::shared_ptr<const std::string> string_;  // string, or the undefined value's hint
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> callable_;
};

// An insertion-ordered dict. Keys are values (strings in practice); lookup is linear, fine for
// the small objects chat templates handle.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
  size_t size() const { return items.size(); }
};

// Python's repr() of a float (shortest round-trip digits, "1.0", "1e+16", "inf", "nan").
std::string python_float_repr(double value);
// Python's repr() of a str: single quotes unless the text holds ' and no ".
std::string python_string_repr(std::string_view s);

// UTF-8 helpers: strings are indexed, sliced and measured by code points, as in Python.
std::vector<std::string_view> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);
std::vector<uint32_t> utf8_decode(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);

}  // namespace tern::jinja

// Tree-walking interpreter with jinja2's scoping: a for-loop iteration and a macro call get a new
// scope whose parent is the enclosing one; `if` does not; macros close over their defining scope.
#include <algorithm>
#include <cmath>
#include <optional>

#include "text/jinja/internal.h"

namespace tern::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {

[[noreturn]] void fail_undefined(const Value& v) {
  const std::string& hint = v.undefined_hint();
  throw TemplateError(hint.empty() ? "value is undefined" : hint);
}

std::string object_name(const Value& v) {
  std::string out = "'";
  out += v.type_name();
  out += " object'";
  return out;
}

bool is_dict_method(const std::string& name) {
  static const char* kNames[] = {"get",  "items",      "keys",  "values",  "update",  "pop",
                                 "copy", "setdefault", "clear", "popitem", "fromkeys"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

// Restores the interpreter's scope when a block ends, also when an error unwinds it.
class ScopeGuard {
 public:
  ScopeGuard(std::shared_ptr<Scope>& slot, std::shared_ptr<Scope> next)
      : slot_(slot), saved_(std::move(slot)) {
    slot_ = std::move(next);
  }
  ~ScopeGuard() { slot_ = std::move(saved_); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  std::shared_ptr<Scope>& slot_;
  std::shared_ptr<Scope> saved_;
};

std::shared_ptr<Scope> child_of(std::shared_ptr<Scope> parent) {
  auto s = std::make_shared<Scope>();
  s->parent = std::move(parent);
  return s;
}

}  // namespace

// ---------------- shared operations ----------------

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& item : v.as_dict().items) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (auto c : utf8_chars(v.as_string())) chars.push_back(Value::string(std::string(c)));
      return chars;
    }
    default:
      throw TemplateError("'" + v.type_name() + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8_length(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().size());
    default:
      throw TemplateError("object of type '" + v.type_name() + "' has no len()");
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!(x[i] == y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" +
                      b.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw TemplateError("'in <string>' requires string as left operand, not " +
                            item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.as_list()) {
        if (v == item) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    default:
      throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

namespace {

Value number_result(bool as_float, double f, int64_t i) {
  return as_float ? Value::floating(f) : Value::integer(i);
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                      b.type_name() + "'");
}

[[noreturn]] void fail_string_limit() {
  throw TemplateError("the template built a string of more than " +
                      std::to_string(kMaxStringBytes >> 20) + " MiB");
}

[[noreturn]] void fail_list_limit() {
  throw TemplateError("the template built a list of more than " + std::to_string(kMaxListItems) +
                      " items");
}

Value repeat(const Value& seq, int64_t times) {
  const bool text = seq.is_string();
  const size_t size = text ? seq.as_string().size() : seq.as_list().size();
  if (times <= 0 || size == 0) return text ? Value::string("") : Value::list();
  // Checked before building: `'x' * 10**12` must fail, not take the memory first.
  const auto count = static_cast<uint64_t>(times);
  if (text) {
    if (count > kMaxStringBytes / size) fail_string_limit();
    std::string out;
    for (uint64_t i = 0; i < count; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  if (count > kMaxListItems / size) fail_list_limit();
  List out;
  for (uint64_t i = 0; i < count; ++i) {
    out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  }
  return Value::list(std::move(out));
}

}  // namespace

void append_bounded(std::string& out, std::string_view piece) {
  if (out.size() + piece.size() > kMaxStringBytes) fail_string_limit();
  out += piece;
}

size_t bounded_width(int64_t width) {
  if (width <= 0) return 0;
  if (static_cast<uint64_t>(width) > kMaxStringBytes) fail_string_limit();
  return static_cast<size_t>(width);
}

void check_list_items(size_t items) {
  if (items > kMaxListItems) fail_list_limit();
}

Interpreter::~Interpreter() {
  for (const Value& ns : namespaces_) ns.as_dict().items.clear();
}

Value Interpreter::make_namespace() {
  namespaces_.push_back(Value::namespace_object());
  return namespaces_.back();
}

void Interpreter::count_step() {
  if (++steps_ > settings_.max_steps) {
    throw TemplateError("the template took more than " + std::to_string(settings_.max_steps) +
                        " loop iterations and macro calls");
  }
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = a.str();
    append_bounded(out, b.str());
    return Value::string(std::move(out));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  bool numbers = a.is_number() && b.is_number();
  bool fl = a.is_float() || b.is_float();
  if (op == "+") {
    if (numbers) return number_result(fl, a.as_float() + b.as_float(), a.as_int() + b.as_int());
    if (a.is_string() && b.is_string()) {
      std::string out = a.as_string();
      append_bounded(out, b.as_string());
      return Value::string(std::move(out));
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      check_list_items(a.as_list().size() + b.as_list().size());
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string() || b.is_string()) {
      throw TemplateError("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() +
                          "\") to str");
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (numbers) return number_result(fl, a.as_float() - b.as_float(), a.as_int() - b.as_int());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (numbers) return number_result(fl, a.as_float() * b.as_float(), a.as_int() * b.as_int());
    if ((a.is_string() || a.is_list()) && b.is_number() && !b.is_float())
      return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_number() && !a.is_float())
      return repeat(b, a.as_int());
    unsupported(op, a, b);
  }
  if (!numbers) unsupported(op, a, b);
  if (op == "/") {
    if (b.as_float() == 0.0) throw TemplateError("division by zero");
    return Value::floating(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (b.as_float() == 0.0) throw TemplateError("integer division or modulo by zero");
    if (fl) {
      double x = a.as_float(), y = b.as_float();
      double q = std::floor(x / y);
      return Value::floating(op == "//" ? q : x - q * y);
    }
    int64_t x = a.as_int(), y = b.as_int();
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value::integer(op == "//" ? q : x - q * y);
  }
  if (op == "**") {
    if (!fl && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
      return Value::integer(r);
    }
    return Value::floating(std::pow(a.as_float(), b.as_float()));
  }
  throw TemplateError("unknown operator " + op);
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto index_of = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      throw TemplateError(std::string("slice ") + what + " must be an integer or None");
    }
    return v.as_int();
  };
  int64_t step = index_of(step_v, "step").value_or(1);
  if (step == 0) throw TemplateError("slice step cannot be zero");
  std::vector<std::string_view> chars;
  int64_t n;
  if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.as_list().size());
  } else {
    throw TemplateError("'" + obj.type_name() + "' object is not subscriptable");
  }
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t i = *v;
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t start = clamp(index_of(start_v, "start"), step > 0 ? 0 : n - 1);
  int64_t stop = clamp(index_of(stop_v, "stop"), step > 0 ? n : -1);
  std::string s;
  List l;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_string()) {
      s += chars[static_cast<size_t>(i)];
    } else {
      l.push_back(obj.as_list()[static_cast<size_t>(i)]);
    }
  }
  if (obj.is_string()) return Value::string(std::move(s));
  return obj.is_tuple() ? Value::tuple(std::move(l)) : Value::list(std::move(l));
}

// ---------------- attribute and item access ----------------

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (!obj.is_namespace() && is_dict_method(name)) return get_method(obj, name);
    if (const Value* v = obj.as_dict().find(name)) return *v;
    return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
  }
  if (obj.is_string() || obj.is_list()) return get_method(obj, name);
  return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      auto n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.as_list()[static_cast<size_t>(i)];
    } else {
      auto chars = utf8_chars(obj.as_string());
      auto n = static_cast<int64_t>(chars.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(std::string(chars[static_cast<size_t>(i)]));
    }
    return Value::undefined(object_name(obj) + " has no element " + key.repr());
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(object_name(obj) + " has no element " + key.repr());
}

Value Interpreter::call(const Value& callee, const CallArgs& args, Location loc) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable())
    throw TemplateError("'" + callee.type_name() + "' object is not callable");
  if (++depth_ > 256) {
    --depth_;
    throw TemplateError("maximum recursion depth exceeded");
  }
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } guard{depth_};
  (void)loc;
  return callee.as_callable().function(*this, args);
}

// ---------------- expressions ----------------

CallArgs Interpreter::eval_args(const Expr& expr, size_t first) {
  CallArgs args;
  for (size_t i = first; i < expr.args.size(); ++i) args.positional.push_back(eval(*expr.args[i]));
  for (const auto& [key, value] : expr.kwargs) args.keywords.emplace_back(key, eval(*value));
  if (expr.star_args) {
    for (auto& v : iterate(eval(*expr.star_args))) args.positional.push_back(std::move(v));
  }
  if (expr.star_kwargs) {
    Value d = eval(*expr.star_kwargs);
    if (!d.is_dict()) throw TemplateError("argument after ** must be a mapping");
    for (const auto& [k, v] : d.as_dict().items) args.keywords.emplace_back(k.str(), v);
  }
  return args;
}

Value Interpreter::eval_call(const Expr& expr) {
  Value callee = eval(*expr.args[0]);
  CallArgs args = eval_args(expr, 1);
  return call(callee, args, expr.loc);
}

Value Interpreter::eval_filter(const Expr& expr, const Value* base) {
  Value subject;
  if (expr.args[0]) {
    subject = expr.args[0]->kind == ExprKind::kFilter && base ? eval_filter(*expr.args[0], base)
                                                              : eval(*expr.args[0]);
  } else if (base) {
    subject = *base;
  }
  CallArgs args = eval_args(expr, 1);
  return apply_filter(*this, expr.name, subject, args);
}

Value Interpreter::eval(const Expr& expr) {
  try {
    switch (expr.kind) {
      case ExprKind::kLiteral:
        return expr.literal;
      case ExprKind::kName: {
        if (const Value* v = scope_->lookup(expr.name)) return *v;
        return Value::undefined("'" + expr.name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& a : expr.args) items.push_back(eval(*a));
        return expr.kind == ExprKind::kList ? Value::list(std::move(items))
                                            : Value::tuple(std::move(items));
      }
      case ExprKind::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
          d.as_dict().set(eval(*expr.args[i]), eval(*expr.args[i + 1]));
        }
        return d;
      }
      case ExprKind::kAttr:
        return get_attr(eval(*expr.args[0]), expr.name);
      case ExprKind::kItem: {
        Value obj = eval(*expr.args[0]);
        return get_item(obj, eval(*expr.args[1]));
      }
      case ExprKind::kSlice: {
        Value obj = eval(*expr.args[0]);
        auto part = [&](size_t i) { return expr.args[i] ? eval(*expr.args[i]) : Value::none(); };
        return slice(obj, part(1), part(2), part(3));
      }
      case ExprKind::kCall:
        return eval_call(expr);
      case ExprKind::kFilter:
        return eval_filter(expr, nullptr);
      case ExprKind::kTest: {
        Value subject = eval(*expr.args[0]);
        CallArgs args = eval_args(expr, 1);
        bool r = apply_test(*this, expr.name, subject, args);
        return Value::boolean(expr.negated ? !r : r);
      }
      case ExprKind::kUnary: {
        Value v = eval(*expr.args[0]);
        if (expr.name == "not") return Value::boolean(!v.truthy());
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) {
          throw TemplateError("bad operand type for unary " +
                              std::string(expr.name == "neg" ? "-" : "+") + ": '" + v.type_name() +
                              "'");
        }
        if (expr.name == "pos") return v.is_bool() ? Value::integer(v.as_int()) : v;
        return v.is_float() ? Value::floating(-v.as_float()) : Value::integer(-v.as_int());
      }
      case ExprKind::kBinary: {
        if (expr.name == "and" || expr.name == "or") {
          Value left = eval(*expr.args[0]);
          bool t = left.truthy();
          if (expr.name == "and" ? !t : t) return left;
          return eval(*expr.args[1]);
        }
        Value left = eval(*expr.args[0]);
        Value right = eval(*expr.args[1]);
        return binary_op(expr.name, left, right);
      }
      case ExprKind::kCompare: {
        Value left = eval(*expr.args[0]);
        for (size_t i = 0; i < expr.ops.size(); ++i) {
          Value right = eval(*expr.args[i + 1]);
          const std::string& op = expr.ops[i];
          bool r;
          if (op == "==") {
            r = left == right;
          } else if (op == "!=") {
            r = !(left == right);
          } else if (op == "in") {
            r = contains(right, left);
          } else if (op == "notin") {
            r = !contains(right, left);
          } else {
            int c = compare(left, right);
            r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
          }
          if (!r) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCondition: {
        if (eval(*expr.args[0]).truthy()) return eval(*expr.args[1]);
        if (expr.args[2]) return eval(*expr.args[2]);
        return Value::undefined("the inline if-expression on line " +
                                std::to_string(expr.loc.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
  } catch (const TemplateError& e) {
    if (e.has_location) throw;
    fail_at(expr.loc, e.what());
  }
  return Value();
}

// ---------------- statements ----------------

Interpreter::Flow Interpreter::exec(const Body& body, std::string& out) {
  for (const auto& stmt : body) {
    Flow f = exec(*stmt, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Stmt& stmt, Value value) {
  if (!stmt.text.empty()) {  // {% set ns.attr = value %}
    const Value* ns = scope_->lookup(stmt.targets[0]);
    if (!ns || !ns->is_namespace()) {
      fail_at(stmt.loc, "cannot assign attribute on non-namespace object");
    }
    ns->as_dict().set(Value::string(stmt.text), std::move(value));
    return;
  }
  if (stmt.tuple_target) {
    List items = iterate(value);
    if (items.size() != stmt.targets.size()) {
      fail_at(stmt.loc, "cannot unpack " + std::to_string(items.size()) + " values into " +
                            std::to_string(stmt.targets.size()) + " names");
    }
    for (size_t i = 0; i < items.size(); ++i) scope_->vars[stmt.targets[i]] = items[i];
    return;
  }
  scope_->vars[stmt.targets[0]] = std::move(value);
}

Value Interpreter::make_macro(const Stmt& stmt, std::shared_ptr<Scope> closure,
                              const Body* caller_body) {
  const Stmt* def = &stmt;
  std::string name = caller_body ? "caller" : stmt.text;
  // The macro is usually stored in the very scope it closes over: a strong reference would make
  // a cycle that outlives the render (and leaks the whole context with it). The render keeps the
  // scope alive instead; the macro holds it weakly.
  if (macro_scopes_.empty() || macro_scopes_.back() != closure) macro_scopes_.push_back(closure);
  std::weak_ptr<Scope> weak_closure = closure;
  return Value::callable(
      name, [def, weak_closure, caller_body, name](Interpreter& in, const CallArgs& args) {
        auto defined_in = weak_closure.lock();
        if (!defined_in)
          throw TemplateError("macro '" + name + "' called after its template ended");
        in.count_step();
        auto scope = child_of(defined_in);
        ScopeGuard guard(in.scope_, scope);
        List varargs;
        for (size_t i = 0; i < args.positional.size(); ++i) {
          if (i < def->params.size()) {
            scope->vars[def->params[i].first] = args.positional[i];
          } else {
            varargs.push_back(args.positional[i]);
          }
        }
        Value kwargs = Value::dict();
        for (const auto& [key, value] : args.keywords) {
          bool is_param = false;
          for (const auto& p : def->params) is_param = is_param || p.first == key;
          if (is_param) {
            scope->vars[key] = value;
          } else if (key == "caller") {
            scope->vars["caller"] = value;
          } else {
            kwargs.as_dict().set(Value::string(key), value);
          }
        }
        for (const auto& [pname, def_expr] : def->params) {
          if (scope->vars.count(pname)) continue;
          scope->vars[pname] = def_expr
                                   ? in.eval(*def_expr)
                                   : Value::undefined("parameter '" + pname + "' was not provided");
        }
        scope->vars["varargs"] = Value::tuple(std::move(varargs));
        scope->vars["kwargs"] = kwargs;
        std::string out;
        in.exec(caller_body ? *caller_body : def->body, out);
        return Value::string(std::move(out));
      });
}

Interpreter::Flow Interpreter::exec_for(const Stmt& stmt, std::string& out) {
  List items = iterate(eval(*stmt.expr));
  auto bind = [&](Scope& s, const Value& item) {
    if (!stmt.tuple_target) {
      s.vars[stmt.targets[0]] = item;
      return;
    }
    List parts = iterate(item);
    if (parts.size() != stmt.targets.size()) {
      fail_at(stmt.loc, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                            std::to_string(stmt.targets.size()) + " loop variables");
    }
    for (size_t i = 0; i < parts.size(); ++i) s.vars[stmt.targets[i]] = parts[i];
  };
  if (stmt.condition) {
    List kept;
    for (auto& item : items) {
      count_step();
      auto s = child_of(scope_);
      bind(*s, item);
      ScopeGuard guard(scope_, s);
      if (eval(*stmt.condition).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ScopeGuard guard(scope_, child_of(scope_));
    return exec(stmt.else_body, out) == Flow::kBreak ? Flow::kNormal : Flow::kNormal;
  }
  auto n = static_cast<int64_t>(items.size());
  // loop.changed()'s memory lives as long as the loop: the callable holds it weakly, since what
  // it remembers may be the loop object that holds the callable.
  auto last_changed = std::make_shared<std::optional<List>>();
  std::weak_ptr<std::optional<List>> changed_state = last_changed;
  for (int64_t i = 0; i < n; ++i) {
    count_step();
    auto s = child_of(scope_);
    bind(*s, items[static_cast<size_t>(i)]);
    Value loop = Value::dict();
    Dict& d = loop.as_dict();
    d.set(Value::string("index"), Value::integer(i + 1));
    d.set(Value::string("index0"), Value::integer(i));
    d.set(Value::string("revindex"), Value::integer(n - i));
    d.set(Value::string("revindex0"), Value::integer(n - i - 1));
    d.set(Value::string("first"), Value::boolean(i == 0));
    d.set(Value::string("last"), Value::boolean(i == n - 1));
    d.set(Value::string("length"), Value::integer(n));
    d.set(Value::string("depth"), Value::integer(1));
    d.set(Value::string("depth0"), Value::integer(0));
    d.set(Value::string("previtem"), i > 0 ? items[static_cast<size_t>(i - 1)]
                                           : Value::undefined("there is no previous item"));
    d.set(Value::string("nextitem"), i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                               : Value::undefined("there is no next item"));
    d.set(Value::string("cycle"), Value::callable("cycle", [i](Interpreter&, const CallArgs& args) {
            if (args.positional.empty()) throw TemplateError("no items for cycling given");
            return args.positional[static_cast<size_t>(i) % args.positional.size()];
          }));
    d.set(Value::string("changed"),
          Value::callable("changed", [changed_state](Interpreter&, const CallArgs& args) {
            auto last = changed_state.lock();
            if (!last) throw TemplateError("loop.changed() called after its loop ended");
            if (*last && **last == args.positional) return Value::boolean(false);
            *last = args.positional;
            return Value::boolean(true);
          }));
    s->vars["loop"] = loop;
    ScopeGuard guard(scope_, s);
    Flow f = exec(stmt.body, out);
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, std::string& out) {
  try {
    switch (stmt.kind) {
      case StmtKind::kText:
        append_bounded(out, stmt.text);
        break;
      case StmtKind::kOutput:
        append_bounded(out, eval(*stmt.expr).str());
        break;
      case StmtKind::kIf:
        for (const auto& [cond, body] : stmt.branches) {
          if (eval(*cond).truthy()) return exec(body, out);
        }
        return exec(stmt.else_body, out);
      case StmtKind::kFor:
        return exec_for(stmt, out);
      case StmtKind::kSet:
        assign(stmt, eval(*stmt.expr));
        break;
      case StmtKind::kSetBlock: {
        std::string captured;
        exec(stmt.body, captured);
        Value v = Value::string(std::move(captured));
        if (stmt.expr) v = eval_filter(*stmt.expr, &v);
        assign(stmt, std::move(v));
        break;
      }
      case StmtKind::kMacro:
        scope_->vars[stmt.text] = make_macro(stmt, scope_, nullptr);
        break;
      case StmtKind::kCallBlock: {
        const Expr& call_expr = *stmt.expr;
        Value callee = eval(*call_expr.args[0]);
        CallArgs args = eval_args(call_expr, 1);
        args.keywords.emplace_back("caller", make_macro(stmt, scope_, &stmt.body));
        append_bounded(out, call(callee, args, stmt.loc).str());
        break;
      }
      case StmtKind::kFilterBlock: {
        std::string captured;
        exec(stmt.body, captured);
        Value v = Value::string(std::move(captured));
        append_bounded(out, eval_filter(*stmt.expr, &v).str());
        break;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return exec(stmt.body, out);
    }
  } catch (const TemplateError& e) {
    if (e.has_location) throw;
    fail_at(stmt.loc, e.what());
  }
  return Flow::kNormal;
}

std::string Interpreter::render(const Body& body, const Value& context) {
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  scope_ = child_of(globals);
  if (context.is_dict()) {
    for (const auto& [key, value] : context.as_dict().items) scope_->vars[key.str()] = value;
  }
  std::string out;
  exec(body, out);
  scope_.reset();
  macro_scopes_.clear();
  return out;
}

}  // namespace tern::jinja

// The engine's internals: tokens, the AST, the lexer, the parser and the interpreter.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/jinja/value.h"

namespace tern::jinja {

struct Location {
  int line = 0;
  int column = 0;
};

[[noreturn]] void fail_at(Location loc, const std::string& message);

// ---- tokens ----
enum class TokenKind {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEnd
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;  // text data, name, operator, or the decoded string literal
  Location loc;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Splits a template into tokens with jinja2's whitespace control as transformers configures it
// (trim_blocks, lstrip_blocks, newline normalization, one trailing newline dropped).
std::vector<Token> tokenize(std::string_view source);

// ---- AST ----
enum class ExprKind {
  kLiteral,
  kName,
  kList,
  kTuple,
  kDict,
  kAttr,
  kItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kUnary,
  kBinary,
  kCompare,
  kCondition
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  Location loc;
  Value literal;
  std::string name;           // variable, attribute, filter, test or operator
  std::vector<ExprPtr> args;  // operands; for calls/filters/tests args[0] is the subject
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // comparison operators, one per operand after the first
  bool negated = false;          // `is not`
  ExprPtr star_args, star_kwargs;
};

enum class StmtKind {
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kBreak,
  kContinue,
  kScope
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  Location loc;
  std::string text;                  // kText data, macro name, namespace attribute of `set ns.x`
  ExprPtr expr;                      // output, set value, for iterable, call, filter chain
  ExprPtr condition;                 // for-loop filter
  std::vector<std::string> targets;  // names assigned by for/set
  bool tuple_target = false;
  std::vector<std::pair<ExprPtr, Body>> branches;  // if/elif
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro / call-block parameters
};

Body parse(std::vector<Token> tokens);

// ---- interpreter ----
struct RenderSettings {
  std::optional<std::tm> now;  // strftime_now's clock; the local time when empty
  int64_t max_steps = 0;       // loop iterations and macro calls (RenderOptions::max_steps)
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* lookup(const std::string& name) const;
};

class Interpreter {
 public:
  explicit Interpreter(RenderSettings settings) : settings_(std::move(settings)) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string render(const Body& body, const Value& context);

  Value eval(const Expr& expr);
  Value call(const Value& callee, const CallArgs& args, Location loc = {});
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  const RenderSettings& settings() const { return settings_; }
  // namespace(): a new namespace, whose contents the render drops when it ends.
  Value make_namespace();

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec(const Body& body, std::string& out);
  Flow exec(const Stmt& stmt, std::string& out);
  Flow exec_for(const Stmt& stmt, std::string& out);
  void assign(const Stmt& stmt, Value value);
  Value make_macro(const Stmt& stmt, std::shared_ptr<Scope> closure, const Body* caller_body);
  Value eval_call(const Expr& expr);
  Value eval_filter(const Expr& expr, const Value* subject);
  CallArgs eval_args(const Expr& expr, size_t first);

  // A loop iteration or a macro call (a few microseconds each): fails past the settings'
  // max_steps, so that a template that loops for minutes fails instead of holding its request.
  void count_step();

  RenderSettings settings_;
  std::shared_ptr<Scope> scope_;
  // The scopes that macros close over, alive until the render ends (make_macro says why).
  std::vector<std::shared_ptr<Scope>> macro_scopes_;
  // The namespaces the render made: the only objects a template can change, so the only way it
  // can build a reference cycle (`set ns.x = ns`); their contents are dropped when it ends.
  std::vector<Value> namespaces_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

// ---- limits: a template is untrusted input (GGUF files carry theirs) ----
// The most bytes a string and the most items a list may hold while a template renders: far above
// what any chat template renders, low enough that a hostile one cannot take the machine's memory
// (jinja2's sandbox stops range() at 100,000 items for the same reason).
constexpr size_t kMaxStringBytes = size_t{64} << 20;
constexpr size_t kMaxListItems = size_t{1} << 20;
// `out += piece`, failing past kMaxStringBytes.
void append_bounded(std::string& out, std::string_view piece);
// A padding width a template asks for: negative counts as 0 (as in Python), past
// kMaxStringBytes fails.
size_t bounded_width(int64_t width);
// Fails when a list would pass kMaxListItems.
void check_list_items(size_t items);

// ---- operations shared by the interpreter, filters and methods (all throw TemplateError) ----
List iterate(const Value& v);                 // Python iter(): list items, dict keys, chars
int64_t length(const Value& v);               // Python len()
int compare(const Value& a, const Value& b);  // <, == or > as -1/0/1; TypeError if unordered
bool contains(const Value& container, const Value& item);  // Python `in`
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// filters.cpp
Value apply_filter(Interpreter& in, const std::string& name, const Value& subject,
                   const CallArgs& args);
bool has_filter(const std::string& name);

// builtins.cpp: jinja tests and global functions
bool apply_test(Interpreter& in, const std::string& name, const Value& subject,
                const CallArgs& args);
bool has_test(const std::string& name);
void add_globals(Scope& scope);

// methods.cpp: the Python methods of str, list and dict a template may call
Value get_method(const Value& obj, const std::string& name);  // undefined when there is none

// string helpers (methods.cpp)
std::string py_strip(std::string_view s, const Value* chars, bool left, bool right);
bool is_word_char(uint32_t c);  // a character of regex class \w (Python, Unicode)
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);
List py_split(std::string_view s, const Value* sep, int64_t maxsplit, bool from_right);

}  // namespace tern::jinja

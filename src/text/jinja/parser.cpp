// Recursive-descent parser: tokens -> AST, with jinja2's operator precedence
// (condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filters/tests).
#include <initializer_list>

#include "text/jinja/internal.h"

namespace tern::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_template() {
    std::string found;
    Body body = parse_until({}, &found);
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText:
        return "template text";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kName:
        return "'" + t.text + "'";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return "number '" + t.text + "'";
      case TokenKind::kOp:
        return "'" + t.text + "'";
      case TokenKind::kEnd:
        return "end of template";
    }
    return "token";
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    fail_at(peek().loc, "expected " + expected + ", got " + describe(peek()));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) unexpected(std::string("'") + op + "'");
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) unexpected("a name");
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) unexpected("'%}'");
    next();
  }

  // Parses statements until a block tag whose name is in `ends`; leaves the token stream on that
  // name (after '{%') and stores it in *found.
  Body parse_until(std::initializer_list<const char*> ends, std::string* found) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() != 0) {
          std::string names;
          for (const char* e : ends)
            names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
          fail_at(t.loc, "unexpected end of template, expected " + names);
        }
        *found = "";
        return body;
      }
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->loc = t.loc;
        s->text = t.text;
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->loc = t.loc;
        next();
        s->expr = parse_tuple(true);
        if (peek().kind != TokenKind::kVarEnd) unexpected("'}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& name = peek(1);
        if (name.kind == TokenKind::kName) {
          for (const char* e : ends) {
            if (name.text == e) {
              next();
              *found = next().text;
              return body;
            }
          }
        }
        body.push_back(parse_statement());
      } else {
        unexpected("template text or a tag");
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    DepthGuard guard(*this);
    Location begin = next().loc;  // '{%'
    if (peek().kind != TokenKind::kName) unexpected("a statement name");
    const Token& name_token = next();
    std::string keyword = name_token.text;
    auto s = std::make_unique<Stmt>();
    s->loc = name_token.loc;
    std::string found;
    if (keyword == "if") {
      s->kind = StmtKind::kIf;
      while (true) {
        ExprPtr cond = parse_tuple(true);
        expect_block_end();
        Body body = parse_until({"elif", "else", "endif"}, &found);
        s->branches.emplace_back(std::move(cond), std::move(body));
        if (found == "elif") continue;
        if (found == "else") {
          expect_block_end();
          s->else_body = parse_until({"endif"}, &found);
        }
        break;
      }
      expect_block_end();
    } else if (keyword == "for") {
      s->kind = StmtKind::kFor;
      parse_targets(*s, false);
      if (!skip_name("in")) unexpected("'in'");
      s->expr = parse_tuple(false);
      if (skip_name("if")) s->condition = parse_expression(true);
      if (is_name("recursive")) fail_at(peek().loc, "recursive for loops are not supported");
      expect_block_end();
      s->body = parse_until({"else", "endfor"}, &found);
      if (found == "else") {
        expect_block_end();
        s->else_body = parse_until({"endfor"}, &found);
      }
      expect_block_end();
    } else if (keyword == "set") {
      parse_targets(*s, true);
      if (skip_op("=")) {
        s->kind = StmtKind::kSet;
        s->expr = parse_tuple(true);
        expect_block_end();
      } else {
        s->kind = StmtKind::kSetBlock;
        if (is_op("|")) s->expr = parse_filter_chain();
        expect_block_end();
        s->body = parse_until({"endset"}, &found);
        expect_block_end();
      }
    } else if (keyword == "macro") {
      s->kind = StmtKind::kMacro;
      s->text = expect_name();
      parse_params(*s);
      expect_block_end();
      s->body = parse_until({"endmacro"}, &found);
      if (peek().kind == TokenKind::kName) next();  // `endmacro name`
      expect_block_end();
    } else if (keyword == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_params(*s);
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::kCall)
        fail_at(s->expr->loc, "expected a call in the call block");
      expect_block_end();
      s->body = parse_until({"endcall"}, &found);
      expect_block_end();
    } else if (keyword == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->expr = parse_filter_chain(false);
      expect_block_end();
      s->body = parse_until({"endfilter"}, &found);
      expect_block_end();
    } else if (keyword == "break" || keyword == "continue") {
      s->kind = keyword == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
    } else if (keyword == "generation") {  // transformers' AssistantTracker: renders its body
      s->kind = StmtKind::kScope;
      expect_block_end();
      s->body = parse_until({"endgeneration"}, &found);
      expect_block_end();
    } else {
      fail_at(name_token.loc, "unsupported or unknown tag '" + keyword + "'");
    }
    (void)begin;
    return s;
  }

  void parse_targets(Stmt& s, bool allow_namespace) {
    bool paren = skip_op("(");
    while (true) {
      std::string name = expect_name();
      if (allow_namespace && is_op(".")) {
        next();
        s.text = expect_name();
        s.targets.push_back(name);
        break;
      }
      s.targets.push_back(name);
      if (!skip_op(",")) break;
      s.tuple_target = true;
      if (paren && is_op(")")) break;
    }
    if (paren) expect_op(")");
    if (s.targets.size() > 1) s.tuple_target = true;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression(true);
      s.params.emplace_back(std::move(name), std::move(def));
    }
    expect_op(")");
  }

  ExprPtr make(ExprKind kind, Location loc) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->loc = loc;
    return e;
  }

  // `a, b` makes a tuple; a single expression stays itself.
  ExprPtr parse_tuple(bool with_condexpr) {
    Location loc = peek().loc;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = make(ExprKind::kTuple, loc);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == TokenKind::kBlockEnd || peek().kind == TokenKind::kVarEnd || is_op(")") ||
          is_name("if")) {
        break;
      }
      t->args.push_back(parse_expression(with_condexpr));
    }
    return t;
  }

  // Bounds recursion so that hostile nesting fails with an error instead of exhausting the stack.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) fail_at(p.peek().loc, "template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };
  static constexpr int kMaxDepth = 200;

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      Location loc = next().loc;
      auto c = make(ExprKind::kCondition, loc);
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_condexpr();
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(expr));
      c->args.push_back(std::move(otherwise));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(const char* op, ExprPtr left, ExprPtr right, Location loc) {
    auto b = make(ExprKind::kBinary, loc);
    b->name = op;
    b->args.push_back(std::move(left));
    b->args.push_back(std::move(right));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      Location loc = next().loc;
      left = binary("or", std::move(left), parse_and(), loc);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      Location loc = next().loc;
      left = binary("and", std::move(left), parse_not(), loc);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Location loc = next().loc;
      auto u = make(ExprKind::kUnary, loc);
      u->name = "not";
      u->args.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    Location loc = peek().loc;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().kind == TokenKind::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, loc);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      std::string op = t.text;
      left = binary(op == "+" ? "+" : "-", std::move(left), parse_concat(), t.loc);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      Location loc = next().loc;
      left = binary("~", std::move(left), parse_math2(), loc);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      const char* op = t.text == "*" ? "*" : t.text == "/" ? "/" : t.text == "//" ? "//" : "%";
      left = binary(op, std::move(left), parse_pow(), t.loc);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      Location loc = next().loc;
      left = binary("**", std::move(left), parse_unary(true), loc);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = make(ExprKind::kUnary, t.loc);
      node->name = t.text == "-" ? "neg" : "pos";
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_postfix(parse_primary());
    }
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    Location loc = t.loc;
    switch (t.kind) {
      case TokenKind::kName: {
        std::string name = next().text;
        auto e = make(ExprKind::kLiteral, loc);
        if (name == "true" || name == "True") {
          e->literal = Value::boolean(true);
        } else if (name == "false" || name == "False") {
          e->literal = Value::boolean(false);
        } else if (name == "none" || name == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = name;
        }
        return e;
      }
      case TokenKind::kString: {
        std::string s;
        while (peek().kind == TokenKind::kString) s += next().text;
        auto e = make(ExprKind::kLiteral, loc);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenKind::kInt: {
        auto e = make(ExprKind::kLiteral, loc);
        e->literal = Value::integer(next().int_value);
        return e;
      }
      case TokenKind::kFloat: {
        auto e = make(ExprKind::kLiteral, loc);
        e->literal = Value::floating(next().float_value);
        return e;
      }
      case TokenKind::kOp:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return make(ExprKind::kTuple, loc);
          ExprPtr inner = parse_expression(true);
          if (is_op(",")) {
            auto tup = make(ExprKind::kTuple, loc);
            tup->args.push_back(std::move(inner));
            while (skip_op(",")) {
              if (is_op(")")) break;
              tup->args.push_back(parse_expression(true));
            }
            inner = std::move(tup);
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          next();
          auto list = make(ExprKind::kList, loc);
          while (!is_op("]")) {
            if (!list->args.empty()) expect_op(",");
            if (is_op("]")) break;
            list->args.push_back(parse_expression(true));
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make(ExprKind::kDict, loc);
          while (!is_op("}")) {
            if (!dict->args.empty()) expect_op(",");
            if (is_op("}")) break;
            dict->args.push_back(parse_expression(true));
            expect_op(":");
            dict->args.push_back(parse_expression(true));
          }
          expect_op("}");
          return dict;
        }
        break;
      default:
        break;
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        Location loc = next().loc;
        if (peek().kind == TokenKind::kInt) {
          auto item = make(ExprKind::kItem, loc);
          auto key = make(ExprKind::kLiteral, peek().loc);
          key->literal = Value::integer(next().int_value);
          item->args.push_back(std::move(node));
          item->args.push_back(std::move(key));
          node = std::move(item);
        } else {
          auto attr = make(ExprKind::kAttr, loc);
          attr->name = expect_name();
          attr->args.push_back(std::move(node));
          node = std::move(attr);
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    Location loc = next().loc;  // '['
    std::vector<ExprPtr> subs;
    while (!is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    if (subs.empty()) fail_at(loc, "expected a subscript");
    ExprPtr key;
    if (subs.size() == 1) {
      key = std::move(subs[0]);
    } else {
      // Python would make slice objects of them; no object a template reads takes a tuple of
      // slices (jinja2 renders nothing or fails to compile), so it is refused here.
      for (const auto& sub : subs) {
        if (sub->kind == ExprKind::kSlice) fail_at(sub->loc, "a slice inside a tuple subscript");
      }
      key = make(ExprKind::kTuple, loc);
      key->args = std::move(subs);
    }
    if (key->kind == ExprKind::kSlice) {
      key->args.insert(key->args.begin(), std::move(node));
      return key;
    }
    auto item = make(ExprKind::kItem, loc);
    item->args.push_back(std::move(node));
    item->args.push_back(std::move(key));
    return item;
  }

  ExprPtr parse_subscribed() {
    Location loc = peek().loc;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto s = make(ExprKind::kSlice, loc);
    ExprPtr stop, step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    }
    s->args.push_back(std::move(start));
    s->args.push_back(std::move(stop));
    s->args.push_back(std::move(step));
    return s;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (skip_op("*")) {
        call.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        call.star_kwargs = parse_expression(true);
      } else if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!call.kwargs.empty())
          fail_at(peek().loc, "positional argument follows keyword argument");
        call.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto call = make(ExprKind::kCall, node->loc);
    call->args.push_back(std::move(node));
    parse_call_args(*call);
    return call;
  }

  ExprPtr parse_filter(ExprPtr node) {
    Location loc = peek().loc;
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    auto f = make(ExprKind::kFilter, loc);
    f->name = name;
    f->args.push_back(std::move(node));  // may be null inside a filter block
    if (is_op("(")) parse_call_args(*f);
    return f;
  }

  // `| f | g(args)` with no subject, for filter blocks and `set x | f` blocks.
  ExprPtr parse_filter_chain(bool leading_pipe = true) {
    if (leading_pipe) expect_op("|");
    ExprPtr node = parse_filter(nullptr);
    while (skip_op("|")) node = parse_filter(std::move(node));
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        Location loc = next().loc;
        auto t = make(ExprKind::kTest, loc);
        t->negated = skip_name("not");
        t->name = expect_name();
        while (is_op(".")) {
          next();
          t->name += "." + expect_name();
        }
        t->args.push_back(std::move(node));
        const Token& a = peek();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((a.kind == TokenKind::kName || a.kind == TokenKind::kString ||
                    a.kind == TokenKind::kInt || a.kind == TokenKind::kFloat || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(t);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).parse_template();
}

}  // namespace tern::jinja

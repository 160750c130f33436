// Jinja2 parser (see parser.h). Function names follow jinja2/parser.py so the two can be read
// side by side.
#include "orchid/tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "orchid/tokenizer/jinja/builtins.h"

namespace orchid::jinja {
namespace {

// Nesting limits keep hostile templates from exhausting the stack (Python would raise
// RecursionError); real chat templates nest a handful of levels.
constexpr int kMaxExprDepth = 100;
constexpr int kMaxBlockDepth = 100;

using Names = std::initializer_list<std::string_view>;

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::data:
      return "template data";
    case TokenType::var_begin:
      return "begin of print statement";
    case TokenType::var_end:
      return "end of print statement";
    case TokenType::block_begin:
      return "begin of statement block";
    case TokenType::block_end:
      return "end of statement block";
    case TokenType::name:
    case TokenType::op:
      return "'" + t.text + "'";
    case TokenType::string:
      return "string";
    case TokenType::integer:
    case TokenType::number:
      return "number";
    case TokenType::eof:
      return "end of template";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    Body body = subparse({});
    if (cur().type != TokenType::eof) error("unexpected " + describe(cur()));
    return body;
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::op && cur().text == op; }
  bool is_name(std::string_view n) const {
    return cur().type == TokenType::name && cur().text == n;
  }
  bool is_name_in(Names names) const {
    return cur().type == TokenType::name &&
           std::find(names.begin(), names.end(), cur().text) != names.end();
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void error(const std::string& msg) const {
    fail(ErrorKind::syntax, msg, cur().line);
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) error("expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type) error(std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != TokenType::name) error("expected a name, got " + describe(cur()));
    return next().text;
  }
  ExprPtr node(Expr::Kind k, int line) { return std::make_unique<Expr>(k, line); }

  // ---- statements ----
  Body subparse(Names end_tags) {
    Body body;
    if (++block_depth_ > kMaxBlockDepth) error("blocks nested too deeply");
    while (cur().type != TokenType::eof) {
      const Token& tok = cur();
      if (tok.type == TokenType::data) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::text, tok.line);
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == TokenType::var_begin) {
        next();
        auto s = std::make_unique<Stmt>(Stmt::Kind::print, tok.line);
        s->expr = parse_tuple(false, true, {}, false);
        expect(TokenType::var_end, "end of print statement");
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::block_begin) {
        next();
        if (end_tags.size() && is_name_in(end_tags)) break;
        body.push_back(parse_statement());
        expect(TokenType::block_end, "end of statement block");
      } else {
        error("unexpected " + describe(tok));
      }
    }
    --block_depth_;
    return body;
  }

  // The body of a block statement, up to one of end_tags (left current unless drop_needle).
  Body parse_statements(Names end_tags, bool drop_needle) {
    skip_op(":");
    expect(TokenType::block_end, "end of statement block");
    Body body = subparse(end_tags);
    if (cur().type == TokenType::eof) {
      std::string expected;
      for (std::string_view e : end_tags)
        expected += (expected.empty() ? "'" : " or '") + std::string(e) + "'";
      error("unexpected end of template, expected " + expected);
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().type != TokenType::name) error("tag name expected");
    const std::string tag = cur().text;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "print") {
      auto s = std::make_unique<Stmt>(Stmt::Kind::print, next().line);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) error("'" + tag + "' outside of a loop");
      return std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_,
                                    next().line);
    }
    static constexpr std::string_view kUnsupported[] = {"block",  "extends", "include",    "import",
                                                        "from",   "with",    "autoescape", "call",
                                                        "filter", "do"};
    for (std::string_view u : kUnsupported)
      if (tag == u) error("the '" + tag + "' tag is not supported by orchid's Jinja subset");
    error("Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::if_, next().line);
    while (true) {
      s->conds.push_back(parse_tuple(false, false, {}, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      const std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") s->bodies.push_back(parse_statements({"endif"}, true));
      break;
    }
    return s;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::for_, next().line);
    s->target = parse_assign_target(false, {"in"});
    if (!skip_name("in")) error("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) error("recursive for loops are not supported");
    ++loop_depth_;
    s->bodies.push_back(parse_statements({"endfor", "else"}, false));
    --loop_depth_;
    if (next().text == "else") s->bodies.push_back(parse_statements({"endfor"}, true));
    return s;
  }

  StmtPtr parse_set() {
    const int line = next().line;
    Target target = parse_assign_target(true, {});
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::set, line);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = std::make_unique<Stmt>(Stmt::Kind::set_block, line);
    s->target = std::move(target);
    while (skip_op("|")) s->filters.push_back(parse_filter_call(nullptr));
    // A break/continue inside acts on the enclosing loop (jinja2 compiles the block inline).
    s->bodies.push_back(parse_statements({"endset"}, true));
    return s;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>(Stmt::Kind::macro, next().line);
    s->name = expect_name();
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string param = expect_name();
      ExprPtr dflt;
      if (skip_op("=")) {
        dflt = parse_expression(true);
        defaults = true;
      } else if (defaults) {
        error("non-default argument follows default argument");
      }
      s->params.emplace_back(std::move(param), std::move(dflt));
    }
    expect_op(")");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(parse_statements({"endmacro"}, true));
    loop_depth_ = saved_loops;
    return s;
  }

  Target parse_assign_target(bool with_namespace, Names extra_end) {
    Target t;
    if (with_namespace && cur().type == TokenType::name && look().type == TokenType::op &&
        look().text == ".") {
      t.kind = Target::Kind::ns_attr;
      t.names.push_back(next().text);
      next();
      t.attr = expect_name();
      return t;
    }
    ExprPtr e = parse_tuple(true, true, extra_end, false);
    auto name_of = [&](const Expr& x) {
      if (x.kind != Expr::Kind::name) error("can't assign to this expression");
      return x.name;
    };
    if (e->kind == Expr::Kind::tuple) {
      t.kind = Target::Kind::tuple;
      for (const auto& a : e->args) t.names.push_back(name_of(*a));
    } else {
      t.names.push_back(name_of(*e));
    }
    return t;
  }

  // ---- expressions ----
  bool is_tuple_end(Names extra_end) const {
    return cur().type == TokenType::var_end || cur().type == TokenType::block_end || is_op(")") ||
           (extra_end.size() && is_name_in(extra_end));
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, Names extra_end, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) error("Expected an expression, got " + describe(cur()));
    }
    auto e = node(Expr::Kind::tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    if (++expr_depth_ > kMaxExprDepth) error("expression nested too deeply");
    ExprPtr e = with_condexpr ? parse_condexpr() : parse_or();
    --expr_depth_;
    return e;
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      auto c = node(Expr::Kind::cond, line);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary_node(Expr::Kind k, ExprPtr l, ExprPtr r, int line) {
    auto e = node(k, line);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      e = binary_node(Expr::Kind::or_, std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      e = binary_node(Expr::Kind::and_, std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      if (++expr_depth_ > kMaxExprDepth) error("expression nested too deeply");
      auto e = node(Expr::Kind::unary, next().line);
      e->op = Op::not_;
      e->args.push_back(parse_not());
      --expr_depth_;
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      Op op;
      if (is_op("=="))
        op = Op::eq;
      else if (is_op("!="))
        op = Op::ne;
      else if (is_op("<"))
        op = Op::lt;
      else if (is_op("<="))
        op = Op::le;
      else if (is_op(">"))
        op = Op::gt;
      else if (is_op(">="))
        op = Op::ge;
      else if (is_name("in"))
        op = Op::in;
      else if (is_name("not") && look().type == TokenType::name && look().text == "in") {
        next();
        op = Op::not_in;
      } else {
        break;
      }
      next();
      if (!e) {
        e = node(Expr::Kind::compare, line);
        e->args.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->args.push_back(parse_math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr arith(Op op, ExprPtr l, ExprPtr r, int line) {
    auto e = binary_node(Expr::Kind::binary, std::move(l), std::move(r), line);
    e->op = op;
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      const Op op = t.text == "+" ? Op::add : Op::sub;
      e = arith(op, std::move(e), parse_concat(), t.line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(Expr::Kind::concat, line);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      const Op op = t.text == "*"    ? Op::mul
                    : t.text == "/"  ? Op::div
                    : t.text == "//" ? Op::floordiv
                                     : Op::mod;
      e = arith(op, std::move(e), parse_pow(), t.line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      e = arith(Op::pow, std::move(e), parse_unary(true), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    if (++expr_depth_ > kMaxExprDepth) error("expression nested too deeply");
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = node(Expr::Kind::unary, t.line);
      e->op = t.text == "-" ? Op::neg : Op::pos;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    --expr_depth_;
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == TokenType::name) {
      next();
      auto e = node(Expr::Kind::constant, t.line);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::name;
        e->name = t.text;
      }
      return e;
    }
    if (t.type == TokenType::string) {
      std::string s;
      const int line = t.line;
      while (cur().type == TokenType::string) s += next().text;  // adjacent literals join
      auto e = node(Expr::Kind::constant, line);
      e->value = Value(Json(std::move(s)));
      return e;
    }
    if (t.type == TokenType::integer || t.type == TokenType::number) {
      next();
      auto e = node(Expr::Kind::constant, t.line);
      e->value =
          t.type == TokenType::integer ? Value(Json(t.int_value)) : Value(Json(t.float_value));
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = node(Expr::Kind::list, next().line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = node(Expr::Kind::dict, next().line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    error("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        e = parse_filter_call(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& a = next();
      if (a.type == TokenType::name) {
        auto e = node(Expr::Kind::attr, t.line);
        e->args.push_back(std::move(obj));
        e->name = a.text;
        return e;
      }
      if (a.type != TokenType::integer) error("expected name or number");
      auto e = node(Expr::Kind::item, t.line);
      auto idx = node(Expr::Kind::constant, a.line);
      idx->value = Value(Json(a.int_value));
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(idx));
      return e;
    }
    // '[': an index, a slice, or a tuple of them (only the first two are meaningful).
    std::vector<ExprPtr> subs;
    while (!is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    if (subs.size() != 1) error("multi-dimensional subscripts are not supported");
    ExprPtr sub = std::move(subs[0]);
    if (sub->kind == Expr::Kind::slice) {  // parse_subscribed left the object slot empty
      sub->args[0] = std::move(obj);
      return sub;
    }
    auto e = node(Expr::Kind::item, t.line);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(sub));
    return e;
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    std::vector<ExprPtr> parts;  // start, stop, step
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(":") || is_op("]") || is_op(",")) {
      parts.push_back(nullptr);
    } else {
      parts.push_back(parse_expression(true));
    }
    if (skip_op(":")) {
      parts.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression(true));
    } else {
      parts.push_back(nullptr);
    }
    auto s = node(Expr::Kind::slice, line);
    s->args.push_back(nullptr);  // the sliced object, filled in by parse_subscript
    for (auto& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  // `(args, key=value)` into e->args (after any already there) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::name && look().type == TokenType::op && look().text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error("invalid syntax for function call expression");
        e.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(Expr::Kind::call, cur().line);
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  // After '|': NAME [(args)]. `input` is null for the filters of a block set.
  ExprPtr parse_filter_call(ExprPtr input) {
    auto e = node(Expr::Kind::filter, cur().line);
    e->name = dotted_name();
    if (!has_filter(e->name)) error("No filter named '" + e->name + "'.");
    e->args.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr subject) {
    auto e = node(Expr::Kind::test, next().line);  // 'is'
    e->negated = skip_name("not");
    e->name = dotted_name();
    if (!has_test(e->name)) error("No test named '" + e->name + "'.");
    e->args.push_back(std::move(subject));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == TokenType::name || t.type == TokenType::string ||
                t.type == TokenType::integer || t.type == TokenType::number || is_op("[") ||
                is_op("{")) &&
               !is_name_in({"else", "or", "and"})) {
      if (is_name("is")) error("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int expr_depth_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  return Parser(tokens).parse_template();
}

}  // namespace orchid::jinja

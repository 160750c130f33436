// Tree-walking evaluator (see interpreter.h). Operators follow Python: `and`/`or` return an
// operand, `==` never raises, `<` raises TypeError across types, arithmetic on an Undefined
// raises UndefinedError, ints are exact (int64 here: overflow is reported, not wrapped).
#include "orchid/tokenizer/jinja/interpreter.h"

#include <cmath>
#include <optional>
#include <utility>

#include "orchid/tokenizer/jinja/builtins.h"

namespace orchid::jinja {
namespace {

// Bounds that keep a hostile template from exhausting memory or the stack.
constexpr size_t kMaxOutput = size_t(64) << 20;  // bytes, of the output and of any one string
constexpr int kMaxCallDepth = 100;               // nested macro calls

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { normal, break_, continue_ };

const char* op_symbol(Op op) {
  switch (op) {
    case Op::add:
      return "+";
    case Op::sub:
      return "-";
    case Op::mul:
      return "*";
    case Op::div:
      return "/";
    case Op::floordiv:
      return "//";
    case Op::mod:
      return "%";
    case Op::pow:
      return "**";
    default:
      return "?";
  }
}

void check_size(size_t n) {
  if (n > kMaxOutput) fail(ErrorKind::limit, "output larger than 64 MiB");
}

[[noreturn]] void overflow() {
  fail(ErrorKind::unsupported, "integer overflow (Python ints are unbounded, orchid's are 64-bit)");
}

Value int_arith(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case Op::add:
      if (__builtin_add_overflow(a, b, &r)) overflow();
      return Value(Json(r));
    case Op::sub:
      if (__builtin_sub_overflow(a, b, &r)) overflow();
      return Value(Json(r));
    case Op::mul:
      if (__builtin_mul_overflow(a, b, &r)) overflow();
      return Value(Json(r));
    case Op::div:
      if (b == 0) type_error("division by zero");
      return Value(Json(double(a) / double(b)));
    case Op::floordiv:
    case Op::mod: {
      if (b == 0) type_error("integer division or modulo by zero");
      if (a == INT64_MIN && b == -1) overflow();
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) {
        --q;
        m += b;
      }
      return Value(Json(op == Op::floordiv ? q : m));
    }
    case Op::pow: {
      if (b < 0) {
        if (a == 0) type_error("0.0 cannot be raised to a negative power");
        return Value(Json(std::pow(double(a), double(b))));
      }
      int64_t result = 1, base = a;
      for (int64_t e = b; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) overflow();
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value(Json(result));
    }
    default:
      break;
  }
  type_error("bad operator");
}

Value float_arith(Op op, double x, double y) {
  switch (op) {
    case Op::add:
      return Value(Json(x + y));
    case Op::sub:
      return Value(Json(x - y));
    case Op::mul:
      return Value(Json(x * y));
    case Op::div:
      if (y == 0) type_error("float division by zero");
      return Value(Json(x / y));
    case Op::floordiv:
    case Op::mod: {  // CPython's float_divmod
      if (y == 0) type_error("float divmod()");
      double mod = std::fmod(x, y), div = (x - mod) / y;
      if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      double floordiv;
      if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, x / y);
      }
      return Value(Json(op == Op::floordiv ? floordiv : mod));
    }
    case Op::pow:
      if (x == 0 && y < 0) type_error("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y))
        fail(ErrorKind::unsupported, "a negative number to a fractional power is complex");
      return Value(Json(std::pow(x, y)));
    default:
      break;
  }
  type_error("bad operator");
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value(Json("")) : Value(Json::array());
  if (seq.is_string()) {
    check_size(seq.str().size() * size_t(std::min<int64_t>(n, int64_t(kMaxOutput) + 1)));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(Json(std::move(out)));
  }
  check_size(seq.data().size() * size_t(std::min<int64_t>(n, int64_t(kMaxOutput) + 1)));
  Json out = Json::array();
  for (int64_t i = 0; i < n; ++i)
    for (const Json& e : seq.data()) out.push_back(e);
  return Value(std::move(out));
}

Value binary_op(Op op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  int64_t i = 0, k = 0;
  if (op == Op::add && a.is_string() && b.is_string()) {
    check_size(a.str().size() + b.str().size());
    return Value(Json(a.str() + b.str()));
  }
  if (op == Op::add && a.is_list() && b.is_list()) {
    Json out = a.data();
    for (const Json& e : b.data()) out.push_back(e);
    return Value(std::move(out));
  }
  if (op == Op::mul && (a.is_string() || a.is_list()) && !b.is_float() && as_int(b, k))
    return repeat(a, k);
  if (op == Op::mul && (b.is_string() || b.is_list()) && !a.is_float() && as_int(a, i))
    return repeat(b, i);
  if (op == Op::mod && a.is_string())
    fail(ErrorKind::unsupported, "printf-style formatting ('%' on a string) is not supported");
  if (!a.is_float() && !b.is_float() && as_int(a, i) && as_int(b, k)) return int_arith(op, i, k);
  double x = 0, y = 0;
  if (as_number(a, x) && as_number(b, y)) return float_arith(op, x, y);
  type_error(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" +
             type_name(a) + "' and '" + type_name(b) + "'");
}

Value unary_op(Op op, const Value& v) {
  if (op == Op::not_) return Value::boolean(!truthy(v));
  if (v.is_undefined()) undefined_error(v);
  int64_t i = 0;
  if (!v.is_float() && as_int(v, i)) {
    if (op == Op::pos) return Value(Json(i));
    if (i == INT64_MIN) overflow();
    return Value(Json(-i));
  }
  if (v.is_float())
    return Value(Json(op == Op::neg ? -v.data().get<double>() : v.data().get<double>()));
  type_error(std::string("bad operand type for unary ") + (op == Op::neg ? "-" : "+") + ": '" +
             type_name(v) + "'");
}

bool compare(Op op, const Value& a, const Value& b) {
  switch (op) {
    case Op::eq:
      return equal(a, b);
    case Op::ne:
      return !equal(a, b);
    case Op::lt:
      return less(a, b, "<");
    case Op::le:
      return less(a, b, "<=") || equal(a, b);
    case Op::gt:
      return less(b, a, ">");
    case Op::ge:
      return less(b, a, ">=") || equal(a, b);
    case Op::in:
      return contains(b, a);
    case Op::not_in:
      return !contains(b, a);
    default:
      type_error("bad comparison");
  }
}

class Interpreter {
 public:
  Interpreter(std::string& out, int& line) : out_(&out), line_(line) {}

  void run(const Body& body, const std::vector<std::string>& fresh, const Json& vars) {
    root_ = std::make_shared<Scope>();
    for (auto& [name, value] : make_globals()) root_->set(name, std::move(value));
    // The context is viewed in place, not copied: it outlives the render.
    std::shared_ptr<const Json> owner(&vars, [](const Json*) {});
    for (auto it = vars.begin(); it != vars.end(); ++it)
      root_->set(it.key(), Value::view(owner, &it.value()));
    declare_fresh(*root_, fresh);
    scope_ = root_;
    exec_body(body);
  }

 private:
  // Makes `s` the current scope until destroyed.
  class ScopeGuard {
   public:
    ScopeGuard(Interpreter& in, std::shared_ptr<Scope> s)
        : in_(in), saved_(std::exchange(in.scope_, std::move(s))) {}
    ~ScopeGuard() { in_.scope_ = std::move(saved_); }

   private:
    Interpreter& in_;
    std::shared_ptr<Scope> saved_;
  };

  static void declare_fresh(Scope& scope, const std::vector<std::string>& fresh) {
    for (const std::string& name : fresh)
      scope.set(name, Value::undefined("'" + name + "' is undefined"));
  }

  // A new frame inside the current one; `fresh` start Undefined in it.
  std::shared_ptr<Scope> child(const std::vector<std::string>& fresh = {}) const {
    auto s = std::make_shared<Scope>();
    s->parent = scope_;
    declare_fresh(*s, fresh);
    return s;
  }

  void write(std::string_view s) {
    check_size(out_->size() + s.size());
    out_->append(s);
  }

  // Runs body writing into a fresh buffer, returned; `flow` gets how the body ended.
  std::string capture(const Body& body, Flow* flow = nullptr) {
    std::string buf;
    std::string* saved = std::exchange(out_, &buf);
    struct Restore {
      std::string*& slot;
      std::string* value;
      ~Restore() { slot = value; }
    } restore{out_, saved};
    const Flow f = exec_body(body);
    if (flow) *flow = f;
    return buf;
  }

  Flow exec_body(const Body& body) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s) {
    line_ = s.line;
    switch (s.kind) {
      case Stmt::Kind::text:
        write(s.text);
        break;
      case Stmt::Kind::print:
        write(to_str(eval(*s.expr)));
        break;
      case Stmt::Kind::if_:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (truthy(eval(*s.conds[i]))) return exec_body(s.bodies[i]);
        if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back());
        break;
      case Stmt::Kind::for_:
        return exec_for(s);
      case Stmt::Kind::set:
        assign(s.target, eval(*s.expr));
        break;
      case Stmt::Kind::set_block: {
        std::string text;
        Flow flow = Flow::normal;
        {
          ScopeGuard g(*this, child(s.fresh[0]));
          text = capture(s.bodies[0], &flow);
        }
        if (flow != Flow::normal) return flow;  // a break/continue leaves without assigning
        Value v{Json(std::move(text))};
        for (const ExprPtr& f : s.filters) {
          CallArgs args = eval_args(*f, 1);
          v = apply_filter(f->name, v, args);
        }
        assign(s.target, v);
        break;
      }
      case Stmt::Kind::macro:
        define_macro(s);
        break;
      case Stmt::Kind::break_:
        return Flow::break_;
      case Stmt::Kind::continue_:
        return Flow::continue_;
    }
    return Flow::normal;
  }

  Flow exec_for(const Stmt& s) {
    std::vector<Value> items = iterate(eval(*s.expr));
    if (s.cond) {
      std::vector<Value> kept;
      for (Value& item : items) {
        ScopeGuard g(*this, child());
        bind(s.target, item);
        if (truthy(eval(*s.cond))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    // jinja2 runs the else block unless some iteration reached the end of the body: a loop
    // whose every iteration ends in continue, or that breaks in the first, runs it too.
    bool completed = false;
    auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
    for (size_t i = 0; i < shared->size(); ++i) {
      ScopeGuard g(*this, child(s.fresh[0]));
      bind(s.target, (*shared)[i]);
      scope_->set("loop", make_loop(shared, i));
      const Flow f = exec_body(s.bodies[0]);
      if (f == Flow::break_) break;
      if (f == Flow::normal) completed = true;
    }
    if (completed || s.bodies.size() < 2) return Flow::normal;
    ScopeGuard g(*this, child(s.fresh[1]));
    return exec_body(s.bodies[1]);
  }

  void bind(const Target& t, const Value& v) {
    if (t.kind == Target::Kind::name) {
      scope_->set(t.names[0], v);
      return;
    }
    std::vector<Value> parts = iterate(v);
    if (parts.size() < t.names.size())
      type_error("not enough values to unpack (expected " + std::to_string(t.names.size()) +
                 ", got " + std::to_string(parts.size()) + ")");
    if (parts.size() > t.names.size())
      type_error("too many values to unpack (expected " + std::to_string(t.names.size()) + ")");
    for (size_t i = 0; i < parts.size(); ++i) scope_->set(t.names[i], parts[i]);
  }

  void assign(const Target& t, const Value& v) {
    if (t.kind != Target::Kind::ns_attr) return bind(t, v);
    const Value* ns = scope_->find(t.names[0]);
    if (!ns || !ns->is_object() || ns->object()->type != Object::Type::ns)
      type_error("cannot assign attribute on non-namespace object");
    ns->object()->set(t.attr, v);
  }

  void define_macro(const Stmt& m) {
    auto c = std::make_shared<Callable>();
    c->name = m.name;
    c->is_macro = true;
    // A weak reference: the scope holds the macro, so a strong one would be a cycle.
    std::weak_ptr<Scope> closure = scope_;
    c->fn = [this, &m, closure](CallArgs& args) {
      std::shared_ptr<Scope> scope = closure.lock();
      return call_macro(m, scope ? scope : root_, args);
    };
    scope_->set(m.name, Value::of(std::shared_ptr<const Callable>(std::move(c))));
  }

  Value call_macro(const Stmt& m, std::shared_ptr<Scope> closure, CallArgs& args) {
    if (depth_ >= kMaxCallDepth)
      fail(ErrorKind::limit, "maximum recursion depth exceeded in macro '" + m.name + "'");
    const size_t n = m.params.size();
    if (args.pos.size() > n)
      type_error("macro '" + m.name + "' takes not more than " + std::to_string(n) +
                 " argument(s)");
    std::vector<std::optional<Value>> given(n);
    for (size_t i = 0; i < args.pos.size(); ++i) given[i] = args.pos[i];
    for (auto& [k, v] : args.kw) {
      size_t i = 0;
      while (i < n && m.params[i].first != k) ++i;
      if (i == n) type_error("macro '" + m.name + "' takes no keyword argument '" + k + "'");
      if (given[i])
        type_error("macro '" + m.name + "' got multiple values for argument '" + k + "'");
      given[i] = v;
    }
    auto scope = std::make_shared<Scope>();
    scope->parent = std::move(closure);
    declare_fresh(*scope, m.fresh[0]);
    ScopeGuard g(*this, scope);
    ++depth_;
    struct Depth {
      int& d;
      ~Depth() { --d; }
    } depth{depth_};
    for (size_t i = 0; i < n; ++i) {
      const auto& [name, dflt] = m.params[i];
      scope->set(name, given[i] ? *given[i]
                       : dflt   ? eval(*dflt)
                                : Value::undefined("'" + name + "' is undefined"));
    }
    return Value(Json(capture(m.bodies[0])));
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::constant:
        return e.value;
      case Expr::Kind::name:
        if (const Value* v = scope_->find(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      case Expr::Kind::attr:
        return get_attr(eval(*e.args[0]), e.name);
      case Expr::Kind::item: {
        const Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]));
      }
      case Expr::Kind::slice: {
        const Value obj = eval(*e.args[0]);
        std::optional<Value> b[3];
        for (int i = 0; i < 3; ++i)
          if (e.args[size_t(i) + 1]) b[i] = eval(*e.args[size_t(i) + 1]);
        return get_slice(obj, b[0] ? &*b[0] : nullptr, b[1] ? &*b[1] : nullptr,
                         b[2] ? &*b[2] : nullptr);
      }
      case Expr::Kind::call: {
        const Value fn = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        return call(fn, args);
      }
      case Expr::Kind::filter: {
        const Value in = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        return apply_filter(e.name, in, args);
      }
      case Expr::Kind::test: {
        const Value in = eval(*e.args[0]);
        CallArgs args = eval_args(e, 1);
        return Value::boolean(apply_test(e.name, in, args) != e.negated);
      }
      case Expr::Kind::unary:
        return unary_op(e.op, eval(*e.args[0]));
      case Expr::Kind::binary: {
        const Value a = eval(*e.args[0]);
        return binary_op(e.op, a, eval(*e.args[1]));
      }
      case Expr::Kind::compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::and_: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::Kind::or_: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::Kind::cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        Json out = Json::array();
        for (const ExprPtr& x : e.args) out.push_back(to_json(eval(*x)));
        return Value(std::move(out));
      }
      case Expr::Kind::dict: {
        Json out = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (!k.is_string()) fail(ErrorKind::unsupported, "dict literal keys must be strings");
          out[k.str()] = to_json(eval(*e.args[i + 1]));
        }
        return Value(std::move(out));
      }
      case Expr::Kind::concat: {
        std::string s;
        for (const ExprPtr& x : e.args) {
          const Value v = eval(*x);
          const std::string piece = v.is_string() ? std::string() : to_str(v);
          const std::string& text = v.is_string() ? v.str() : piece;
          check_size(s.size() + text.size());
          s += text;
        }
        return Value(Json(std::move(s)));
      }
    }
    type_error("bad expression");
  }

  std::string* out_;
  int& line_;
  std::shared_ptr<Scope> root_;
  std::shared_ptr<Scope> scope_;
  int depth_ = 0;
};

}  // namespace

void execute(const Body& body, const std::vector<std::string>& fresh, const Json& vars,
             std::string& out, int& line) {
  Interpreter(out, line).run(body, fresh, vars);
}

}  // namespace orchid::jinja

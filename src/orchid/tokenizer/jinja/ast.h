// Syntax tree of a parsed template: expressions and statements as plain structs with a kind
// tag. Each node records its source line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "orchid/tokenizer/jinja/value.h"

namespace orchid::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class Op {
  add,
  sub,
  mul,
  div,
  floordiv,
  mod,
  pow,  // binary arithmetic
  neg,
  pos,
  not_,  // unary
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  in,
  not_in,  // comparisons
};

struct Expr {
  enum class Kind {
    constant,  // value
    name,      // name
    attr,      // args[0].name
    item,      // args[0][args[1]]
    slice,     // args[0][args[1]:args[2]:args[3]] (null children: omitted bounds)
    call,      // args[0](args[1..], kwargs)
    filter,    // args[0] | name(args[1..], kwargs); args[0] is null in `{% set x | f %}`
    test,      // args[0] is [not] name(args[1..], kwargs); negated
    unary,     // op args[0]
    binary,    // args[0] op args[1]
    compare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained like Python)
    and_,      // args[0] and args[1]
    or_,       // args[0] or args[1]
    cond,      // args[1] if args[0] else args[2] (args[2] null: Undefined)
    list,      // [args...]
    tuple,     // (args...,) — evaluated as a list
    dict,      // {args[0]: args[1], args[2]: args[3], ...}
    concat,    // args[0] ~ args[1] ~ ...
  };
  Kind kind;
  int line = 0;
  Value value;           // constant
  std::string name;      // name, attr, filter, test
  Op op = Op::add;       // unary, binary
  std::vector<Op> ops;   // compare
  bool negated = false;  // test
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call, filter, test

  Expr(Kind k, int l) : kind(k), line(l) {}
};

// An assignment target: `x`, `a, b` or `ns.attr`.
struct Target {
  enum class Kind { name, tuple, ns_attr };
  Kind kind = Kind::name;
  std::vector<std::string> names;  // name: one; tuple: several; ns_attr: the namespace
  std::string attr;                // ns_attr
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    text,       // text
    print,      // {{ expr }}
    if_,        // conds[i] → bodies[i]; bodies.size() == conds.size() + 1 when there is an else
    for_,       // for target in expr [if cond]: bodies[0], else bodies[1]
    set,        // set target = expr
    set_block,  // set target [| filters] ... endset: bodies[0]
    macro,      // macro name(params) ... endmacro: bodies[0]
    break_,
    continue_,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;                // for: the loop filter
  std::vector<ExprPtr> conds;  // if
  std::vector<Body> bodies;
  Target target;
  std::vector<ExprPtr> filters;                         // set_block: filter nodes with a null input
  std::string name;                                     // macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro: name, default (or null)
  // for (body, else), macro, set_block: names that start Undefined in the frame of bodies[i]
  // (see scopes.h).
  std::vector<std::string> fresh[2];

  Stmt(Kind k, int l) : kind(k), line(l) {}
};

}  // namespace orchid::jinja

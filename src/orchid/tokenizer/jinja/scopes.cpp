// Jinja2's symbol analysis (see scopes.h), transcribed from jinja2/idtracking.py 3.1: Symbols
// mirrors its class of that name, FrameVisitor its FrameSymbolVisitor, analyze_frame its
// RootVisitor.
#include "orchid/tokenizer/jinja/scopes.h"

#include <map>
#include <set>

namespace orchid::jinja {
namespace {

enum class Load { param, resolve, alias, undefined };

struct Symbols {
  const Symbols* parent = nullptr;
  std::map<std::string, Load> loads;  // this frame's slots and how each starts
  std::set<std::string> stores;

  bool find_ref(const std::string& name) const {
    for (const Symbols* s = this; s; s = s->parent)
      if (s->loads.count(name)) return true;
    return false;
  }
  void store(const std::string& name) {
    stores.insert(name);
    if (loads.count(name)) return;
    loads[name] = parent && parent->find_ref(name) ? Load::alias : Load::undefined;
  }
  void declare_parameter(const std::string& name) {
    stores.insert(name);
    loads[name] = Load::param;
  }
  void load(const std::string& name) {
    if (!find_ref(name)) loads[name] = Load::resolve;
  }
  // After an if: a name assigned in only some of the branches starts from outside instead.
  void branch_update(const std::vector<Symbols>& branches) {
    std::map<std::string, size_t> counts;
    for (const Symbols& b : branches)
      for (const std::string& t : b.stores)
        if (!stores.count(t)) ++counts[t];
    for (const Symbols& b : branches) {
      for (const auto& [name, load] : b.loads) loads[name] = load;
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const auto& [name, count] : counts) {
      if (count == branches.size()) continue;
      loads[name] = parent && parent->find_ref(name) ? Load::alias : Load::resolve;
    }
  }
};

// What one frame's statements read and assign; nested frames are not entered.
class FrameVisitor {
 public:
  explicit FrameVisitor(Symbols& sym) : sym_(&sym) {}

  void stmts(const Body& body) {
    for (const StmtPtr& s : body) stmt(*s);
  }

  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == Expr::Kind::name) sym_->load(e->name);
    for (const ExprPtr& a : e->args) expr(a.get());
    for (const auto& kw : e->kwargs) expr(kw.second.get());
  }

 private:
  void stmt(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::print:
        expr(s.expr.get());
        break;
      case Stmt::Kind::if_:
        visit_if(s, 0);
        break;
      case Stmt::Kind::for_:
        expr(s.expr.get());
        break;  // body, else, filter: own frames
      case Stmt::Kind::set:
        expr(s.expr.get());
        target(s.target);
        break;
      case Stmt::Kind::set_block:
        target(s.target);
        break;
      case Stmt::Kind::macro:
        sym_->store(s.name);
        break;
      default:
        break;
    }
  }

  void target(const Target& t) {
    if (t.kind == Target::Kind::ns_attr) {
      sym_->load(t.names[0]);
    } else {
      for (const std::string& n : t.names) sym_->store(n);
    }
  }

  // jinja2's If node i of the chain: the first holds test, body, the elif nodes and the
  // else; each elif node holds only its test and body.
  void visit_if(const Stmt& s, size_t i) {
    expr(s.conds[i].get());
    Symbols* original = sym_;
    auto inner = [&](auto&& visit) {
      Symbols copy = *original;
      sym_ = &copy;
      visit();
      sym_ = original;
      return copy;
    };
    std::vector<Symbols> branches;
    branches.push_back(inner([&] { stmts(s.bodies[i]); }));
    const bool has_else = s.bodies.size() > s.conds.size();
    if (i == 0) {
      branches.push_back(inner([&] {
        for (size_t k = 1; k < s.conds.size(); ++k) visit_if(s, k);
      }));
      branches.push_back(inner([&] {
        if (has_else) stmts(s.bodies.back());
      }));
    } else {
      branches.push_back(inner([] {}));
      branches.push_back(inner([] {}));
    }
    sym_->branch_update(branches);
  }

  Symbols* sym_;
};

std::vector<std::string> fresh_names(const Symbols& sym) {
  std::vector<std::string> names;
  for (const auto& [name, load] : sym.loads)
    if (load == Load::undefined) names.push_back(name);
  return names;
}

void analyze_children(Body& body, const Symbols& sym);

// Analyses the frame made of `body` (after `declare` has run on it) and every frame inside.
template <class Declare>
std::vector<std::string> analyze_frame(Body& body, const Symbols* parent, Declare&& declare) {
  Symbols sym;
  sym.parent = parent;
  FrameVisitor visitor(sym);
  declare(sym, visitor);
  visitor.stmts(body);
  analyze_children(body, sym);
  return fresh_names(sym);
}

// The frames opened by statements of a frame whose symbols are `sym` (if bodies belong to it).
void analyze_children(Body& body, const Symbols& sym) {
  for (StmtPtr& s : body) {
    switch (s->kind) {
      case Stmt::Kind::if_:
        for (Body& b : s->bodies) analyze_children(b, sym);
        break;
      case Stmt::Kind::for_: {
        const Target& t = s->target;
        s->fresh[0] = analyze_frame(s->bodies[0], &sym, [&](Symbols& f, FrameVisitor&) {
          for (const std::string& n : t.names) f.declare_parameter(n);
          f.declare_parameter("loop");
        });
        if (s->bodies.size() > 1)
          s->fresh[1] = analyze_frame(s->bodies[1], &sym, [](Symbols&, FrameVisitor&) {});
        break;
      }
      case Stmt::Kind::macro:
        s->fresh[0] = analyze_frame(s->bodies[0], &sym, [&](Symbols& f, FrameVisitor& v) {
          for (const auto& p : s->params) f.declare_parameter(p.first);
          for (const auto& p : s->params) v.expr(p.second.get());
        });
        break;
      case Stmt::Kind::set_block:
        s->fresh[0] = analyze_frame(s->bodies[0], &sym, [](Symbols&, FrameVisitor&) {});
        break;
      default:
        break;
    }
  }
}

}  // namespace

std::vector<std::string> resolve_scopes(Body& body) {
  return analyze_frame(body, nullptr, [](Symbols&, FrameVisitor&) {});
}

}  // namespace orchid::jinja

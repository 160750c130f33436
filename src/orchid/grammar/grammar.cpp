// GrammarBuilder: every combinator becomes a fresh rule, so a symbol is always one element.
#include "orchid/grammar/grammar.h"

namespace orchid::grammar {

ByteSet ByteSet::range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.bits[size_t(b >> 6)] |= uint64_t(1) << (b & 63);
  return s;
}

ByteSet ByteSet::chars(std::string_view chars) {
  ByteSet s;
  for (char c : chars) s = s | of(uint8_t(c));
  return s;
}

ByteSet ByteSet::operator|(const ByteSet& o) const {
  ByteSet s;
  for (size_t i = 0; i < 4; ++i) s.bits[i] = bits[i] | o.bits[i];
  return s;
}

ByteSet ByteSet::operator-(const ByteSet& o) const {
  ByteSet s;
  for (size_t i = 0; i < 4; ++i) s.bits[i] = bits[i] & ~o.bits[i];
  return s;
}

Sym GrammarBuilder::bytes(const ByteSet& s) {
  g_.sets.push_back(s);
  return Sym{false, uint32_t(g_.sets.size() - 1)};
}

Sym GrammarBuilder::lit(std::string_view text) {
  std::vector<Sym> parts;
  for (char c : text) parts.push_back(bytes(ByteSet::of(uint8_t(c))));
  if (parts.size() == 1) return parts[0];
  return seq(parts);
}

Sym GrammarBuilder::seq(const std::vector<Sym>& parts) {
  return rule(add_rule({parts}));
}

Sym GrammarBuilder::alt(const std::vector<Sym>& options) {
  std::vector<std::vector<Sym>> alts;
  for (Sym s : options) alts.push_back({s});
  return rule(add_rule(alts));
}

Sym GrammarBuilder::opt(Sym s) {
  return rule(add_rule({{s}, {}}));
}

Sym GrammarBuilder::empty() {
  return rule(add_rule({{}}));
}

Sym GrammarBuilder::star(Sym s) {
  // r ::= s r | ε (right recursion; the matcher makes the tail call without growing its stack)
  const uint32_t r = declare();
  define(r, {{s, rule(r)}, {}});
  return rule(r);
}

Sym GrammarBuilder::repeat(Sym s, int min, int max) {
  std::vector<Sym> parts(size_t(min), s);
  if (max < 0) {
    parts.push_back(star(s));
  } else if (max > min) {
    // (s (s (s)?)?)? for the optional max - min copies
    Sym tail = opt(s);
    for (int i = min + 1; i < max; ++i) tail = opt(seq({s, tail}));
    parts.push_back(tail);
  }
  if (parts.empty()) return empty();
  if (parts.size() == 1) return parts[0];
  return seq(parts);
}

uint32_t GrammarBuilder::declare() {
  g_.rules.emplace_back();
  return uint32_t(g_.rules.size() - 1);
}

void GrammarBuilder::define(uint32_t id, const std::vector<std::vector<Sym>>& alternatives) {
  for (const auto& a : alternatives) {
    g_.rules[id].push_back(uint32_t(g_.elements.size()));
    for (Sym s : a)
      g_.elements.push_back(
          Element{s.is_rule ? Element::Kind::rule : Element::Kind::bytes, s.index});
    g_.elements.push_back(Element{Element::Kind::end, 0});
  }
}

uint32_t GrammarBuilder::add_rule(const std::vector<std::vector<Sym>>& alternatives) {
  const uint32_t id = declare();
  define(id, alternatives);
  return id;
}

Grammar GrammarBuilder::finish(Sym root) {
  g_.root = root.is_rule ? root.index : add_rule({{root}});
  return std::move(g_);
}

}  // namespace orchid::grammar

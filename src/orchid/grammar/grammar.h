// A context-free grammar over bytes: the form structured output is enforced in. A rule is a
// set of alternatives, each a sequence of symbols; a symbol is a byte set or a rule. The JSON
// schema and tool-call compilers build one with GrammarBuilder; Matcher (matcher.h) runs it.
// No left recursion (the compilers write repetition as right recursion).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace orchid::grammar {

// A set of byte values, 256 bits.
struct ByteSet {
  std::array<uint64_t, 4> bits{};

  static ByteSet of(uint8_t b) { return range(b, b); }
  static ByteSet range(uint8_t lo, uint8_t hi);
  static ByteSet any() { return range(0, 255); }
  // The bytes of `chars`, each one a member.
  static ByteSet chars(std::string_view chars);
  bool has(uint8_t b) const { return bits[b >> 6] >> (b & 63) & 1; }
  ByteSet operator|(const ByteSet& o) const;
  ByteSet operator-(const ByteSet& o) const;  // members of this not in o
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
};

// One element of an alternative as stored: a byte set, a rule reference, or the end marker.
struct Element {
  enum class Kind : uint8_t { bytes, rule, end };
  Kind kind = Kind::end;
  uint32_t index = 0;  // bytes: into Grammar::sets; rule: rule id
};

struct Grammar {
  std::vector<ByteSet> sets;
  // Every alternative's elements laid end to end, each alternative closed by an end element.
  std::vector<Element> elements;
  std::vector<std::vector<uint32_t>> rules;  // rule id → start index of each alternative
  uint32_t root = 0;                         // a rule id
};

// A symbol while building: a byte set or a rule.
struct Sym {
  bool is_rule = false;
  uint32_t index = 0;
};

class GrammarBuilder {
 public:
  Sym bytes(const ByteSet& s);
  Sym lit(std::string_view text);  // the exact bytes
  Sym seq(std::initializer_list<Sym> parts) { return seq(std::vector<Sym>(parts)); }
  Sym seq(const std::vector<Sym>& parts);
  Sym alt(const std::vector<Sym>& options);  // one of them
  Sym opt(Sym s);                           // s or nothing
  Sym star(Sym s);                          // s*, s not matching the empty string
  // s{min,max}; max < 0: unbounded. s must not match the empty string.
  Sym repeat(Sym s, int min, int max);
  Sym empty();  // matches only the empty string

  // A rule referenced before it is defined (recursion): declare, use rule(id), then define.
  uint32_t declare();
  static Sym rule(uint32_t id) { return Sym{true, id}; }
  void define(uint32_t id, const std::vector<std::vector<Sym>>& alternatives);

  // Stored bytes: elements so far (compilers cap a grammar's size with it).
  size_t size() const { return g_.elements.size(); }
  Grammar finish(Sym root);

 private:
  uint32_t add_rule(const std::vector<std::vector<Sym>>& alternatives);
  Grammar g_;
};

}  // namespace orchid::grammar

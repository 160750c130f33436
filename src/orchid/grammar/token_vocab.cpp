// TokenVocab: sorted token bytes, walked with a stack of matcher states per prefix length.
#include "orchid/grammar/token_vocab.h"

#include <algorithm>

#include "orchid/tokenizer/tokenizer.h"

namespace orchid::grammar {

TokenVocab::TokenVocab(const Tokenizer& tok, int64_t n_vocab) : n_vocab_(n_vocab) {
  const int64_t n = std::min<int64_t>(tok.vocab_size(), n_vocab);
  for (int64_t id = 0; id < n; ++id) {
    const auto b = tok.token_bytes(int32_t(id));
    if (!b || b->empty() || tok.is_special(int32_t(id))) continue;
    entries_.push_back(Entry{std::string(*b), int32_t(id), 0});
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.bytes < b.bytes || (a.bytes == b.bytes && a.id < b.id); });
  for (size_t i = 0; i < entries_.size(); ++i) {
    longest_ = std::max(longest_, entries_[i].bytes.size());
    if (i == 0) continue;
    const std::string &a = entries_[i - 1].bytes, &b = entries_[i].bytes;
    const auto [pa, pb] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    entries_[i].shared = uint32_t(pa - a.begin());
  }
}

uint32_t TokenVocab::allowed(Matcher& m, int32_t state, std::vector<uint32_t>& bits,
                             uint32_t max_distance) const {
  bits.assign(words(), 0u);
  // at[j]: the state after the first j bytes of the previous entry, valid for j <= alive; when
  // the previous entry died, it died at byte `alive`, so an entry sharing more is dead too.
  std::vector<int32_t> at(longest_ + 1);
  at[0] = state;
  size_t alive = 0;
  uint32_t farthest = 0;
  for (const Entry& e : entries_) {
    if (e.shared > alive) continue;  // shares the dead prefix
    size_t j = e.shared;
    for (; j < e.bytes.size(); ++j) {
      const int32_t next = m.advance(at[j], uint8_t(e.bytes[j]));
      if (next == Matcher::kDead) break;
      at[j + 1] = next;
    }
    alive = j;
    if (j < e.bytes.size()) continue;
    const uint32_t d = m.distance(at[j]);
    if (d > max_distance) continue;
    bits[size_t(e.id) >> 5] |= 1u << (e.id & 31);
    farthest = std::max(farthest, d);
  }
  return farthest;
}

}  // namespace orchid::grammar

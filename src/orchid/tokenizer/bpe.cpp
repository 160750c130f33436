// BPE tables and merge loop. Words start as one symbol per byte; a pair table maps adjacent
// (left id, right id) to (merge rank, merged id). Short words (the vast majority) merge by
// rescanning a small array; long ones (CJK runs, long punctuation or space runs) use a heap of
// candidate pairs over a linked list, as the tokenizers crate does. Results of words up to
// kMaxCachedWord bytes are cached per tokenizer in sharded, bounded hash tables.
#include "orchid/tokenizer/bpe.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "orchid/tokenizer/byte_level.h"

namespace orchid {
namespace {

constexpr size_t kShortWord = 24;       // symbols: rescan below, heap above
constexpr size_t kMaxCachedWord = 256;  // bytes, like the tokenizers crate
constexpr int64_t kMaxId = int64_t(1) << 24;

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

size_t byte_pair_index(char a, char b) {
  return (size_t(static_cast<uint8_t>(a)) << 8) | static_cast<uint8_t>(b);
}

uint64_t table_size_for(size_t entries) {
  uint64_t size = 16;
  while (size < entries + entries / 2) size <<= 1;
  return size;
}

}  // namespace

void* allocate_huge(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p =
      bytes < kHuge ? std::malloc(std::max<size_t>(bytes, 1)) : std::aligned_alloc(kHuge, rounded);
  if (!p) throw std::bad_alloc();                            // as a std::vector would
  if (bytes >= kHuge) ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
  return p;
}

void HugeFree::operator()(void* p) const {
  std::free(p);
}

uint64_t hash_bytes(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
  }
  return mix(h);
}

// ---- StringIdTable ---------------------------------------------------------------------------

void StringIdTable::reserve(size_t entries, size_t bytes) {
  entries_.reserve(entries);
  arena_.reserve(bytes);
}

void StringIdTable::add(std::string_view s, int32_t id) {
  entries_.push_back(
      {uint32_t(hash_bytes(s) >> 32), id, uint32_t(arena_.size()), uint32_t(s.size())});
  arena_.append(s);
}

void StringIdTable::finish() {
  uint64_t size = table_size_for(entries_.size());
  mask_ = size - 1;
  slots_.assign(size, Slot{0, -1, 0, 0});
  size_ = 0;
  for (const Slot& e : entries_) {
    std::string_view s(arena_.data() + e.offset, e.length);
    for (uint64_t i = hash_bytes(s) & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = e;
        ++size_;
        break;
      }
      if (slot.tag == e.tag && slot.length == e.length &&
          std::string_view(arena_.data() + slot.offset, slot.length) == s) {
        slot = e;  // the later entry wins
        break;
      }
    }
  }
  entries_ = {};
}

std::optional<int32_t> StringIdTable::find(std::string_view s) const {
  if (slots_.empty()) return std::nullopt;
  uint64_t h = hash_bytes(s);
  auto tag = uint32_t(h >> 32);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return std::nullopt;
    if (slot.tag == tag && slot.length == s.size() &&
        std::memcmp(arena_.data() + slot.offset, s.data(), s.size()) == 0)
      return slot.id;
  }
}

void StringIdTable::prefetch(std::string_view s) const {
  if (!slots_.empty()) __builtin_prefetch(&slots_[hash_bytes(s) & mask_]);
}

// ---- Pair table ------------------------------------------------------------------------------

struct BpeModel::PairTable {
  struct Slot {
    uint64_t key;
    uint32_t rank;
    int32_t id;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  HugeArray<Slot> slots;
  uint64_t mask = 0;

  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  explicit PairTable(size_t entries) {
    uint64_t size = table_size_for(entries);
    mask = size - 1;
    slots.assign(size, Slot{kEmpty, 0, 0});
  }
  // A repeated pair keeps its later rank, as a HashMap built from the list would.
  void insert(int32_t a, int32_t b, uint32_t rank, int32_t id) {
    uint64_t k = key(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty || slots[i].key == k) {
        slots[i] = {k, rank, id};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    uint64_t k = key(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.key == k) return &s;
      if (s.key == kEmpty) return nullptr;
    }
  }
};

// ---- Cache -----------------------------------------------------------------------------------

// Word bytes → ids. 16 shards, each a mutex-guarded open-addressing table over two arenas;
// a full shard is cleared (frequent words come straight back).
struct BpeModel::Cache {
  static constexpr size_t kShards = 16;   // h >> 60 picks one
  static constexpr size_t kSlots = 8192;  // per shard, power of two
  static constexpr size_t kMaxEntries = kSlots / 2;
  struct Slot {
    uint32_t tag;  // hash bits 32..63 (never 0 for a used slot)
    uint32_t key_offset, ids_offset;
    uint16_t key_length, ids_length;
  };
  struct Shard {
    std::mutex mu;
    Slot* slots = nullptr;  // kSlots, inside all_slots; fixed, so prefetch() needs no lock
    std::string keys;
    std::vector<int32_t> ids;
    size_t count = 0;
    void clear() {
      std::fill(slots, slots + kSlots, Slot{0, 0, 0, 0, 0});
      keys.clear();
      ids.clear();
      count = 0;
    }
  };
  HugeArray<Slot> all_slots;  // 2 MB: one huge page for all shards
  Shard shards[kShards];

  Cache() {
    all_slots.assign(kShards * kSlots, Slot{0, 0, 0, 0, 0});
    for (size_t i = 0; i < kShards; ++i) {
      shards[i].slots = &all_slots[i * kSlots];
      shards[i].keys.reserve(kMaxEntries * 16);
      shards[i].ids.reserve(kMaxEntries * 4);
    }
  }

  static uint32_t tag(uint64_t h) { return std::max<uint32_t>(uint32_t(h >> 32), 1); }
  Shard& shard(uint64_t h) { return shards[h >> 60]; }  // the slot index uses the low bits
  void prefetch(uint64_t h) { __builtin_prefetch(&shard(h).slots[h & (kSlots - 1)]); }

  bool lookup(uint64_t h, std::string_view word, std::vector<int32_t>& out) {
    Shard& s = shard(h);
    const uint32_t t = tag(h);
    std::lock_guard lock(s.mu);
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& slot = s.slots[i];
      if (slot.tag == 0) return false;
      if (slot.tag == t && slot.key_length == word.size() &&
          std::memcmp(s.keys.data() + slot.key_offset, word.data(), word.size()) == 0) {
        const int32_t* ids = s.ids.data() + slot.ids_offset;
        out.insert(out.end(), ids, ids + slot.ids_length);
        return true;
      }
    }
  }

  void insert(uint64_t h, std::string_view word, std::span<const int32_t> ids) {
    Shard& s = shard(h);
    const uint32_t t = tag(h);
    std::lock_guard lock(s.mu);
    if (s.count >= kMaxEntries) s.clear();
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      Slot& slot = s.slots[i];
      if (slot.tag == t && slot.key_length == word.size() &&
          std::memcmp(s.keys.data() + slot.key_offset, word.data(), word.size()) == 0)
        return;  // another thread got there first
      if (slot.tag != 0) continue;
      slot = {t, uint32_t(s.keys.size()), uint32_t(s.ids.size()), uint16_t(word.size()),
              uint16_t(ids.size())};
      s.keys.append(word);
      s.ids.insert(s.ids.end(), ids.begin(), ids.end());
      ++s.count;
      return;
    }
  }
};

// ---- Model -----------------------------------------------------------------------------------

BpeModel::BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

Expected<BpeModel> BpeModel::build(BpeSpec spec) {
  BpeModel m;
  // Vocabulary in id order; a repeated id keeps its last string.
  int64_t limit = 0;
  for (const auto& e : spec.vocab) {
    if (e.id < 0 || e.id >= kMaxId)
      return err("model.vocab: token '",
                 std::string_view(spec.vocab_text.data() + e.offset, e.length), "' has id ", e.id,
                 " (expected 0..", kMaxId - 1, ")");
    limit = std::max(limit, e.id + 1);
  }
  std::vector<int64_t> entry_of(size_t(limit), -1);
  for (size_t i = 0; i < spec.vocab.size(); ++i) entry_of[size_t(spec.vocab[i].id)] = int64_t(i);
  m.offsets_.reserve(size_t(limit) + 1);
  m.text_.reserve(spec.vocab_text.size());
  m.present_.assign(size_t(limit), false);
  for (int64_t id = 0; id < limit; ++id) {
    m.offsets_.push_back(uint32_t(m.text_.size()));
    if (entry_of[size_t(id)] < 0) continue;
    const auto& e = spec.vocab[size_t(entry_of[size_t(id)])];
    m.text_.append(spec.vocab_text, e.offset, e.length);
    m.present_[size_t(id)] = true;
  }
  m.offsets_.push_back(uint32_t(m.text_.size()));
  m.vocab_.reserve(spec.vocab.size(), spec.vocab_text.size());
  for (const auto& e : spec.vocab)
    m.vocab_.add(std::string_view(spec.vocab_text.data() + e.offset, e.length), int32_t(e.id));
  m.vocab_.finish();
  m.vocab_count_ = m.vocab_.size();

  for (int b = 0; b < 256; ++b)
    m.byte_id_[size_t(b)] = m.vocab_.find(byte_level::byte_to_text(uint8_t(b))).value_or(-1);

  if (!spec.unk_token.empty()) {
    auto unk = m.vocab_.find(spec.unk_token);
    if (!unk) return err("model.unk_token '", spec.unk_token, "' is not in model.vocab");
    m.unk_id_ = *unk;
  }
  m.fuse_unk_ = spec.fuse_unk;
  m.ignore_merges_ = spec.ignore_merges;
  if (m.ignore_merges_) {
    std::string raw;
    for (int32_t id = 0; id < int32_t(limit); ++id) {
      raw.clear();
      if (m.present_[size_t(id)] && byte_level::text_to_bytes(*m.token_text(id), raw))
        m.raw_vocab_.add(raw, id);
    }
    m.raw_vocab_.finish();
  }

  m.pairs_ = std::make_unique<PairTable>(spec.merges.size());
  // Merge parts and results are looked up in a 4 MB table in file order: prefetching a few
  // merges ahead hides most of the cache misses.
  constexpr size_t kAhead = 8;
  auto part = [&](size_t r, bool second) {
    const auto& e = spec.merges[r];
    return second ? std::string_view(spec.merges_text.data() + e.b_offset, e.b_length)
                  : std::string_view(spec.merges_text.data() + e.a_offset, e.a_length);
  };
  std::string joined;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    if (r + kAhead < spec.merges.size()) {
      m.vocab_.prefetch(part(r + kAhead, false));
      m.vocab_.prefetch(part(r + kAhead, true));
    }
    std::string_view a = part(r, false), b = part(r, true);
    auto ia = m.vocab_.find(a), ib = m.vocab_.find(b);
    if (!ia || !ib)
      return err("model.merges[", r, "] ('", a, "', '", b, "'): '", ia ? b : a,
                 "' is not in model.vocab");
    joined.assign(a).append(b);
    auto iab = m.vocab_.find(joined);
    if (!iab)
      return err("model.merges[", r, "] ('", a, "', '", b, "'): the merged token '", joined,
                 "' is not in model.vocab");
    m.pairs_->insert(*ia, *ib, uint32_t(r), *iab);
  }
  m.merge_count_ = spec.merges.size();
  m.byte_pairs_.assign(65536, BytePair{UINT32_MAX, -1});
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) {
      if (m.byte_id_[size_t(a)] < 0 || m.byte_id_[size_t(b)] < 0) continue;
      if (const PairTable::Slot* p = m.pairs_->find(m.byte_id_[size_t(a)], m.byte_id_[size_t(b)]))
        m.byte_pairs_[byte_pair_index(char(a), char(b))] = {p->rank, p->id};
    }
  m.cache_ = std::make_unique<Cache>();
  return m;
}

std::optional<std::string_view> BpeModel::token_text(int32_t id) const {
  if (id < 0 || id >= id_limit() || !present_[size_t(id)]) return std::nullopt;
  return std::string_view(text_.data() + offsets_[size_t(id)],
                          offsets_[size_t(id) + 1] - offsets_[size_t(id)]);
}

namespace {

// Per-thread scratch, so encoding allocates nothing per word once warm.
struct Scratch {
  std::vector<int32_t> symbols;
  struct Node {
    int32_t id, prev, next;
    bool alive;
  };
  std::vector<Node> nodes;
  struct Candidate {
    uint32_t rank, pos;
    int32_t id;
    // std heaps are max-heaps: "less" means a higher rank, then a later position.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> heap;
  std::vector<uint64_t> hashes;  // encode_words
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  encode_word(word, cacheable(word) ? hash_bytes(word) : 0, out);
}

void BpeModel::encode_words(std::span<const std::string_view> words,
                            std::vector<int32_t>& out) const {
  // Hash every word and start loading its cache slot first: the slot loads then overlap
  // instead of each stalling its own lookup.
  std::vector<uint64_t>& hashes = scratch().hashes;
  hashes.resize(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    hashes[i] = cacheable(words[i]) ? hash_bytes(words[i]) : 0;
    if (hashes[i]) cache_->prefetch(hashes[i]);
  }
  for (size_t i = 0; i < words.size(); ++i) encode_word(words[i], hashes[i], out);
}

bool BpeModel::cacheable(std::string_view word) const {
  // Two-byte words merge with one pair lookup: cheaper than the cache.
  return word.size() > 2 && word.size() <= kMaxCachedWord && !ignore_merges_;
}

void BpeModel::encode_word(std::string_view word, uint64_t h, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = raw_vocab_.find(word)) return out.push_back(*id);
  }
  if (word.size() == 1) {
    int32_t id = byte_id_[static_cast<uint8_t>(word[0])];
    if (id >= 0)
      out.push_back(id);
    else if (unk_id_ >= 0)
      out.push_back(unk_id_);
    return;
  }
  if (h != 0 && cache_->lookup(h, word, out)) return;
  std::vector<int32_t>& symbols = scratch().symbols;
  symbols.clear();
  bool previous_unknown = false, all_known = true;
  for (char c : word) {
    int32_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      symbols.push_back(id);
      previous_unknown = false;
      continue;
    }
    all_known = false;  // dropped, or unk_token (fused with a preceding one if fuse_unk)
    if (unk_id_ >= 0 && !(fuse_unk_ && previous_unknown)) symbols.push_back(unk_id_);
    previous_unknown = true;
  }
  merge(symbols, all_known ? word : std::string_view());
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (h != 0) cache_->insert(h, word, symbols);
}

void BpeModel::merge(std::vector<int32_t>& sym, std::string_view bytes) const {
  size_t n = sym.size();
  if (n < 2) return;
  if (n > kShortWord) return merge_long(sym, bytes);
  uint32_t rank[kShortWord];
  int32_t merged[kShortWord];
  auto look = [&](size_t i) {
    const PairTable::Slot* s = pairs_->find(sym[i], sym[i + 1]);
    rank[i] = s ? s->rank : UINT32_MAX;
    merged[i] = s ? s->id : -1;
  };
  if (!bytes.empty()) {
    for (size_t i = 0; i + 1 < n; ++i) {
      const BytePair& p = byte_pairs_[byte_pair_index(bytes[i], bytes[i + 1])];
      rank[i] = p.rank;
      merged[i] = p.id;
    }
  } else {
    for (size_t i = 0; i + 1 < n; ++i) look(i);
  }
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == UINT32_MAX) break;
    // Pair `best` becomes one symbol; later symbols and pairs shift left by one.
    sym[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (size_t i = best; i + 2 < n; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  sym.resize(n);
}

void BpeModel::merge_long(std::vector<int32_t>& sym, std::string_view bytes) const {
  Scratch& s = scratch();
  const int32_t n = int32_t(sym.size());
  s.nodes.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) s.nodes[size_t(i)] = {sym[size_t(i)], i - 1, i + 1, true};
  s.nodes[size_t(n - 1)].next = -1;
  s.heap.clear();
  auto push = [&](int32_t pos) {
    const Scratch::Node& a = s.nodes[size_t(pos)];
    if (a.next < 0) return;
    if (const PairTable::Slot* p = pairs_->find(a.id, s.nodes[size_t(a.next)].id)) {
      s.heap.push_back({p->rank, uint32_t(pos), p->id});
      std::push_heap(s.heap.begin(), s.heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    uint32_t rank = UINT32_MAX;
    int32_t id = -1;
    if (!bytes.empty()) {
      const BytePair& p = byte_pairs_[byte_pair_index(bytes[size_t(i)], bytes[size_t(i) + 1])];
      rank = p.rank, id = p.id;
    } else if (const PairTable::Slot* p = pairs_->find(sym[size_t(i)], sym[size_t(i) + 1])) {
      rank = p->rank, id = p->id;
    }
    if (rank != UINT32_MAX) s.heap.push_back({rank, uint32_t(i), id});
  }
  std::make_heap(s.heap.begin(), s.heap.end());
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end());
    Scratch::Candidate top = s.heap.back();
    s.heap.pop_back();
    Scratch::Node& left = s.nodes[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Stale entry: the pair at this position has changed since it was queued.
    Scratch::Node& right = s.nodes[size_t(left.next)];
    const PairTable::Slot* now = pairs_->find(left.id, right.id);
    if (!now || now->id != top.id) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) s.nodes[size_t(right.next)].prev = int32_t(top.pos);
    if (left.prev >= 0) push(left.prev);
    push(int32_t(top.pos));
  }
  sym.clear();
  for (int32_t i = 0; i >= 0; i = s.nodes[size_t(i)].next) sym.push_back(s.nodes[size_t(i)].id);
}

}  // namespace orchid

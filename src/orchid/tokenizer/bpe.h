// Byte-level BPE model: vocabulary, ranked merges and the merge loop, as the tokenizers crate's
// BPE runs it (the lowest-ranked adjacent pair merges first, leftmost among equals), plus a
// bounded, thread-safe cache of merged words.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

// The model section of tokenizer.json, with strings kept in two arenas.
struct BpeSpec {
  struct VocabEntry {
    uint32_t offset, length;  // into vocab_text
    int64_t id;
  };
  struct MergeEntry {
    uint32_t a_offset, a_length, b_offset, b_length;  // into merges_text
  };
  std::string vocab_text;
  std::vector<VocabEntry> vocab;
  std::string merges_text;
  std::vector<MergeEntry> merges;
  std::string unk_token;  // "" = none
  bool fuse_unk = false;
  bool ignore_merges = false;
};

// Memory for hash tables that are probed at random: 2 MB aligned and advised for transparent
// huge pages, since with 4 KB pages most probes of a multi-MB table would also miss the TLB.
void* allocate_huge(size_t bytes);
struct HugeFree {
  void operator()(void* p) const;
};

// A fixed-size array of a trivially copyable T on allocate_huge memory.
template <class T>
class HugeArray {
 public:
  void assign(size_t n, const T& value) {
    data_.reset(static_cast<T*>(allocate_huge(n * sizeof(T))));
    size_ = n;
    for (size_t i = 0; i < n; ++i) data_.get()[i] = value;
  }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::unique_ptr<T, HugeFree> data_;
  size_t size_ = 0;
};

// Open-addressing string → id table owning a copy of its strings.
class StringIdTable {
 public:
  void reserve(size_t entries, size_t bytes);
  // Adds s → id (a later add of the same string wins). Call finish() before find().
  void add(std::string_view s, int32_t id);
  void finish();
  std::optional<int32_t> find(std::string_view s) const;
  // Starts loading the slot where find(s) begins (for batched lookups).
  void prefetch(std::string_view s) const;
  size_t size() const { return size_; }  // distinct strings

 private:
  struct Slot {
    uint32_t tag;  // high hash bits: most mismatches never touch the arena
    int32_t id;    // -1 = empty
    uint32_t offset, length;
  };
  std::string arena_;
  std::vector<Slot> entries_;  // in add() order
  HugeArray<Slot> slots_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

uint64_t hash_bytes(std::string_view s);

class BpeModel {
 public:
  // Builds the tables; errors name the first merge whose parts or result are not in the
  // vocabulary, or a negative id.
  static Expected<BpeModel> build(BpeSpec spec);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one word given as raw bytes (the ByteLevel mapping happens here: each
  // byte starts as the symbol of its alphabet character). Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // The same for a run of words (faster: their cache lookups overlap).
  void encode_words(std::span<const std::string_view> words, std::vector<int32_t>& out) const;

  // Vocabulary string (byte-level alphabet) of id, if the vocabulary has that id.
  std::optional<std::string_view> token_text(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view text) const { return vocab_.find(text); }
  // 1 + the largest vocabulary id (0 for an empty vocabulary).
  int64_t id_limit() const { return int64_t(offsets_.size()) - 1; }
  size_t merge_count() const { return merge_count_; }
  size_t vocab_count() const { return vocab_count_; }  // distinct vocabulary strings

 private:
  struct PairTable;
  struct Cache;
  BpeModel();
  bool cacheable(std::string_view word) const;
  // h: hash_bytes(word) if cacheable, else 0.
  void encode_word(std::string_view word, uint64_t h, std::vector<int32_t>& out) const;
  // Merges symbols in place. `bytes` is the word when symbols[i] is still byte i's symbol
  // (no unknown bytes), so first pairs come from byte_pairs_; else empty.
  void merge(std::vector<int32_t>& symbols, std::string_view bytes) const;
  void merge_long(std::vector<int32_t>& symbols, std::string_view bytes) const;

  std::string text_;                    // vocabulary strings, id order
  std::vector<uint32_t> offsets_;       // id → [offsets_[id], offsets_[id+1]) in text_
  std::vector<bool> present_;           // id has a vocabulary string
  StringIdTable vocab_;                 // vocabulary string → id
  std::array<int32_t, 256> byte_id_{};  // byte → id of its alphabet character, -1 if absent
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  StringIdTable raw_vocab_;  // ignore_merges: vocabulary strings decoded to raw bytes → id
  size_t merge_count_ = 0;
  size_t vocab_count_ = 0;
  std::unique_ptr<PairTable> pairs_;
  // Merges of two single-byte symbols by (first byte << 8 | second byte): every word's first
  // lookups, from a 512 KB table instead of the large hash table.
  struct BytePair {
    uint32_t rank;  // UINT32_MAX: no merge
    int32_t id;
  };
  std::vector<BytePair> byte_pairs_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace orchid

// Every QuantMatrix of the Weights is laid out again in one anonymous mapping (codes, scales,
// biases each 64-byte aligned); views of the same bytes (tied embeddings) share one copy.
#include "orchid/backend/cpu/weight_copy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "orchid/util/load_progress.h"
#include "orchid/util/thread_pool.h"

namespace orchid::cpu {
namespace {

struct Piece {
  const void** ptr;  // the pointer in the copied Weights to redirect
  size_t bytes;
};

std::vector<Piece> pieces(Weights& w) {
  std::vector<Piece> out;
  for_each_matrix(w, [&](QuantMatrix& q) {
    if (!q.data || q.rows <= 0) return;
    if (q.format == WeightFormat::dense) {
      out.push_back({&q.data, size_t(q.rows * q.cols) * dtype_size(q.dtype)});
      return;
    }
    if (q.fp8()) {
      const int64_t block_rows = (q.block_row0 + q.rows + q.block_rows - 1) / q.block_rows;
      out.push_back({&q.data, size_t(q.rows * q.cols)});
      out.push_back({&q.scales, size_t(block_rows * ((q.cols + q.group - 1) / q.group)) *
                                    dtype_size(q.dtype)});
      return;
    }
    const size_t sb = size_t(q.rows * (q.cols / q.group)) * dtype_size(q.dtype);
    out.push_back({&q.data, size_t(q.rows * q.cols * q.bits / 8)});
    out.push_back({&q.scales, sb});
    out.push_back({&q.biases, sb});
  });
  return out;
}

// Drops the pages of [p, p + n) that lie wholly inside one of the model's file mappings (read-only
// MAP_PRIVATE: they stay in the page cache; nothing in the process maps them any more).
void release(const void* p, size_t n, const std::vector<std::span<const uint8_t>>& files) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (const auto& f : files) {
    if (b < f.data() || b + n > f.data() + f.size()) continue;
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (uintptr_t(b) + page - 1) / page * page,
                    hi = (uintptr_t(b) + n) / page * page;
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    return;
  }
}

}  // namespace

bool hugepage_copy_enabled() {
  const char* v = std::getenv("ORCHID_CPU_HUGEPAGES");
  return !(v && std::string(v) == "0");
}

std::unique_ptr<WeightCopy> WeightCopy::make(const Model& m, size_t min_bytes) {
  std::unique_ptr<WeightCopy> c(new WeightCopy);
  c->w_ = m.weights;
  std::vector<Piece> ps = pieces(c->w_);
  // One destination per distinct source range.
  std::map<std::pair<const void*, size_t>, size_t> offset_of;
  size_t total = 0;
  for (const Piece& p : ps) {
    auto [it, fresh] = offset_of.try_emplace({*p.ptr, p.bytes}, total);
    if (fresh) total += (p.bytes + 63) / 64 * 64;
  }
  if (total < min_bytes) return nullptr;
  const size_t huge = size_t(2) << 20;
  const size_t bytes = (total + huge - 1) / huge * huge;
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  if (madvise(base, bytes, MADV_HUGEPAGE) != 0) {
    munmap(base, bytes);
    return nullptr;
  }
  c->base_ = base, c->bytes_ = bytes;
  std::vector<std::pair<const void*, std::pair<size_t, size_t>>> copies;  // source, (offset, n)
  for (const auto& [key, off] : offset_of) copies.push_back({key.first, {off, key.second}});
  std::vector<std::span<const uint8_t>> files;
  if (m.checkpoint) files = m.checkpoint->mapped_bytes();
  for (const MappedFile& f : m.gguf) files.push_back(f.bytes());
  LoadStep step("copying weights into 2 MiB pages", total);
  default_pool().parallel_for(int64_t(copies.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const auto& [src, where] = copies[size_t(i)];
      std::memcpy(static_cast<uint8_t*>(base) + where.first, src, where.second);
      release(src, where.second, files);
      load_progress_add(where.second);
    }
  });
  for (const Piece& p : ps) *p.ptr = static_cast<uint8_t*>(base) + offset_of.at({*p.ptr, p.bytes});
  return c;
}

WeightCopy::~WeightCopy() {
  if (base_) munmap(base_, bytes_);
}

}  // namespace orchid::cpu

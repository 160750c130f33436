// The CPU backend's own copy of a model's matrices in memory backed by 2 MiB pages. Weights read
// from the mapped checkpoint sit in 4 KiB pages, where the hardware prefetchers stop at every
// page boundary and each page costs a TLB entry: the decode kernel streamed a 131,072 x 2,048
// matrix at 28-30 GB/s from 4 KiB pages and 32.5-33 from 2 MiB ones (this machine's read
// bandwidth: 32-34). The mapped file's pages are released once copied, so the process holds the
// model once. ORCHID_CPU_HUGEPAGES=0 keeps the mapped weights.
#pragma once

#include <cstddef>
#include <memory>

#include "orchid/model/model.h"

namespace orchid::cpu {

class WeightCopy {
 public:
  // A copy of m's matrices when they total at least min_bytes and 2 MiB pages can be had
  // (anonymous memory with MADV_HUGEPAGE); else null (use m.weights).
  static std::unique_ptr<WeightCopy> make(const Model& m, size_t min_bytes = size_t(256) << 20);
  ~WeightCopy();
  WeightCopy(const WeightCopy&) = delete;
  WeightCopy& operator=(const WeightCopy&) = delete;

  const Weights& weights() const { return w_; }
  size_t bytes() const { return bytes_; }

 private:
  WeightCopy() = default;
  Weights w_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// Whether ORCHID_CPU_HUGEPAGES allows the copy (unset or 1: yes; 0: no).
bool hugepage_copy_enabled();

}  // namespace orchid::cpu

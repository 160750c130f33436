// Scratch<T>: a std::vector whose resize leaves new elements default-initialised (for float:
// uninitialised) — for buffers every element of which is written before it is read, such as
// matmul outputs. Zero-filling those cost ~5 % of a 512-token CPU prefill (memset, and the
// memory traffic of tens of MB a layer).
#pragma once

#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace orchid {

template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T>
using Scratch = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace orchid

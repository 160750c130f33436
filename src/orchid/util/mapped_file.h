// RAII read-only memory map of a whole file: checkpoints are mapped, never copied, so
// tensor views (std::span) can point straight into the page cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "orchid/util/status.h"

namespace orchid {

class MappedFile {
 public:
  // Maps `path` read-only (PROT_READ, MAP_PRIVATE). An empty file maps to 0 bytes with no
  // mapping behind it. Errors name the path and the errno text.
  static Expected<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // The whole file. Valid while this object (or the one it is moved into) lives.
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();

  std::string path_;
  const uint8_t* data_ = nullptr;  // nullptr iff size_ == 0
  size_t size_ = 0;
};

}  // namespace orchid

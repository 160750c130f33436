// Safetensors reading (validated, zero-copy over a memory map), model-directory checkpoints
// (single file or sharded with an index), and a writer used by `orchid synth`.
//
// File layout: [u64 little-endian header length N][N bytes of UTF-8 JSON header][data].
// The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} with
// offsets in bytes relative to the start of the data section, plus an optional
// "__metadata__" object of string -> string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "orchid/model/dtype.h"
#include "orchid/util/mapped_file.h"
#include "orchid/util/status.h"

namespace orchid {

// Safetensors caps the JSON header at 100 MB (same limit as the reference implementation).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Robustness cap on tensor rank (real checkpoints use <= 5); bounds memory on hostile headers.
inline constexpr size_t kMaxSafetensorsRank = 64;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;  // points into the file's bytes (the memory map)
  std::string file;               // the file this tensor came from, as named when parsed

  // Product of shape (1 for a scalar). Parsed tensors are guaranteed not to overflow.
  int64_t numel() const;
  size_t nbytes() const { return data.size(); }
};

// Parses and fully validates a safetensors file held in memory. Tensors come back in header
// order and their `data` spans point into `file_bytes`. `file_name` is used in error messages
// and stored in TensorInfo::file. If `metadata` is non-null it receives "__metadata__".
// Validation: header length sane; header is a JSON object; every entry has exactly dtype,
// shape and data_offsets; shape x dtype size == byte range; ranges lie in the data section,
// do not overlap and leave no holes (as the format requires; zero-length tensors may sit
// anywhere). Never throws and never reads outside `file_bytes`, whatever the input.
Expected<std::vector<TensorInfo>> parse_safetensors(
    std::span<const uint8_t> file_bytes, std::string_view file_name,
    std::map<std::string, std::string>* metadata = nullptr);

// One mapped, validated .safetensors file. Movable; tensor spans stay valid across moves.
class SafetensorsFile {
 public:
  static Expected<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  // The whole mapped file.
  std::span<const uint8_t> bytes() const { return file_.bytes(); }

 private:
  MappedFile file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::unordered_map<std::string_view, size_t> by_name_;  // views into tensors_[i].name
};

// All tensors of a model directory: `model.safetensors.index.json` (+ the shards it names)
// if present, else `model.safetensors`. Move-only; TensorInfo pointers stay valid for the
// Checkpoint's lifetime (including across moves).
class Checkpoint {
 public:
  static constexpr const char* kIndexFile = "model.safetensors.index.json";
  static constexpr const char* kSingleFile = "model.safetensors";

  static Expected<Checkpoint> open(const std::string& dir);

  // O(1); nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  // Every tensor, sorted by name.
  const std::vector<const TensorInfo*>& all() const { return all_; }
  size_t size() const { return all_.size(); }
  // Sum of all tensors' byte sizes.
  uint64_t total_bytes() const { return total_bytes_; }
  const std::string& dir() const { return dir_; }
  size_t shard_count() const { return shards_.size(); }
  // Each shard's mapped bytes.
  std::vector<std::span<const uint8_t>> mapped_bytes() const {
    std::vector<std::span<const uint8_t>> out;
    for (const auto& s : shards_) out.push_back(s->bytes());
    return out;
  }

 private:
  Status add_shard(std::unique_ptr<SafetensorsFile> shard);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;  // heap-held: stable addresses
  std::unordered_map<std::string_view, const TensorInfo*> by_name_;
  std::vector<const TensorInfo*> all_;
  uint64_t total_bytes_ = 0;
};

// ---- Writing ----

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;  // exactly numel x dtype_size bytes
};

// Writes one safetensors file: header (tensors in the given order, padded with spaces to a
// multiple of 8 bytes) then the data, contiguous in the same order. Writes `path + ".tmp"`,
// fsyncs, then renames over `path`, so `path` is never left half-written. An empty metadata
// map omits "__metadata__".
Status write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes a checkpoint directory (created if needed). n_shards == 1: `model.safetensors`
// (and removes a stale index, which would otherwise shadow it). n_shards > 1: tensors split
// in order into byte-balanced, non-empty `model-0000K-of-0000N.safetensors` files plus
// `model.safetensors.index.json` ({"metadata": {"total_size": bytes}, "weight_map": ...}).
// Requires 1 <= n_shards <= max(1, tensors.size()).
Status write_sharded_checkpoint(const std::string& dir, std::span<const TensorToWrite> tensors,
                                int n_shards);

}  // namespace orchid

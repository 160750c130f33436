// Safetensors: a validating SAX pass over the JSON header (nothing is trusted, nothing is
// read outside the given bytes), the Checkpoint directory loader, and the atomic writer.
#include "orchid/model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>
#include <unordered_set>
#include <utility>

namespace orchid {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string errno_text(int e) {
  return std::error_code(e, std::generic_category()).message();
}

// Names and JSON excerpts in messages are clipped (at a UTF-8 boundary) so that a hostile
// 100 MB tensor name cannot turn into a 100 MB error message.
std::string clip(std::string_view s, size_t max = 200) {
  if (s.size() <= max) return std::string(s);
  size_t n = max;
  while (n > 0 && (static_cast<uint8_t>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "...";
}

std::string quote(std::string_view s) {
  return "'" + clip(s) + "'";
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string range_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + "," + std::to_string(end) + "]";
}

std::string known_dtypes() {
  std::string s;
  for (DType t : kAllDTypes) {
    if (!s.empty()) s += ", ";
    s += dtype_name(t);
  }
  return s;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bytes of shape x dtype, or nullopt on overflow or a negative dimension. Every partial
// element count is kept <= INT64_MAX so TensorInfo::numel() cannot overflow either.
std::optional<uint64_t> byte_size(std::span<const int64_t> shape, DType dtype) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(dtype)), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

// One header entry as read, before layout checks.
struct RawTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  size_t n_offsets = 0;
  bool has_dtype = false;
  bool has_shape = false;
  bool has_offsets = false;
};

// nlohmann SAX handler that validates the safetensors schema while the JSON streams by.
// Being a state machine over the fixed 3-level schema, it rejects anything deeper at once,
// so hostile nesting costs no memory. The first failure is kept in `error` and parsing stops.
class HeaderParser {
 public:
  HeaderParser(std::string_view file, uint64_t data_size) : file_(file), data_size_(data_size) {}

  std::string error;
  std::vector<RawTensor> tensors;
  std::map<std::string, std::string> metadata;

  bool done() const { return state_ == State::kDone; }

  // ---- SAX interface ----
  bool null() { return unexpected("null"); }
  bool boolean(bool b) { return unexpected(b ? "true" : "false"); }
  bool binary(json::binary_t& /*unused*/) { return unexpected("binary data"); }

  bool number_unsigned(json::number_unsigned_t v) {
    if (state_ == State::kShapeElem) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail_tensor("shape dimension " + std::to_string(v) + " exceeds int64");
      }
      if (cur().shape.size() >= kMaxSafetensorsRank) {
        return fail_tensor("shape has more than " + std::to_string(kMaxSafetensorsRank) +
                           " dimensions");
      }
      cur().shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::kOffsetsElem) {
      RawTensor& t = cur();
      if (t.n_offsets >= 2) {
        return fail_tensor("data_offsets must be [begin, end], found more than 2 entries");
      }
      (t.n_offsets == 0 ? t.begin : t.end) = v;
      ++t.n_offsets;
      return true;
    }
    return unexpected("the number " + std::to_string(v));
  }

  bool number_integer(json::number_integer_t v) {
    // nlohmann reports non-negative integers as unsigned; only "-0" lands here as >= 0.
    if (v >= 0) return number_unsigned(static_cast<uint64_t>(v));
    if (state_ == State::kShapeElem) {
      return fail_tensor("shape has negative dimension " + std::to_string(v) +
                         " (expected non-negative integers)");
    }
    if (state_ == State::kOffsetsElem) {
      return fail_tensor("data_offsets has negative value " + std::to_string(v) +
                         " (expected non-negative integers)");
    }
    return unexpected("the number " + std::to_string(v));
  }

  bool number_float(json::number_float_t /*v*/, const std::string& text) {
    if (state_ == State::kShapeElem) {
      return fail_tensor("shape has non-integer dimension " + clip(text, 40) +
                         " (expected non-negative integers)");
    }
    if (state_ == State::kOffsetsElem) {
      return fail_tensor("data_offsets has non-integer value " + clip(text, 40) +
                         " (expected non-negative integers)");
    }
    return unexpected("the number " + clip(text, 40));
  }

  bool string(std::string& s) {
    if (state_ == State::kDtype) {
      std::optional<DType> t = parse_dtype(s);
      if (!t) {
        return fail_tensor("unknown dtype " + quote(s) + " (expected one of " + known_dtypes() +
                           ")");
      }
      cur().dtype = *t;
      state_ = State::kTensorKey;
      return true;
    }
    if (state_ == State::kMetaString) {
      metadata[meta_key_] = std::move(s);
      state_ = State::kMetaKey;
      return true;
    }
    return unexpected("the string " + quote(s));
  }

  bool start_object(std::size_t /*unused*/) {
    switch (state_) {
      case State::kValue:
        state_ = State::kTopKey;
        return true;
      case State::kMetaValue:
        state_ = State::kMetaKey;
        return true;
      case State::kTensorValue:
        state_ = State::kTensorKey;
        return true;
      default:
        return unexpected("an object");
    }
  }

  bool key(std::string& k) {
    switch (state_) {
      case State::kTopKey:
        if (!top_keys_.insert(k).second) return fail("duplicate tensor name " + quote(k));
        if (k == "__metadata__") {
          state_ = State::kMetaValue;
        } else {
          tensors.emplace_back();
          tensors.back().name = k;
          state_ = State::kTensorValue;
        }
        return true;
      case State::kMetaKey:
        if (metadata.count(k) != 0) return fail("__metadata__ has duplicate key " + quote(k));
        meta_key_ = std::move(k);
        state_ = State::kMetaString;
        return true;
      case State::kTensorKey: {
        RawTensor& t = cur();
        bool* seen = nullptr;
        State next = State::kDtype;
        if (k == "dtype") {
          seen = &t.has_dtype;
        } else if (k == "shape") {
          seen = &t.has_shape;
          next = State::kShapeValue;
        } else if (k == "data_offsets") {
          seen = &t.has_offsets;
          next = State::kOffsetsValue;
        } else {
          return fail_tensor("unexpected key " + quote(k) +
                             " (expected exactly dtype, shape, data_offsets)");
        }
        if (*seen) return fail_tensor("duplicate key " + quote(k));
        *seen = true;
        state_ = next;
        return true;
      }
      default:
        return fail("internal: unexpected key " + quote(k));
    }
  }

  bool end_object() {
    switch (state_) {
      case State::kTopKey:
        state_ = State::kDone;
        return true;
      case State::kMetaKey:
        state_ = State::kTopKey;
        return true;
      case State::kTensorKey:
        return finish_tensor();
      default:
        return fail("internal: unexpected end of object");
    }
  }

  bool start_array(std::size_t /*unused*/) {
    switch (state_) {
      case State::kShapeValue:
        state_ = State::kShapeElem;
        return true;
      case State::kOffsetsValue:
        state_ = State::kOffsetsElem;
        return true;
      default:
        return unexpected("an array");
    }
  }

  bool end_array() {
    if (state_ == State::kShapeElem) {
      state_ = State::kTensorKey;
      return true;
    }
    if (state_ == State::kOffsetsElem) {
      if (cur().n_offsets != 2) {
        return fail_tensor("data_offsets must be [begin, end], found " +
                           std::to_string(cur().n_offsets) + " entries");
      }
      state_ = State::kTensorKey;
      return true;
    }
    return fail("internal: unexpected end of array");
  }

  bool parse_error(std::size_t /*pos*/, const std::string& /*last_token*/,
                   const json::exception& ex) {
    return fail("header is not valid JSON: " + clip(ex.what(), 300));
  }

 private:
  // Where we are in {"__metadata__": {k: v}, name: {"dtype": s, "shape": [..],
  // "data_offsets": [b, e]}}; kXxxValue = the value after key Xxx is next.
  enum class State {
    kValue,
    kTopKey,
    kMetaValue,
    kMetaKey,
    kMetaString,
    kTensorValue,
    kTensorKey,
    kDtype,
    kShapeValue,
    kShapeElem,
    kOffsetsValue,
    kOffsetsElem,
    kDone,
  };

  RawTensor& cur() { return tensors.back(); }

  bool fail(const std::string& what) {
    if (error.empty()) error = std::string(file_) + ": " + what;
    return false;
  }
  bool fail_tensor(const std::string& what) {
    return fail("tensor " + quote(cur().name) + ": " + what);
  }

  // A JSON value of the wrong kind (`found`) for the current position.
  bool unexpected(const std::string& found) {
    switch (state_) {
      case State::kValue:
        return fail("header must be a JSON object, found " + found);
      case State::kMetaValue:
        return fail("__metadata__ must be an object of string to string, found " + found);
      case State::kMetaString:
        return fail("__metadata__ entry " + quote(meta_key_) + " must be a string, found " + found);
      case State::kTensorValue:
        return fail_tensor("expected an object with dtype, shape, data_offsets, found " + found);
      case State::kDtype:
        return fail_tensor("dtype must be a string, found " + found);
      case State::kShapeValue:
      case State::kShapeElem:
        return fail_tensor("shape must be an array of non-negative integers, found " + found);
      case State::kOffsetsValue:
      case State::kOffsetsElem:
        return fail_tensor("data_offsets must be [begin, end] non-negative integers, found " +
                           found);
      default:
        return fail("unexpected " + found);
    }
  }

  // Per-tensor checks that need the whole entry.
  bool finish_tensor() {
    RawTensor& t = cur();
    if (!t.has_dtype) return fail_tensor("missing 'dtype'");
    if (!t.has_shape) return fail_tensor("missing 'shape'");
    if (!t.has_offsets) return fail_tensor("missing 'data_offsets'");
    if (t.begin > t.end) {
      return fail_tensor("data_offsets " + range_str(t.begin, t.end) + " has begin > end");
    }
    if (t.end > data_size_) {
      return fail_tensor("data_offsets " + range_str(t.begin, t.end) + " end past the " +
                         std::to_string(data_size_) + "-byte data section (file truncated?)");
    }
    std::optional<uint64_t> bytes = byte_size(t.shape, t.dtype);
    std::string what = "shape " + shape_str(t.shape) + " x " + std::string(dtype_name(t.dtype));
    if (!bytes) return fail_tensor(what + " overflows a 64-bit size");
    if (*bytes != t.end - t.begin) {
      return fail_tensor(what + " = " + std::to_string(*bytes) + " bytes but data_offsets span " +
                         std::to_string(t.end - t.begin) + " bytes");
    }
    state_ = State::kTopKey;
    return true;
  }

  std::string_view file_;
  uint64_t data_size_;
  State state_ = State::kValue;
  std::unordered_set<std::string> top_keys_;
  std::string meta_key_;
};

// Safetensors requires the data section to be exactly tiled by the tensors' byte ranges:
// no overlap (aliasing) and no holes (hidden payloads). Zero-length tensors are exempt.
Status check_layout(std::string_view file, const std::vector<RawTensor>& tensors,
                    uint64_t data_size) {
  std::vector<const RawTensor*> order;
  order.reserve(tensors.size());
  for (const RawTensor& t : tensors) {
    if (t.end > t.begin) order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const RawTensor* a, const RawTensor* b) { return a->begin < b->begin; });
  uint64_t covered = 0;  // every byte below this belongs to exactly one tensor
  const RawTensor* prev = nullptr;
  for (const RawTensor* t : order) {
    if (t->begin < covered) {
      return err(file, ": tensor ", quote(t->name), ": data_offsets ", range_str(t->begin, t->end),
                 " overlap tensor ", quote(prev->name), " ", range_str(prev->begin, prev->end));
    }
    if (t->begin > covered) {
      return err(file, ": data section bytes [", covered, ",", t->begin,
                 ") belong to no tensor (hole before tensor ", quote(t->name),
                 "); safetensors forbids holes");
    }
    covered = t->end;
    prev = t;
  }
  if (covered != data_size) {
    return err(file, ": data section is ", data_size, " bytes but tensors cover only the first ",
               covered, " (trailing bytes belong to no tensor)");
  }
  return {};
}

// Writes all of `bytes`, retrying short writes and EINTR. false with errno set on failure.
bool write_all(int fd, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return true;
}

// Writes the concatenation of `pieces` to `path` via `path.tmp` + fsync + rename.
Status write_file_atomic(const std::string& path,
                         std::span<const std::span<const uint8_t>> pieces) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return err("cannot create ", tmp, ": ", errno_text(errno));
  auto fail = [&](const char* what) -> Status {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return err("cannot ", what, " ", tmp, ": ", errno_text(e));
  };
  for (std::span<const uint8_t> p : pieces) {
    if (!write_all(fd, p)) return fail("write");
  }
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return err("cannot close ", tmp, ": ", errno_text(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return err("cannot rename ", tmp, " to ", path, ": ", errno_text(e));
  }
  return {};
}

std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Checks a tensor about to be written; returns its byte size.
Expected<uint64_t> checked_size(const std::string& path, const TensorToWrite& t) {
  for (int64_t d : t.shape) {
    if (d < 0) {
      return err(path, ": tensor ", quote(t.name), ": shape ", shape_str(t.shape),
                 " has a negative dimension");
    }
  }
  std::optional<uint64_t> bytes = byte_size(t.shape, t.dtype);
  if (!bytes) {
    return err(path, ": tensor ", quote(t.name), ": shape ", shape_str(t.shape), " x ",
               dtype_name(t.dtype), " overflows a 64-bit size");
  }
  if (*bytes != t.data.size()) {
    return err(path, ": tensor ", quote(t.name), ": shape ", shape_str(t.shape), " x ",
               dtype_name(t.dtype), " = ", *bytes, " bytes but ", t.data.size(),
               " bytes of data were given");
  }
  return *bytes;
}

// A shard file name must be a plain name inside the checkpoint directory.
bool plain_file_name(std::string_view s) {
  return !s.empty() && s.find('/') == std::string_view::npos &&
         s.find('\\') == std::string_view::npos && s.find("..") == std::string_view::npos &&
         s.find('\0') == std::string_view::npos && s != ".";
}

}  // namespace

int64_t TensorInfo::numel() const {
  uint64_t n = 1;  // unsigned: wraps instead of UB on hand-built, unvalidated shapes
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return static_cast<int64_t>(n);
}

Expected<std::vector<TensorInfo>> parse_safetensors(std::span<const uint8_t> file_bytes,
                                                    std::string_view file_name,
                                                    std::map<std::string, std::string>* metadata) {
  if (file_bytes.size() < 8) {
    return err(file_name, ": file is ", file_bytes.size(),
               " bytes, shorter than the 8-byte header length prefix");
  }
  const uint64_t header_len = read_u64_le(file_bytes.data());
  const uint64_t after_prefix = file_bytes.size() - 8;
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return err(file_name, ": header length ", header_len, " exceeds the ",
               kMaxSafetensorsHeaderBytes, "-byte limit");
  }
  if (header_len > after_prefix) {
    return err(file_name, ": header length ", header_len, " runs past end of file (only ",
               after_prefix, " bytes follow the 8-byte prefix)");
  }
  const uint8_t* header = file_bytes.data() + 8;
  const uint64_t data_size = after_prefix - header_len;

  HeaderParser parser(file_name, data_size);
  bool ok = false;
  try {
    ok = json::sax_parse(header, header + header_len, &parser);
  } catch (const std::exception& e) {  // e.g. std::bad_alloc; the parser itself reports errors
    return err(file_name, ": cannot parse header: ", clip(e.what(), 300));
  }
  if (!parser.error.empty()) return Error{std::move(parser.error)};
  if (!ok || !parser.done()) return err(file_name, ": header is not valid JSON");

  ORCHID_TRY(check_layout(file_name, parser.tensors, data_size));

  std::span<const uint8_t> data = file_bytes.subspan(8 + header_len);
  std::vector<TensorInfo> out;
  out.reserve(parser.tensors.size());
  for (RawTensor& t : parser.tensors) {
    TensorInfo info;
    info.name = std::move(t.name);
    info.dtype = t.dtype;
    info.shape = std::move(t.shape);
    info.data = data.subspan(t.begin, t.end - t.begin);
    info.file = std::string(file_name);
    out.push_back(std::move(info));
  }
  if (metadata != nullptr) *metadata = std::move(parser.metadata);
  return out;
}

// ---- SafetensorsFile ----

Expected<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  Expected<MappedFile> mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  SafetensorsFile f;
  f.file_ = std::move(*mapped);
  Expected<std::vector<TensorInfo>> tensors =
      parse_safetensors(f.file_.bytes(), path, &f.metadata_);
  if (!tensors) return tensors.error();
  f.tensors_ = std::move(*tensors);
  f.by_name_.reserve(f.tensors_.size());
  // The map's keys view the names inside tensors_' heap buffer, which survives moves.
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.by_name_.emplace(f.tensors_[i].name, i);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

// ---- Checkpoint ----

Status Checkpoint::add_shard(std::unique_ptr<SafetensorsFile> shard) {
  for (const TensorInfo& t : shard->tensors()) {
    auto [it, inserted] = by_name_.emplace(t.name, &t);
    if (!inserted) {
      return err(dir_, ": tensor ", quote(t.name), " appears in two shards: ", it->second->file,
                 " and ", t.file);
    }
    all_.push_back(&t);
    total_bytes_ += t.nbytes();
  }
  shards_.push_back(std::move(shard));
  return {};
}

Expected<Checkpoint> Checkpoint::open(const std::string& dir) {
  Checkpoint ck;
  ck.dir_ = dir;
  const fs::path base(dir);
  const std::string index_path = (base / kIndexFile).string();
  const std::string single_path = (base / kSingleFile).string();
  std::error_code ec;

  if (fs::exists(index_path, ec)) {
    Expected<MappedFile> mapped = MappedFile::open(index_path);
    if (!mapped) return mapped.error();
    std::span<const uint8_t> bytes = mapped->bytes();

    // nlohmann keeps the last of duplicate keys silently; a callback catches them instead,
    // since a tensor listed twice with different shards is ambiguous.
    std::vector<std::unordered_set<std::string>> open_objects;
    std::string duplicate;
    auto on_event = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start) {
        open_objects.emplace_back();
      } else if (ev == json::parse_event_t::object_end) {
        if (!open_objects.empty()) open_objects.pop_back();
      } else if (ev == json::parse_event_t::key && !open_objects.empty() && parsed.is_string()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(k).second && duplicate.empty()) duplicate = k;
      }
      return true;
    };
    json index;
    try {
      index = json::parse(bytes.begin(), bytes.end(), on_event);
    } catch (const std::exception& e) {
      return err(index_path, ": not valid JSON: ", clip(e.what(), 300));
    }
    if (!duplicate.empty()) return err(index_path, ": duplicate key ", quote(duplicate));
    if (!index.is_object()) {
      return err(index_path, ": expected a JSON object, found ", index.type_name());
    }
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return err(index_path, ": expected \"weight_map\": {tensor name: shard file name}");
    }
    if (wm->empty()) return err(index_path, ": weight_map is empty");

    // tensor -> shard (sorted for deterministic error reporting), shard -> one of its tensors.
    std::map<std::string, std::string> shard_of;
    std::map<std::string, std::string> shards;
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string()) {
        return err(index_path, ": weight_map entry for tensor ", quote(name),
                   " must be a shard file name string, found ", shard.type_name());
      }
      const auto& s = shard.get_ref<const std::string&>();
      if (!plain_file_name(s)) {
        return err(index_path, ": weight_map maps tensor ", quote(name), " to shard ", quote(s),
                   ", which is not a plain file name inside ", dir);
      }
      shard_of.emplace(name, s);
      shards.emplace(s, name);
    }

    std::map<std::string, std::unique_ptr<SafetensorsFile>> opened;
    for (const auto& [shard, first_tensor] : shards) {
      Expected<SafetensorsFile> f = SafetensorsFile::open((base / shard).string());
      if (!f) {
        return err(index_path, ": shard ", quote(shard), " (listed for tensor ",
                   quote(first_tensor), ") failed to open: ", f.message());
      }
      opened.emplace(shard, std::make_unique<SafetensorsFile>(std::move(*f)));
    }
    for (const auto& [name, shard] : shard_of) {
      if (opened.at(shard)->find(name) == nullptr) {
        return err(index_path, ": weight_map maps tensor ", quote(name), " to shard ", quote(shard),
                   ", but that shard has no tensor ", quote(name));
      }
    }
    for (auto& [shard, file] : opened) ORCHID_TRY(ck.add_shard(std::move(file)));
  } else if (fs::exists(single_path, ec)) {
    Expected<SafetensorsFile> f = SafetensorsFile::open(single_path);
    if (!f) return f.error();
    ORCHID_TRY(ck.add_shard(std::make_unique<SafetensorsFile>(std::move(*f))));
  } else {
    return err("no model.safetensors or model.safetensors.index.json in ", dir);
  }

  std::sort(ck.all_.begin(), ck.all_.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  return ck;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

// ---- Writing ----

Status write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps keys in insertion order, so the header lists tensors as given.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__") return err(path, ": '__metadata__' is not a valid tensor name");
    if (!names.insert(t.name).second) return err(path, ": duplicate tensor name ", quote(t.name));
    Expected<uint64_t> bytes = checked_size(path, t);
    if (!bytes) return bytes.error();
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(dtype_name(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + *bytes});
    header[t.name] = std::move(entry);
    offset += *bytes;
  }

  std::string text;
  try {
    text = header.dump();  // throws on names that are not valid UTF-8
  } catch (const std::exception& e) {
    return err(path, ": cannot encode header: ", clip(e.what(), 300));
  }
  // Pad with spaces so the data section starts 8-byte aligned (as the reference writer does).
  text.append((8 - text.size() % 8) % 8, ' ');

  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  std::vector<std::span<const uint8_t>> pieces;
  pieces.reserve(tensors.size() + 2);
  pieces.emplace_back(prefix, 8);
  pieces.push_back(as_bytes(text));
  for (const TensorToWrite& t : tensors) pieces.push_back(t.data);
  return write_file_atomic(path, pieces);
}

Status write_sharded_checkpoint(const std::string& dir, std::span<const TensorToWrite> tensors,
                                int n_shards) {
  const size_t n = tensors.size();
  if (n_shards < 1 || n_shards > 99999 || (n_shards > 1 && static_cast<size_t>(n_shards) > n)) {
    return err(dir, ": cannot write ", n, " tensors into ", n_shards,
               " shards (need 1 <= shards <= max(1, tensors), at most 99999)");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return err("cannot create directory ", dir, ": ", ec.message());
  const fs::path base(dir);

  if (n_shards == 1) {
    ORCHID_TRY(write_safetensors((base / Checkpoint::kSingleFile).string(), tensors));
    fs::remove(base / Checkpoint::kIndexFile, ec);  // would shadow the single file
    if (ec) {
      return err("cannot remove stale ", (base / Checkpoint::kIndexFile).string(), ": ",
                 ec.message());
    }
    return {};
  }

  // Names must be unique across shards too (each shard file only checks its own).
  std::unordered_set<std::string_view> names;
  uint64_t total = 0;
  for (const TensorToWrite& t : tensors) {
    if (!names.insert(t.name).second) return err(dir, ": duplicate tensor name ", quote(t.name));
    total += t.data.size();
  }

  // Contiguous split: close shard s once it holds its share of the bytes, or when every
  // remaining shard needs exactly one of the remaining tensors (no shard is ever empty).
  std::vector<size_t> starts = {0};
  uint64_t cum = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    cum += tensors[i].data.size();
    const size_t shard = starts.size() - 1;
    const size_t shards_left = static_cast<size_t>(n_shards) - 1 - shard;
    if (shards_left == 0) break;
    const bool full = total > 0 && static_cast<long double>(cum) * n_shards >=
                                       static_cast<long double>(total) * (shard + 1);
    if (full || n - i - 1 == shards_left) starts.push_back(i + 1);
  }
  starts.push_back(n);

  json weight_map = json::object();
  for (int s = 0; s < n_shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
    std::span<const TensorToWrite> part = tensors.subspan(starts[s], starts[s + 1] - starts[s]);
    ORCHID_TRY(write_safetensors((base / name).string(), part));
    for (const TensorToWrite& t : part) weight_map[t.name] = name;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
  std::string text;
  try {
    text = index.dump(2) + "\n";
  } catch (const std::exception& e) {
    return err(dir, ": cannot encode index: ", clip(e.what(), 300));
  }
  std::span<const uint8_t> piece = as_bytes(text);
  return write_file_atomic((base / Checkpoint::kIndexFile).string(), {&piece, 1});
}

}  // namespace orchid

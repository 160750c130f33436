// open_gguf: one GGUF file, or the parts of a split one, as one tensor table.
#include "orchid/model/gguf_split.h"

#include <cstdio>
#include <set>

namespace orchid {
namespace {

// A name ending in -NNNNN-of-NNNNN.gguf: its part (1-based), the count and the name before.
struct SplitName {
  int part = 0, count = 0;  // 0, 0: not a split's name
  std::string prefix;
};
SplitName split_name(const std::string& path) {
  SplitName s;
  constexpr size_t kTail = 20;  // "-00001-of-00003.gguf"
  if (path.size() < kTail) return s;
  const std::string t = path.substr(path.size() - kTail);
  if (t[0] != '-' || t.compare(6, 4, "-of-") != 0 || t.compare(15, 5, ".gguf") != 0) return s;
  int part = 0, count = 0;
  for (int i = 1; i <= 5; ++i) {
    if (t[size_t(i)] < '0' || t[size_t(i)] > '9' || t[size_t(i + 9)] < '0' || t[size_t(i + 9)] > '9')
      return s;
    part = part * 10 + (t[size_t(i)] - '0'), count = count * 10 + (t[size_t(i + 9)] - '0');
  }
  if (part < 1 || part > count) return s;
  s.part = part, s.count = count, s.prefix = path.substr(0, path.size() - kTail);
  return s;
}

// An integer metadata value, or -1.
int64_t meta_int(const GgufFile& f, const char* key) {
  const GgufValue* v = f.get(key);
  return v && v->is_integer() ? v->i : -1;
}

}  // namespace

Expected<GgufParts> open_gguf(const std::string& path) {
  const SplitName name = split_name(path);
  const int n = name.count > 1 ? name.count : 1;
  if (n > 1 && name.part != 1) {
    char first[32];
    std::snprintf(first, sizeof first, "-00001-of-%05d.gguf", n);
    return err(path, ": part ", name.part, " of a split GGUF; give part 1 (", name.prefix, first, ")");
  }
  GgufParts out;
  out.files.reserve(size_t(n));
  std::set<std::string> seen;
  int64_t expected = 0;
  for (int i = 0; i < n; ++i) {
    char tail[32];
    std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", i + 1, n);
    const std::string p = n > 1 ? name.prefix + tail : path;
    auto file = MappedFile::open(p);
    if (!file) return file.error();
    out.files.push_back(std::move(*file));
    auto f = parse_gguf(out.files.back().bytes(), p);
    if (!f) return f.error();
    const int64_t no = meta_int(*f, "split.no"), count = meta_int(*f, "split.count");
    if (n == 1 && count <= 1) {
      out.merged = std::move(*f);
      return out;
    }
    if (count != n || no != i)
      return err(p, ": split.no ", no, " of split.count ", count, " where part ", i, " of ", n,
                 " (0-based) was expected",
                 n == 1 ? "; a split GGUF is opened by its part 1, named …-00001-of-0000N.gguf" : "");
    if (i == 0) {
      expected = meta_int(*f, "split.tensors.count");
      if (expected < 0) return err(p, ": missing metadata 'split.tensors.count'");
      out.merged.version = f->version, out.merged.alignment = f->alignment;
      out.merged.metadata = std::move(f->metadata);
    }
    for (GgufTensor& t : f->tensors) {
      if (!seen.insert(t.name).second) return err(p, ": tensor '", t.name, "' is in two parts");
      out.merged.tensors.push_back(std::move(t));
    }
  }
  if (int64_t(out.merged.tensors.size()) != expected)
    return err(path, ": the ", n, " parts hold ", out.merged.tensors.size(),
               " tensors where split.tensors.count says ", expected);
  return out;
}

}  // namespace orchid

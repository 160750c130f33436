// GGUF models split over files, as llama.cpp's gguf-split writes them (issue 34): NAME-00001-of-
// 0000N.gguf … NAME-0000N-of-0000N.gguf side by side, the first holding the metadata, every part
// holding `split.no` (0-based), `split.count` and `split.tensors.count` and a share of the tensors.
#pragma once

#include <string>
#include <vector>

#include "orchid/model/gguf.h"
#include "orchid/util/mapped_file.h"
#include "orchid/util/status.h"

namespace orchid {

struct GgufParts {
  std::vector<MappedFile> files;  // the mappings the merged tensors point into
  GgufFile merged;                // the first part's metadata, every part's tensors
};

// Maps and parses `path` — and when its name says it is part 1 of N, the other parts beside it —
// and merges their tensor tables. Errors name the file: a part missing, not part 1 given, parts
// that disagree on their number or count, a tensor in two parts, a count of tensors that does not
// match `split.tensors.count`.
Expected<GgufParts> open_gguf(const std::string& path);

}  // namespace orchid

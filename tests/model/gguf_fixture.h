// Test-side GGUF writing, over the product's writer (model/gguf_writer.h, model/gguf_export.h):
// GgufFile values held in memory, so tests can damage or reorder them before file_bytes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "orchid/model/config.h"
#include "orchid/model/gguf.h"
#include "orchid/model/gguf_export.h"
#include "orchid/model/gguf_writer.h"
#include "orchid/model/weights.h"

namespace orchid::gguf_fixture {

inline GgufValue integer(int64_t v, GgufValueType t = GgufValueType::U32) { return gguf_int(v, t); }
inline GgufValue real(double v) { return gguf_real(v); }
inline GgufValue text(std::string s) { return gguf_text(std::move(s)); }

// The converter's `qwen35moe.*` metadata for c (mtp MTP layers; mrope sections padded to 4).
inline void add_metadata(GgufFile& f, const ModelConfig& c, int mtp) {
  for (auto& [k, v] : qwen35moe_metadata(c, mtp)) f.metadata[k] = v;
}

// Adds tensor `name` (dims innermost first) holding bytes; they live in store.
inline void add_bytes(GgufFile& f, std::deque<std::vector<uint8_t>>& store, const std::string& name,
                      std::vector<int64_t> dims, uint32_t type, std::vector<uint8_t> bytes) {
  store.push_back(std::move(bytes));
  GgufTensor t;
  t.name = name, t.type = type, t.dims = std::move(dims);
  t.data = store.back(), t.nbytes = store.back().size();
  f.tensors.push_back(std::move(t));
}

// Adds fp32 tensor `name` (dims innermost first) holding v; its bytes live in store.
inline void add_f32(GgufFile& f, std::deque<std::vector<uint8_t>>& store, const std::string& name,
                    std::vector<int64_t> dims, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  add_bytes(f, store, name, std::move(dims), uint32_t(GgmlType::F32), std::move(b));
}

// v encoded as `type` (Q8_0 / Q4_0 as ggml's reference quantizers do: encode_ggml_row), rows of
// dims[0].
inline void add_quantized(GgufFile& f, std::deque<std::vector<uint8_t>>& store, const std::string& name,
                          std::vector<int64_t> dims, const std::vector<float>& v, GgmlType type) {
  const int64_t cols = dims[0], rows = int64_t(v.size()) / cols;
  const uint64_t rb = *ggml_row_bytes(uint32_t(type), cols);
  std::vector<uint8_t> b(size_t(rb) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) encode_ggml_row(uint32_t(type), v.data() + r * cols, cols, b.data() + r * rb);
  add_bytes(f, store, name, std::move(dims), uint32_t(type), std::move(b));
}

// m's values, [rows, cols] row-major.
inline std::vector<float> values(const QuantMatrix& m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) m.dequant_row(r, v.data() + r * m.cols);
  return v;
}

// w as the converter's tensors (qwen35moe_tensors: matrices in `matrices`, the rest fp32).
inline void add_weights(GgufFile& f, std::deque<std::vector<uint8_t>>& store, const ModelConfig& c,
                        const Weights& w, GgmlType matrices = GgmlType::F32) {
  GgufExportTypes types;
  types.matrices = uint32_t(matrices);
  for (const GgufTensorSource& t : qwen35moe_tensors(c, w, types)) {
    int64_t rows = 1;
    for (size_t i = 1; i < t.dims.size(); ++i) rows *= t.dims[i];
    const uint64_t rb = *ggml_row_bytes(t.type, t.dims[0]);
    std::vector<uint8_t> b(size_t(rb) * size_t(rows));
    std::vector<float> row(size_t(t.dims[0]));
    for (int64_t r = 0; r < rows; ++r) {
      t.row(r, row.data());
      encode_ggml_row(t.type, row.data(), t.dims[0], b.data() + r * rb);
    }
    add_bytes(f, store, t.name, t.dims, t.type, std::move(b));
  }
}

// The converter's tokenizer metadata for tokenizer.json text `json_text` (add_tokenizer_metadata),
// with one padding token after the vocabulary's last id.
inline void add_tokenizer(GgufFile& f, const std::string& json_text, const std::string& pre) {
  const auto j = nlohmann::json::parse(json_text);
  int64_t last = -1;
  for (const auto& [s, id] : j["model"]["vocab"].items()) last = std::max(last, id.get<int64_t>());
  for (const auto& a : j["added_tokens"]) last = std::max(last, a["id"].get<int64_t>());
  std::map<std::string, GgufValue> md;
  const Status s = add_tokenizer_metadata(md, json_text, pre, last + 2);
  EXPECT_TRUE(s.ok()) << s.message();
  for (auto& [k, v] : md) f.metadata[k] = std::move(v);
}

inline std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// f as the bytes of a GGUF v3 file (alignment 32; tensors in order, each aligned).
inline std::vector<uint8_t> file_bytes(const GgufFile& f) {
  std::vector<GgufTensorSource> src;
  for (const GgufTensor& t : f.tensors) {
    GgufTensorSource s;
    s.name = t.name, s.dims = t.dims, s.type = t.type, s.raw = t.data;
    src.push_back(std::move(s));
  }
  std::ostringstream out;
  const Status s = write_gguf(out, f.metadata, src);
  EXPECT_TRUE(s.ok()) << s.message();
  const std::string b = out.str();
  return {b.begin(), b.end()};
}

}  // namespace orchid::gguf_fixture

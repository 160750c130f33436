// GGUF container parsing (model/gguf.h): a file built here byte by byte parses into its
// metadata and tensors; every malformed variant gets an error naming the problem; every prefix
// of a valid file and thousands of byte-flipped copies parse or fail without reading outside
// the bytes (the ASan + UBSan build runs these too).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "orchid/model/gguf.h"

namespace orchid {
namespace {

// Writes GGUF bytes: header, metadata, tensor infos, padding, data.
class Builder {
 public:
  explicit Builder(uint32_t version = 3) {
    u32(0x46554747u);
    u32(version);
    count_at_ = b_.size();
    u64(0);  // tensor count, patched
    u64(0);  // metadata count, patched
  }
  Builder& u8(uint8_t v) { return raw(&v, 1); }
  Builder& u32(uint32_t v) { return raw(&v, 4); }
  Builder& u64(uint64_t v) { return raw(&v, 8); }
  Builder& f32(float v) { return raw(&v, 4); }
  Builder& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  Builder& kv(const std::string& key, uint32_t type) {
    ++n_kv_;
    str(key);
    return u32(type);
  }
  Builder& kv_u32(const std::string& key, uint32_t v) { return kv(key, 4).u32(v); }
  Builder& kv_str(const std::string& key, const std::string& v) { return kv(key, 8).str(v); }
  Builder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  uint64_t offset) {
    ++n_tensors_;
    str(name);
    u32(uint32_t(dims.size()));
    for (uint64_t d : dims) u64(d);
    u32(type);
    return u64(offset);
  }
  // Pads to `align` and appends `data_bytes` of pattern bytes (byte k = k % 251).
  std::vector<uint8_t> finish(uint64_t align, size_t data_bytes) {
    std::memcpy(b_.data() + count_at_, &n_tensors_, 8);
    std::memcpy(b_.data() + count_at_ + 8, &n_kv_, 8);
    data_at_ = (b_.size() + align - 1) / align * align;
    b_.resize(data_at_);
    for (size_t k = 0; k < data_bytes; ++k) b_.push_back(uint8_t(k % 251));
    return b_;
  }
  size_t data_at() const { return data_at_; }

 private:
  Builder& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
    return *this;
  }
  std::vector<uint8_t> b_;
  size_t count_at_ = 0, data_at_ = 0;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
};

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ4_K = 12, kIQ2_XXS = 16;

// A small valid file: metadata of several kinds, an F32 [4, 2] and a Q8_0 [64, 3] tensor.
std::vector<uint8_t> valid_file(size_t* data_at = nullptr) {
  Builder b;
  b.kv_str("general.architecture", "qwen35moe");
  b.kv_u32("qwen35moe.block_count", 40);
  b.kv("qwen35moe.rope.freq_base", 6).f32(1e7f);
  b.kv("tokenizer.ggml.add_bos_token", 7).u8(0);
  b.kv("tokenizer.ggml.tokens", 9).u32(8).u64(3).str("a").str("bc").str("<|im_end|>");
  // An array of arrays of i32: [[1, 2], [3]].
  b.kv("test.nested", 9).u32(9).u64(2).u32(5).u64(2).u32(1).u32(2).u32(5).u64(1).u32(3);
  b.tensor("output_norm.weight", {4, 2}, kF32, 0);
  b.tensor("blk.0.ffn_down.weight", {64, 3}, kQ8_0, 32);  // 6 blocks of 34 bytes
  auto bytes = b.finish(32, 32 + 6 * 34);
  if (data_at) *data_at = b.data_at();
  return bytes;
}

TEST(Gguf, ParsesMetadataAndTensors) {
  size_t data_at = 0;
  const auto bytes = valid_file(&data_at);
  auto f = parse_gguf(bytes, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(f->alignment, 32u);
  EXPECT_EQ(f->data_offset, data_at);
  ASSERT_TRUE(f->get("general.architecture"));
  EXPECT_EQ(f->get("general.architecture")->s, "qwen35moe");
  EXPECT_EQ(f->get("qwen35moe.block_count")->i, 40);
  EXPECT_FLOAT_EQ(float(f->get("qwen35moe.rope.freq_base")->f), 1e7f);
  EXPECT_FALSE(f->get("tokenizer.ggml.add_bos_token")->b);
  const GgufValue* toks = f->get("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks);
  ASSERT_EQ(toks->array.size(), 3u);
  EXPECT_EQ(toks->array[2].s, "<|im_end|>");
  const GgufValue* nested = f->get("test.nested");
  ASSERT_EQ(nested->array.size(), 2u);
  EXPECT_EQ(nested->array[0].array[1].i, 2);
  EXPECT_EQ(nested->array[1].array[0].i, 3);
  EXPECT_EQ(f->get("missing"), nullptr);

  ASSERT_EQ(f->tensors.size(), 2u);
  const GgufTensor* norm = f->find("output_norm.weight");
  ASSERT_TRUE(norm);
  EXPECT_EQ(norm->dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(norm->numel(), 8);
  EXPECT_EQ(norm->data.size(), 32u);
  EXPECT_EQ(norm->data.data(), bytes.data() + data_at);
  const GgufTensor* down = f->find("blk.0.ffn_down.weight");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->type, kQ8_0);
  EXPECT_EQ(down->data.size(), 6u * 34u);
  EXPECT_EQ(down->data.data(), bytes.data() + data_at + 32);
  EXPECT_EQ(down->data[0], uint8_t(32 % 251));
  EXPECT_EQ(ggml_type_name(down->type), "Q8_0");
}

TEST(Gguf, HonoursTheAlignmentKey) {
  Builder b;
  b.kv_u32("general.alignment", 64);
  b.tensor("a", {8}, kF32, 0);
  b.tensor("b", {256}, kQ4_K, 64);
  const auto bytes = b.finish(64, 64 + 144);
  auto f = parse_gguf(bytes, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->alignment, 64u);
  EXPECT_EQ(f->data_offset % 64, 0u);
  EXPECT_EQ(f->find("b")->data.size(), 144u);
}

// Each malformed file fails with a message containing `want`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& want) {
  auto f = parse_gguf(bytes, "bad.gguf");
  ASSERT_FALSE(f.ok()) << "parsed a file that should fail with: " << want;
  EXPECT_NE(f.message().find(want), std::string::npos) << f.message();
  EXPECT_NE(f.message().find("bad.gguf"), std::string::npos) << f.message();
}

TEST(Gguf, RejectsMalformedFilesWithClearErrors) {
  {
    auto bytes = valid_file();
    bytes[0] = 'X';
    expect_error(bytes, "not a GGUF file");
  }
  expect_error(Builder(1).finish(32, 0), "GGUF version 1");
  {
    Builder b;
    b.kv("k", 13).u32(0);
    expect_error(b.finish(32, 0), "unknown value type 13");
  }
  {
    Builder b;
    b.kv("k", 8).u64(1000).u8('x');  // a string longer than the file
    expect_error(b.finish(32, 0), "claims 1000 bytes");
  }
  {
    Builder b;
    b.kv("k", 9).u32(4).u64(uint64_t(1) << 40);  // an array the file cannot hold
    expect_error(b.finish(32, 0), "cannot fit");
  }
  {
    Builder b;
    b.kv("k", 9).u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(9).u64(1).u32(4).u64(1).u32(1);
    expect_error(b.finish(32, 0), "nested deeper");
  }
  {
    Builder b;
    b.kv("k", 7).u8(2);
    expect_error(b.finish(32, 0), "a bool of value 2");
  }
  {
    Builder b;
    b.kv_u32("k", 1).kv_u32("k", 2);
    expect_error(b.finish(32, 0), "appears twice");
  }
  {
    Builder b;
    b.kv_u32("general.alignment", 48);
    expect_error(b.finish(32, 0), "power of two");
  }
  {
    Builder b;
    b.tensor("w", {256}, kIQ2_XXS, 0);
    expect_error(b.finish(32, 66), "tensor w is of type IQ2_XXS");
  }
  {
    Builder b;
    b.tensor("w", {0, 4}, kF32, 0);
    expect_error(b.finish(32, 16), "tensor w: dimension 0");
  }
  {
    Builder b;
    b.tensor("w", {1ull << 40, 1ull << 40}, kF32, 0);
    expect_error(b.finish(32, 16), "tensor w: dimension 1");
  }
  {
    Builder b;
    b.tensor("w", {5}, 0, 0);
    b.tensor("w", {5, 1, 1, 1, 1}, kF32, 32);
    expect_error(b.finish(32, 64), "5 dimensions");
  }
  {
    Builder b;
    b.tensor("w", {48}, kQ8_0, 0);  // 48 is not whole blocks of 32
    expect_error(b.finish(32, 64), "not whole Q8_0 blocks");
  }
  {
    Builder b;
    b.tensor("w", {8}, kF32, 16);
    expect_error(b.finish(32, 64), "not a multiple of the 32-byte alignment");
  }
  {
    Builder b;
    b.tensor("w", {64}, kF32, 0);  // 256 bytes, 100 in the file
    expect_error(b.finish(32, 100), "tensor w: bytes [0, 256)");
  }
  {
    Builder b;
    b.tensor("a", {16}, kF32, 0);
    b.tensor("b", {16}, kF32, 32);  // a spans [0, 64)
    expect_error(b.finish(32, 128), "overlap");
  }
  {
    Builder b;
    b.tensor("a", {8}, kF32, 0);
    b.tensor("a", {8}, kF32, 32);
    expect_error(b.finish(32, 64), "tensor a appears twice");
  }
}

// Every prefix of a valid file fails cleanly (or parses: a prefix that still holds everything).
TEST(Gguf, EveryTruncationFailsCleanly) {
  const auto bytes = valid_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + ptrdiff_t(n));
    auto f = parse_gguf(cut, "cut.gguf");
    EXPECT_FALSE(f.ok()) << "a " << n << "-byte prefix of " << bytes.size() << " parsed";
  }
}

// Byte flips anywhere: the parser never reads outside the bytes, whatever it returns (the
// sanitizer builds check it), and what it accepts is consistent.
TEST(Gguf, FlippedBytesNeverEscapeTheFile) {
  const auto bytes = valid_file();
  std::mt19937_64 rng(std::random_device{}());
  for (int it = 0; it < 4000; ++it) {
    auto m = bytes;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] ^= uint8_t(1u << (rng() % 8));
    auto f = parse_gguf(m, "flip.gguf");
    if (!f.ok()) continue;
    for (const GgufTensor& t : f->tensors) {
      ASSERT_GE(t.data.data(), m.data());
      ASSERT_LE(t.data.data() + t.data.size(), m.data() + m.size());
      ASSERT_EQ(t.data.size(), t.nbytes);
    }
  }
}

}  // namespace
}  // namespace orchid

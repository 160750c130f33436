// Tests for safetensors parsing/writing, Checkpoint loading, MappedFile and DType: round
// trips, one test per malformed input (asserting the message names the problem), and a
// seeded mutation sweep that only has to survive (run under ASan to catch bad reads).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "orchid/model/dtype.h"
#include "orchid/model/safetensors.h"
#include "orchid/util/mapped_file.h"

namespace orchid {
namespace {

namespace fs = std::filesystem;

// A fresh, empty directory under the gtest temp dir, unique per test.
std::string fresh_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path p = fs::path(::testing::TempDir()) /
               ("orchid_st_" + std::to_string(::getpid()) + "_" + info->name());
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// [u64 LE header length][header][data]; `len` overrides the length prefix.
std::vector<uint8_t> make_file(std::string_view header, std::vector<uint8_t> data = {},
                               std::optional<uint64_t> len = std::nullopt) {
  uint64_t n = len.value_or(header.size());
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Expected<std::vector<TensorInfo>> parse(const std::vector<uint8_t>& file) {
  return parse_safetensors(file, "model.safetensors");
}

// Passes when `r` failed and its message contains every one of `parts`.
template <class R>
::testing::AssertionResult fails_with(const R& r, std::initializer_list<std::string_view> parts) {
  if (r.ok()) return ::testing::AssertionFailure() << "expected an error, got success";
  for (std::string_view p : parts) {
    if (r.message().find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << r.message();
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i);
  return v;
}

TensorToWrite tw(std::string name, DType dt, std::vector<int64_t> shape,
                 const std::vector<uint8_t>& data) {
  return TensorToWrite{std::move(name), dt, std::move(shape), data};
}

// ---------------------------------------------------------------------------------------
// DType and MappedFile

TEST(DType, NamesSizesAndParsingRoundTrip) {
  for (DType t : kAllDTypes) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
    EXPECT_GT(dtype_size(t), 0u);
  }
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::U32), "U32");
  EXPECT_EQ(dtype_name(DType::F8_E5M2), "F8_E5M2");
  EXPECT_FALSE(parse_dtype("bf16").has_value());
  EXPECT_FALSE(parse_dtype("FP32").has_value());
  EXPECT_FALSE(parse_dtype("").has_value());
}

TEST(MappedFile, MapsBytesEmptyFilesAndReportsErrors) {
  std::string dir = fresh_dir();
  write_bytes(dir + "/a.bin", {1, 2, 3});
  write_bytes(dir + "/empty.bin", {});
  auto a = MappedFile::open(dir + "/a.bin");
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(std::vector<uint8_t>(a->bytes().begin(), a->bytes().end()),
            (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(a->path(), dir + "/a.bin");
  MappedFile moved = std::move(*a);
  EXPECT_EQ(moved.bytes().size(), 3u);
  EXPECT_EQ(moved.bytes()[2], 3);

  auto e = MappedFile::open(dir + "/empty.bin");
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(e->bytes().size(), 0u);

  EXPECT_TRUE(fails_with(MappedFile::open(dir + "/missing.bin"),
                         {"missing.bin", "No such file or directory"}));
  EXPECT_TRUE(fails_with(MappedFile::open(dir), {dir, "not a regular file"}));
}

// ---------------------------------------------------------------------------------------
// Round trips

TEST(Safetensors, WriteOpenFindRoundTripExactBytes) {
  std::string dir = fresh_dir();
  std::vector<uint8_t> w = iota_bytes(24, 10), b = iota_bytes(8, 100), s = {7}, empty;
  std::vector<TensorToWrite> tensors = {
      tw("x.weight", DType::BF16, {3, 4}, w), tw("x.bias", DType::F32, {2}, b),
      tw("scalar", DType::U8, {}, s), tw("nothing", DType::F16, {0, 5}, empty)};
  std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // Layout: header length is a multiple of 8; data follows in the given order.
  std::vector<uint8_t> raw = read_bytes(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | raw[i];
  EXPECT_EQ(hlen % 8, 0u);
  ASSERT_EQ(raw.size(), 8 + hlen + 24 + 8 + 1);
  std::string header(raw.begin() + 8, raw.begin() + 8 + static_cast<ptrdiff_t>(hlen));
  EXPECT_NE(
      header.find("\"x.weight\":{\"dtype\":\"BF16\",\"shape\":[3,4],\"data_offsets\":[0,24]}"),
      std::string::npos)
      << header;
  EXPECT_LT(header.find("x.weight"), header.find("x.bias"));
  EXPECT_EQ(raw[8 + hlen], 10);

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "x.weight");  // header order

  const TensorInfo* x = f->find("x.weight");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->dtype, DType::BF16);
  EXPECT_EQ(x->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(x->numel(), 12);
  EXPECT_EQ(x->file, path);
  EXPECT_EQ(std::vector<uint8_t>(x->data.begin(), x->data.end()), w);
  const TensorInfo* bias = f->find("x.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(bias->data.begin(), bias->data.end()), b);
  const TensorInfo* sc = f->find("scalar");
  ASSERT_NE(sc, nullptr);
  EXPECT_TRUE(sc->shape.empty());
  EXPECT_EQ(sc->numel(), 1);
  ASSERT_EQ(sc->data.size(), 1u);
  EXPECT_EQ(sc->data[0], 7);
  const TensorInfo* none = f->find("nothing");
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->numel(), 0);
  EXPECT_TRUE(none->data.empty());
  EXPECT_EQ(f->find("missing"), nullptr);

  // The same file as a Checkpoint; moving keeps pointers valid.
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.message();
  Checkpoint moved = std::move(*ck);
  EXPECT_EQ(moved.size(), 4u);
  EXPECT_EQ(moved.total_bytes(), 33u);
  EXPECT_EQ(moved.shard_count(), 1u);
  EXPECT_EQ(moved.dir(), dir);
  ASSERT_NE(moved.find("x.weight"), nullptr);
  EXPECT_EQ(std::vector<uint8_t>(moved.find("x.weight")->data.begin(),
                                 moved.find("x.weight")->data.end()),
            w);
  EXPECT_EQ(moved.all().front()->name, "nothing");  // sorted by name
}

TEST(Safetensors, EmptyMetadataAndNoTensors) {
  std::string dir = fresh_dir();
  ASSERT_TRUE(write_safetensors(dir + "/e.safetensors", {}, {}).ok());
  auto f = SafetensorsFile::open(dir + "/e.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_TRUE(f->metadata().empty());
}

TEST(Safetensors, ShardedRoundTrip) {
  std::string dir = fresh_dir() + "/ckpt";  // created by the writer
  std::vector<std::vector<uint8_t>> data;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 7; ++i) data.push_back(iota_bytes(16 * (i + 1), static_cast<uint8_t>(i)));
  for (int i = 0; i < 7; ++i) {
    tensors.push_back(tw("layers." + std::to_string(i) + ".w", DType::F32, {4, i + 1}, data[i]));
  }
  ASSERT_TRUE(write_sharded_checkpoint(dir, tensors, 3).ok());
  for (const char* shard : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors", "model.safetensors.index.json"}) {
    EXPECT_TRUE(fs::exists(dir + "/" + shard)) << shard;
  }
  std::vector<uint8_t> idx = read_bytes(dir + "/model.safetensors.index.json");
  std::string index(idx.begin(), idx.end());
  EXPECT_NE(index.find("\"total_size\": 448"), std::string::npos) << index;

  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.message();
  EXPECT_EQ(ck->shard_count(), 3u);
  EXPECT_EQ(ck->size(), 7u);
  EXPECT_EQ(ck->total_bytes(), 448u);
  for (int i = 0; i < 7; ++i) {
    const TensorInfo* t = ck->find("layers." + std::to_string(i) + ".w");
    ASSERT_NE(t, nullptr) << i;
    EXPECT_EQ(t->shape, (std::vector<int64_t>{4, i + 1}));
    EXPECT_EQ(std::vector<uint8_t>(t->data.begin(), t->data.end()), data[i]);
  }
  // Rewriting as a single file must drop the index, which would otherwise shadow it.
  ASSERT_TRUE(write_sharded_checkpoint(dir, std::span(tensors).first(2), 1).ok());
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  auto single = Checkpoint::open(dir);
  ASSERT_TRUE(single.ok()) << single.message();
  EXPECT_EQ(single->size(), 2u);
}

TEST(Safetensors, WriterRejectsBadInput) {
  std::string dir = fresh_dir();
  std::vector<uint8_t> d = iota_bytes(10, 0);
  std::vector<TensorToWrite> wrong = {tw("w", DType::BF16, {2, 3}, d)};
  EXPECT_TRUE(fails_with(write_safetensors(dir + "/a.safetensors", wrong),
                         {"'w'", "[2,3] x BF16 = 12 bytes", "10 bytes"}));
  EXPECT_FALSE(fs::exists(dir + "/a.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/a.safetensors.tmp"));
  std::vector<TensorToWrite> dup = {tw("w", DType::U8, {10}, d), tw("w", DType::U8, {10}, d)};
  EXPECT_TRUE(fails_with(write_safetensors(dir + "/b.safetensors", dup), {"duplicate", "'w'"}));
  std::vector<TensorToWrite> neg = {tw("n", DType::U8, {-1}, d)};
  EXPECT_TRUE(fails_with(write_safetensors(dir + "/c.safetensors", neg), {"'n'", "negative"}));
  std::vector<TensorToWrite> one = {tw("w", DType::U8, {10}, d)};
  EXPECT_TRUE(fails_with(write_sharded_checkpoint(dir, one, 2), {"2 shards"}));
  EXPECT_TRUE(fails_with(write_sharded_checkpoint(dir, dup, 2), {"duplicate", "'w'"}));
}

TEST(Safetensors, ZeroLengthTensorsMayShareOffsets) {
  auto r = parse(make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("c":{"dtype":"F32","shape":[2,0],"data_offsets":[2,2]}})",
                           {1, 2, 3, 4}));
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[1].data.size(), 4u);
}

TEST(Safetensors, AcceptsSpacePaddedHeaderAndUnicodeNames) {
  auto r =
      parse(make_file("{\"\xc3\xa9t\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[1],"
                      "\"data_offsets\":[0,1]}}     ",
                      {9}));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ((*r)[0].name, "\xc3\xa9t\xc3\xa9");
}

// ---------------------------------------------------------------------------------------
// Malformed files: each error names the file, the tensor and what was wrong.

TEST(SafetensorsErrors, FileShorterThan8Bytes) {
  EXPECT_TRUE(fails_with(parse({1, 2, 3}), {"model.safetensors", "3 bytes", "8-byte"}));
  EXPECT_TRUE(fails_with(parse({}), {"0 bytes"}));
}

TEST(SafetensorsErrors, HeaderLengthPastEof) {
  EXPECT_TRUE(
      fails_with(parse(make_file("{}", {}, 1000)),
                 {"model.safetensors", "header length 1000", "past end of file", "only 2 bytes"}));
}

TEST(SafetensorsErrors, HeaderLengthHuge) {
  EXPECT_TRUE(fails_with(parse(make_file("{}", {}, 0xFFFFFFFFFFFFFFFFull)),
                         {"header length 18446744073709551615", "100000000-byte limit"}));
  EXPECT_TRUE(fails_with(parse(make_file("{}", {}, 100'000'001)), {"100000000-byte limit"}));
}

TEST(SafetensorsErrors, MalformedJson) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"a":{"dtype":"U8",)")),
                         {"model.safetensors", "not valid JSON"}));
  EXPECT_TRUE(fails_with(parse(make_file("")), {"not valid JSON"}));
  EXPECT_TRUE(fails_with(parse(make_file("{} x")), {"not valid JSON"}));
}

TEST(SafetensorsErrors, InvalidUtf8) {
  EXPECT_TRUE(fails_with(parse(make_file("{\"\xff\xfe\":{}}")), {"not valid JSON", "UTF-8"}));
}

TEST(SafetensorsErrors, JsonNotAnObject) {
  EXPECT_TRUE(fails_with(parse(make_file("[1,2]")), {"header must be a JSON object", "array"}));
  EXPECT_TRUE(fails_with(parse(make_file("42")), {"header must be a JSON object", "42"}));
}

TEST(SafetensorsErrors, TensorEntryNotAnObject) {
  EXPECT_TRUE(
      fails_with(parse(make_file(R"({"t":[1]})")), {"tensor 't'", "expected an object", "array"}));
}

TEST(SafetensorsErrors, UnknownDtype) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"FP32","shape":[1],)"
                                         R"("data_offsets":[0,4]}})",
                                         {0, 0, 0, 0})),
                         {"model.safetensors", "tensor 't'", "unknown dtype 'FP32'", "BF16"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":3,"shape":[],"data_offsets":[0,0]}})")),
                         {"tensor 't'", "dtype must be a string"}));
}

TEST(SafetensorsErrors, NegativeShape) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[2,-3],)"
                                         R"("data_offsets":[0,0]}})")),
                         {"tensor 't'", "negative dimension -3"}));
}

TEST(SafetensorsErrors, NonIntegerShape) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[1.5],)"
                                         R"("data_offsets":[0,0]}})")),
                         {"tensor 't'", "non-integer dimension 1.5"}));
  EXPECT_TRUE(
      fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":["2"],)"
                                 R"("data_offsets":[0,0]}})")),
                 {"tensor 't'", "shape must be an array of non-negative integers", "string '2'"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":4,"data_offsets":[0,0]}})")),
                         {"tensor 't'", "shape must be an array"}));
}

TEST(SafetensorsErrors, ShapeTimesDtypeMismatch) {
  std::vector<uint8_t> data(20);
  EXPECT_TRUE(fails_with(parse(make_file(R"({"x.weight":{"dtype":"BF16","shape":[3,4],)"
                                         R"("data_offsets":[0,20]}})",
                                         data)),
                         {"model.safetensors: tensor 'x.weight': shape [3,4] x BF16 = 24 bytes "
                          "but data_offsets span 20 bytes"}));
}

TEST(SafetensorsErrors, ShapeOverflow) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"F64","shape":[4294967296,4294967296],)"
                                         R"("data_offsets":[0,0]}})")),
                         {"tensor 't'", "overflows"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"F64","shape":[18446744073709551615],)"
                                         R"("data_offsets":[0,0]}})")),
                         {"tensor 't'", "exceeds int64"}));
}

TEST(SafetensorsErrors, DataOffsetsPastEnd) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[8],)"
                                         R"("data_offsets":[0,8]}})",
                                         {1, 2, 3, 4})),
                         {"tensor 't'", "[0,8]", "past the 4-byte data section"}));
}

TEST(SafetensorsErrors, BeginGreaterThanEnd) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[0],)"
                                         R"("data_offsets":[3,1]}})",
                                         {1, 2, 3, 4})),
                         {"tensor 't'", "[3,1]", "begin > end"}));
}

TEST(SafetensorsErrors, BadDataOffsetsShape) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[0],)"
                                         R"("data_offsets":[0]}})")),
                         {"tensor 't'", "found 1 entries"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[0],)"
                                         R"("data_offsets":[0,0,0]}})")),
                         {"tensor 't'", "more than 2"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[0],)"
                                         R"("data_offsets":[-1,0]}})")),
                         {"tensor 't'", "negative value -1"}));
}

TEST(SafetensorsErrors, OverlappingRanges) {
  std::vector<uint8_t> data(8);
  EXPECT_TRUE(
      fails_with(parse(make_file(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                                 data)),
                 {"model.safetensors", "tensor 'b'", "[4,8]", "overlap tensor 'a'", "[0,6]"}));
}

TEST(SafetensorsErrors, HoleInDataSection) {
  std::vector<uint8_t> data(8);
  EXPECT_TRUE(fails_with(parse(make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                         R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                                         data)),
                         {"bytes [2,4)", "hole before tensor 'b'"}));
  EXPECT_TRUE(
      fails_with(parse(make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", data)),
                 {"8 bytes", "cover only the first 2"}));
}

TEST(SafetensorsErrors, DuplicateKey) {
  EXPECT_TRUE(
      fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                                 R"("t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})")),
                 {"model.safetensors", "duplicate tensor name 't'"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","dtype":"U8","shape":[0],)"
                                         R"("data_offsets":[0,0]}})")),
                         {"tensor 't'", "duplicate key 'dtype'"}));
}

TEST(SafetensorsErrors, MissingOrExtraField) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","data_offsets":[0,0]}})")),
                         {"tensor 't'", "missing 'shape'"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"t":{"dtype":"U8","shape":[0],)"
                                         R"("data_offsets":[0,0],"extra":1}})")),
                         {"tensor 't'", "unexpected key 'extra'"}));
}

TEST(SafetensorsErrors, BadMetadata) {
  EXPECT_TRUE(fails_with(parse(make_file(R"({"__metadata__":[1]})")),
                         {"__metadata__ must be an object of string to string", "array"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"__metadata__":{"format":1}})")),
                         {"__metadata__ entry 'format' must be a string", "number 1"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"__metadata__":{"a":{"b":"c"}}})")),
                         {"__metadata__ entry 'a'", "object"}));
  EXPECT_TRUE(fails_with(parse(make_file(R"({"__metadata__":{"a":"1","a":"2"}})")),
                         {"__metadata__", "duplicate key 'a'"}));
  std::map<std::string, std::string> meta;
  auto ok = parse_safetensors(make_file(R"({"__metadata__":{"format":"mlx"}})"), "m", &meta);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(meta.at("format"), "mlx");
}

TEST(SafetensorsErrors, TruncatedFile) {
  std::string dir = fresh_dir();
  std::vector<uint8_t> d = iota_bytes(64, 0);
  std::vector<TensorToWrite> tensors = {tw("a", DType::F32, {16}, d)};
  std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  std::vector<uint8_t> raw = read_bytes(path);
  raw.resize(raw.size() - 10);
  write_bytes(path, raw);
  EXPECT_TRUE(
      fails_with(SafetensorsFile::open(path),
                 {path, "tensor 'a'", "[0,64]", "past the 54-byte data section", "truncated"}));
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {path, "tensor 'a'", "truncated"}));
}

// ---------------------------------------------------------------------------------------
// Checkpoint directories

// Writes shard `name` in `dir` holding U8 tensors `names` of 2 bytes each.
void write_shard(const std::string& dir, const std::string& name,
                 const std::vector<std::string>& names) {
  static const std::vector<uint8_t> two = {1, 2};
  std::vector<TensorToWrite> ts;
  for (const auto& n : names) ts.push_back(tw(n, DType::U8, {2}, two));
  ASSERT_TRUE(write_safetensors(dir + "/" + name, ts).ok());
}

TEST(CheckpointErrors, NoModelFiles) {
  std::string dir = fresh_dir();
  EXPECT_TRUE(fails_with(Checkpoint::open(dir),
                         {"no model.safetensors or model.safetensors.index.json in", dir}));
}

TEST(CheckpointErrors, IndexMalformed) {
  std::string dir = fresh_dir();
  write_text(dir + "/model.safetensors.index.json", "{\"weight_map\": {");
  EXPECT_TRUE(
      fails_with(Checkpoint::open(dir), {"model.safetensors.index.json", "not valid JSON"}));
  write_text(dir + "/model.safetensors.index.json", "[]");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"index.json", "expected a JSON object", "array"}));
  write_text(dir + "/model.safetensors.index.json", "{\"metadata\": {}}");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"index.json", "weight_map"}));
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"index.json", "tensor 'a'", "number"}));
  write_text(dir + "/model.safetensors.index.json",
             R"({"weight_map": {"a": "s.safetensors", "a": "t.safetensors"}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"index.json", "duplicate key 'a'"}));
}

TEST(CheckpointErrors, IndexNamesMissingShard) {
  std::string dir = fresh_dir();
  write_shard(dir, "s1.safetensors", {"a"});
  write_text(dir + "/model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"index.json", "shard 's2.safetensors'",
                                                 "tensor 'b'", "failed to open", "No such file"}));
}

TEST(CheckpointErrors, IndexNamesTensorNotInShard) {
  std::string dir = fresh_dir();
  write_shard(dir, "s1.safetensors", {"a"});
  write_shard(dir, "s2.safetensors", {"b"});
  write_text(dir + "/model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"index.json", "tensor 'b'",
                                                 "shard 's1.safetensors'", "has no tensor 'b'"}));
}

TEST(CheckpointErrors, ShardNameWithDotDot) {
  std::string dir = fresh_dir();
  write_shard(dir, "s1.safetensors", {"a"});
  write_text(dir + "/model.safetensors.index.json",
             R"({"weight_map": {"a": "../s1.safetensors"}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir),
                         {"index.json", "tensor 'a'", "'../s1.safetensors'", "not a plain file"}));
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": "/etc/passwd"}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"'/etc/passwd'", "not a plain file"}));
}

TEST(CheckpointErrors, TensorInTwoShards) {
  std::string dir = fresh_dir();
  write_shard(dir, "s1.safetensors", {"a", "x"});
  write_shard(dir, "s2.safetensors", {"b", "x"});
  write_text(dir + "/model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors",)"
             R"( "x": "s1.safetensors"}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir),
                         {"tensor 'x'", "two shards", "s1.safetensors", "s2.safetensors"}));
}

TEST(CheckpointErrors, BadShardContentNamesShard) {
  std::string dir = fresh_dir();
  write_bytes(dir + "/s1.safetensors", {1, 2, 3});
  write_text(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  EXPECT_TRUE(fails_with(Checkpoint::open(dir), {"shard 's1.safetensors'", "3 bytes"}));
}

// ---------------------------------------------------------------------------------------
// Robustness: seeded random mutations of a valid file must never crash or read out of
// bounds (ASan builds catch the latter); any file that parses must have in-bounds spans.

TEST(Safetensors, RandomMutationsNeverCrash) {
  std::string dir = fresh_dir();
  std::vector<uint8_t> a = iota_bytes(24, 1), b = iota_bytes(8, 50), c = {};
  std::vector<TensorToWrite> tensors = {tw("model.embed.weight", DType::BF16, {3, 4}, a),
                                        tw("norm", DType::F32, {2}, b),
                                        tw("empty", DType::I64, {0, 3}, c)};
  ASSERT_TRUE(write_safetensors(dir + "/base.safetensors", tensors).ok());
  const std::vector<uint8_t> base = read_bytes(dir + "/base.safetensors");
  ASSERT_TRUE(parse(base).ok());

  static const char* const kTokens[] = {"{",           "}",         "[",
                                        "]",           "\"",        ",",
                                        ":",           "-1",        "1e9",
                                        "0.5",         "null",      "\"dtype\"",
                                        "\"BF16\"",    "\"shape\"", "\"data_offsets\"",
                                        "\\u0000",     "\xff",      "18446744073709551616",
                                        "__metadata__"};
  std::mt19937_64 rng(0x5AFE7E45);
  int parsed_ok = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> f = base;
    const int n_mut = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < n_mut; ++m) {
      const size_t pos = f.empty() ? 0 : rng() % f.size();
      switch (rng() % 7) {
        case 0:
          if (!f.empty()) f[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          if (!f.empty()) f[pos] = static_cast<uint8_t>(rng());
          break;
        case 2:
          f.insert(f.begin() + static_cast<ptrdiff_t>(pos), static_cast<uint8_t>(rng()));
          break;
        case 3:
          if (!f.empty()) f.erase(f.begin() + static_cast<ptrdiff_t>(pos));
          break;
        case 4:
          f.resize(pos);
          break;
        case 5: {  // a plausible JSON token
          std::string_view tok = kTokens[rng() % std::size(kTokens)];
          f.insert(f.begin() + static_cast<ptrdiff_t>(pos), tok.begin(), tok.end());
          break;
        }
        default:  // a random header length, often near the real one
          if (f.size() >= 8) {
            uint64_t len = rng() % 3 == 0 ? rng() : (rng() % (f.size() + 16));
            for (int i = 0; i < 8; ++i) f[i] = static_cast<uint8_t>(len >> (8 * i));
          }
          break;
      }
    }
    // Exact-size heap copy so ASan sees any read past the end.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[f.size() + 1]);
    if (!f.empty()) std::memcpy(buf.get(), f.data(), f.size());
    std::span<const uint8_t> bytes(buf.get(), f.size());
    auto r = parse_safetensors(bytes, "mutant");
    if (r.ok()) {
      ++parsed_ok;
      for (const TensorInfo& t : *r) {
        ASSERT_GE(t.data.data(), bytes.data());
        ASSERT_LE(t.data.data() + t.data.size(), bytes.data() + bytes.size());
        ASSERT_EQ(t.data.size(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype));
      }
    } else {
      ASSERT_FALSE(r.message().empty());
      ASSERT_EQ(r.message().rfind("mutant: ", 0), 0u) << r.message();
    }
  }
  // Some mutations (e.g. inside data bytes) leave the file valid; most break it.
  EXPECT_GT(parsed_ok, 0);
  EXPECT_LT(parsed_ok, 2000);
}

}  // namespace
}  // namespace orchid

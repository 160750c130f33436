// Tests for .npy float32 I/O: round trips, byte equality with numpy's own np.save output,
// v1/v2/v3 headers, and rejection (not a crash) of unsupported or corrupt files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "orchid/util/npy.h"

namespace orchid {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& leaf) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 ("orchid_npy_" + std::to_string(::getpid()) + "_" + info->name());
  fs::create_directories(dir);
  return (dir / leaf).string();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

std::vector<uint8_t> floats_le(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A .npy file: magic, version, little-endian header length (2 bytes for v1, else 4), header.
std::vector<uint8_t> npy_file(int major, const std::string& header,
                              const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
  const int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out.push_back(uint8_t(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Exactly what numpy 1.24 writes for
//   np.save(f, np.array([[1.5, -2.25, 3], [0, 1e-3, -7]], np.float32))
// (dict, 21 - len("2") growth spaces and padding so 10 + 118 = 128 bytes, then '\n').
const std::string kNumpyHeader23 =
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n";
const std::vector<float> kValues23 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};

Expected<NpyArray> parse(const std::vector<uint8_t>& bytes) {
  return parse_npy_f32(bytes, "test.npy");
}

TEST(NpyTest, WriteReadRoundTrip) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {}, {0, 4}, {5}, {3, 1, 4, 2}, {1000}};
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(static_cast<size_t>(n));
    for (float& x : data) x = normal(rng);
    const std::string path = temp_path("a.npy");
    ASSERT_TRUE(write_npy_f32(path, data, shape).ok());
    const size_t size = fs::file_size(path);
    EXPECT_EQ((size - data.size() * 4) % 64, 0u) << "header padded to 64 bytes";
    auto a = read_npy_f32(path);
    ASSERT_TRUE(a.ok()) << a.message();
    EXPECT_EQ(a->shape, shape);
    EXPECT_EQ(a->data, data);
  }
}

TEST(NpyTest, WriteMatchesNumpyBytes) {
  const std::string path = temp_path("a.npy");
  const std::vector<int64_t> shape = {2, 3};
  ASSERT_TRUE(write_npy_f32(path, kValues23, shape).ok());
  const std::vector<uint8_t> expected = npy_file(1, kNumpyHeader23, floats_le(kValues23));
  ASSERT_EQ(expected.size(), 152u);
  EXPECT_EQ(read_bytes(path), expected);
}

TEST(NpyTest, WriteRejectsShapeMismatch) {
  const std::vector<int64_t> shape = {4, 2};
  Status s = write_npy_f32(temp_path("a.npy"), kValues23, shape);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has 8 elements"), std::string::npos) << s.message();
}

TEST(NpyTest, ReadsNumpyV1File) {
  auto a = parse(npy_file(1, kNumpyHeader23, floats_le(kValues23)));
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, kValues23);
}

TEST(NpyTest, ReadsV2AndV3Headers) {
  // np.lib.format.write_array(f, np.array([0.5, -1], np.float32), version=(3, 0)) (and 2.0):
  // 4-byte length, 12 + 116 = 128 bytes of header.
  const std::string h =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }" + std::string(58, ' ') + "\n";
  for (int major : {2, 3}) {
    std::vector<uint8_t> f = npy_file(major, h, floats_le({0.5f, -1.0f}));
    ASSERT_EQ(f.size(), 128u + 8u);
    auto a = parse(f);
    ASSERT_TRUE(a.ok()) << a.message();
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(a->data, (std::vector<float>{0.5f, -1.0f}));
  }
}

TEST(NpyTest, ReadsHeaderVariants) {
  // Older numpy (16-byte alignment, no trailing comma), other key order, double quotes, 0-d.
  struct Case {
    std::string header;
    std::vector<int64_t> shape;
  } cases[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}     \n", {3}},
      {"{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<f4\"}\n", {3}},
      {"{ 'shape' : ( 1 , 3 , ) , 'descr':'<f4','fortran_order':False }\n", {1, 3}},
  };
  for (const auto& c : cases) {
    auto a = parse(npy_file(1, c.header, floats_le({1, 2, 3})));
    ASSERT_TRUE(a.ok()) << c.header << ": " << a.message();
    EXPECT_EQ(a->shape, c.shape);
    EXPECT_EQ(a->data, (std::vector<float>{1, 2, 3}));
  }
  auto scalar = parse(
      npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': ()}\n", floats_le({42})));
  ASSERT_TRUE(scalar.ok()) << scalar.message();
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->data, std::vector<float>{42});
}

// Each malformed input fails with a message containing `needle`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto a = parse(bytes);
  ASSERT_FALSE(a.ok()) << "accepted; expected an error about " << needle;
  EXPECT_NE(a.message().find(needle), std::string::npos) << a.message();
  EXPECT_NE(a.message().find("test.npy"), std::string::npos) << a.message();
}

std::string header_with(const std::string& descr, const std::string& order,
                        const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }\n";
}

TEST(NpyTest, RejectsUnsupportedArrays) {
  const auto data = floats_le({1, 2, 3, 4, 5, 6});
  expect_error(npy_file(1, header_with("<f8", "False", "(3,)"), data), "'<f8' is not supported");
  expect_error(npy_file(1, header_with(">f4", "False", "(6,)"), data), "'>f4' is not supported");
  expect_error(npy_file(1, header_with("|u1", "False", "(24,)"), data), "'|u1'");
  expect_error(npy_file(1, header_with("<f4", "True", "(2, 3)"), data), "fortran_order True");
}

TEST(NpyTest, RejectsCorruptFiles) {
  const auto data = floats_le(kValues23);
  const std::vector<uint8_t> good = npy_file(1, kNumpyHeader23, data);
  std::vector<uint8_t> bad_magic = good;
  bad_magic[1] = 'X';
  expect_error(bad_magic, "magic");
  std::vector<uint8_t> bad_version = good;
  bad_version[6] = 4;
  expect_error(bad_version, "version 4.0");
  std::vector<uint8_t> long_header = good;
  long_header[8] = 0xff;
  long_header[9] = 0xff;
  expect_error(long_header, "exceeds the file size");
  expect_error(std::vector<uint8_t>(good.begin(), good.end() - 1), "needs 24");
  std::vector<uint8_t> extra = good;
  extra.push_back(0);
  expect_error(extra, "data is 25 bytes");
  expect_error({}, "magic");
  expect_error(npy_file(1, header_with("<f4", "False", "(2, -3)"), data), "non-negative");
  expect_error(npy_file(1, header_with("<f4", "False", "(2 3)"), data), "malformed");
  expect_error(npy_file(1, header_with("<f4", "Maybe", "(2, 3)"), data), "fortran_order");
  expect_error(npy_file(1, "{'descr': '<f4', 'shape': (6,)}\n", data), "needs 'descr'");
  expect_error(
      npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}\n", data),
      "unexpected or repeated key 'x'");
  expect_error(npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} junk\n", data),
               "trailing characters");
  expect_error(npy_file(1, "{'descr': '<f4", data), "malformed");
  // Dimensions whose product overflows 64 bits, or is merely larger than the file.
  expect_error(npy_file(1, header_with("<f4", "False", "(4294967296, 4294967296, 16)"), data),
               "overflows");
  expect_error(npy_file(1, header_with("<f4", "False", "(4294967296, 4294967296, 0)"), data),
               "needs 0");
  expect_error(npy_file(1, header_with("<f4", "False", "(1000000, 1000000)"), data),
               "needs 4000000000000");
  expect_error(npy_file(1, header_with("<f4", "False", "(99999999999999999999,)"), data),
               "non-negative integers");
}

TEST(NpyTest, ReadReportsMissingFile) {
  auto a = read_npy_f32(temp_path("does_not_exist.npy"));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("cannot open"), std::string::npos) << a.message();
}

TEST(NpyTest, TruncatedAndMutatedFilesNeverCrash) {
  const std::vector<uint8_t> good = npy_file(1, kNumpyHeader23, floats_le(kValues23));
  for (size_t n = 0; n < good.size(); ++n) {
    auto a = parse(std::vector<uint8_t>(good.begin(), good.begin() + std::ptrdiff_t(n)));
    EXPECT_FALSE(a.ok()) << "prefix of " << n << " bytes accepted";
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> f = good;
    const int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) f[rng() % f.size()] = uint8_t(rng());
    auto a = parse(f);
    if (a.ok()) {
      int64_t n = 1;
      for (int64_t d : a->shape) n *= d;
      EXPECT_EQ(size_t(n), a->data.size());
    }
  }
  // And through the file path.
  const std::string path = temp_path("truncated.npy");
  write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + 20));
  EXPECT_FALSE(read_npy_f32(path).ok());
}

}  // namespace
}  // namespace orchid

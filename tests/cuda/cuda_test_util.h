// Helpers for the CUDA tests: skip without a usable GPU, device buffers, random host data,
// bf16 bits on the host.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "orchid/backend/cuda/cuda_backend.h"
#include "orchid/backend/cuda/common/kernels.h"
#include "orchid/util/bf16.h"

namespace orchid::test {

#define ORCHID_REQUIRE_GPU()                                                      \
  do {                                                                            \
    if (Status s_ = cuda_device_usable(); !s_.ok()) GTEST_SKIP() << s_.message(); \
  } while (0)

// Which GEMV runs for a scope: the dp4a kernels on int8 x̂ codes (the stream for every single q4
// matrix of 2,048 columns when `stream`: through shared-memory stages filled by bulk copies when
// `bulk` and the device runs them, else through registers) or the fp32 ones.
struct KernelPath {
  bool dp4a, stream = false, bulk = false;
};
inline std::string path_name(KernelPath k) {
  return k.bulk     ? "dp4a bulk stream"
         : k.stream ? "dp4a register stream"
         : k.dp4a   ? "dp4a"
                    : "fp32";
}
inline void PrintTo(const KernelPath& k, std::ostream* os) {
  *os << path_name(k);
}
struct PathMode {
  KernelPath saved{cuda::dp4a_enabled(), false, cuda::bulk_enabled()};
  int saved_stream_rows = cuda::stream_min_rows();
  explicit PathMode(KernelPath k) {
    cuda::set_dp4a_enabled(k.dp4a);
    cuda::set_bulk_enabled(k.bulk);
    cuda::set_stream_min_rows(k.stream ? 0 : std::numeric_limits<int>::max());
  }
  ~PathMode() {
    cuda::set_dp4a_enabled(saved.dp4a);
    cuda::set_bulk_enabled(saved.bulk);
    cuda::set_stream_min_rows(saved_stream_rows);
  }
};
constexpr KernelPath kAllPaths[] = {{false}, {true}, {true, true}, {true, true, true}};

#define ORCHID_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device copy of a host vector; poisoned (0xFF bytes: NaN for floats) when made empty.
template <class T>
class DevBuf {
 public:
  explicit DevBuf(const std::vector<T>& host) : n_(host.size()) {
    cudaMalloc(reinterpret_cast<void**>(&p_), bytes());
    cudaMemcpy(p_, host.data(), bytes(), cudaMemcpyHostToDevice);
  }
  explicit DevBuf(size_t n) : n_(n) {
    cudaMalloc(reinterpret_cast<void**>(&p_), bytes());
    cudaMemset(p_, 0xff, bytes());
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return std::max<size_t>(n_, 1) * sizeof(T); }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline std::vector<float> random_floats(size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline uint32_t bf16_pair(float lo, float hi) {
  return uint32_t(f32_to_bf16(lo)) | (uint32_t(f32_to_bf16(hi)) << 16);
}

}  // namespace orchid::test

// The bandwidth probe reads with 256-bit loads, eight independent sums per thread, so neither
// the ALU nor one dependency chain bounds it.
#include "orchid/bench/cpu_roofline.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "orchid/util/thread_pool.h"

namespace orchid {

double measure_read_bandwidth_gbs() {
  const size_t n = size_t(1) << 30;
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(64, n)), &std::free);
  if (!buf) return 0;
  std::memset(buf.get(), 1, n);
  const int64_t chunks = int64_t(n / 4096);
  double best = 0;
  volatile int64_t sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    default_pool().parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      __m256i acc[8];
      for (auto& a : acc) a = _mm256_setzero_si256();
      for (const uint8_t* p = buf.get() + c0 * 4096; p < buf.get() + c1 * 4096; p += 256)
        for (int i = 0; i < 8; ++i)
          acc[i] = _mm256_add_epi64(
              acc[i], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * i)));
      for (int i = 1; i < 8; ++i) acc[0] = _mm256_add_epi64(acc[0], acc[i]);
      sink = sink + _mm256_extract_epi64(acc[0], 0);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(n) / s / 1e9);
  }
  return best;
}

int64_t decode_weight_bytes(const Model& m) {
  const ModelConfig& c = m.config;
  const Weights& w = m.weights;
  int64_t all = 0, experts = 0;
  for_each_matrix(w, [&](const QuantMatrix& q) { all += q.data ? q.bytes() : 0; });
  for (const LayerWeights& L : w.layers)
    for (auto* v : {&L.moe.gate, &L.moe.up, &L.moe.down})
      for (const QuantMatrix& q : *v) experts += q.bytes();
  // The routed experts: n_expert_used of n_expert a token; the embedding: one row.
  const int64_t used = c.n_expert > 0 ? experts / c.n_expert * c.n_expert_used : 0;
  return all - experts + used - w.tok_embd.bytes() +
         w.tok_embd.bytes() / std::max<int64_t>(1, w.tok_embd.rows);
}

}  // namespace orchid

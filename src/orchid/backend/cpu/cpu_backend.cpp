// CPU backend: embeds a chunk of tokens, runs the layers (norm → mixer → residual → norm →
// MoE → residual), and produces logits; states, snapshots and chunking live here.
#include "orchid/backend/cpu/cpu_backend.h"

#include <malloc.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <string_view>

#include "orchid/backend/cpu/cpu_layers.h"
#include "orchid/backend/cpu/ops.h"
#include "orchid/backend/cpu/weight_copy.h"

namespace orchid {
namespace cpu {

int64_t CpuSnapshot::bytes() const {
  int64_t n = 0;
  for (const auto& v : conv) n += int64_t(v.size() * sizeof(float));
  for (const auto& v : rec) n += int64_t(v.size() * sizeof(float));
  return n;
}

namespace {

// MemAvailable of /proc/meminfo (free memory plus what the kernel can reclaim), else sysinfo's
// free RAM.
int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  struct sysinfo si {};
  if (sysinfo(&si) == 0) return int64_t(si.freeram) * si.mem_unit;
  return 0;
}

constexpr int64_t kDefaultChunk = 256;  // tokens per prefill chunk: bounds scratch memory

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& m, const CpuOptions& opts)
      : m_(m), c_(m.config), opts_(opts), mm_{opts.fast, opts.isa} {
    if (hugepage_copy_enabled()) copy_ = WeightCopy::make(m);
  }

  std::string name() const override { return "cpu"; }
  int64_t n_vocab() const override { return c_.n_vocab; }

  // The KV caches (fp32, grown as tokens come) may take half the memory available now.
  int64_t max_context(int64_t limit, int states) const override {
    int64_t attn = 0;
    for (LayerKind k : c_.layer_types) attn += k == LayerKind::full_attention;
    const int64_t per_token = attn * 2 * kv_row_size() * 4;
    const int64_t room = available_memory_bytes() / 2 / std::max(states, 1);
    if (per_token <= 0 || room <= 0) return limit;
    return std::max<int64_t>(std::min(limit, room / per_token), 1);
  }

  Expected<std::unique_ptr<BackendState>> new_state(int64_t max_tokens) override {
    if (max_tokens <= 0) return err("state size must be positive, got ", max_tokens);
    auto st = std::make_unique<CpuState>();
    st->capacity_ = max_tokens;
    st->kv_bf16 = opts_.kv == KvPrecision::bf16;
    const size_t L = size_t(c_.n_layer);
    st->conv.resize(L);
    st->rec.resize(L);
    st->k.resize(L);
    st->v.resize(L);
    for (size_t l = 0; l < L; ++l) {
      if (c_.layer_types[l] == LayerKind::linear_attention) {
        st->conv[l].assign(size_t(c_.lin_conv_dim() * (c_.lin_conv_kernel - 1)), 0.f);
        st->rec[l].assign(size_t(c_.lin_n_head_v) * c_.lin_head_dim_k * c_.lin_head_dim_v, 0.f);
      }
    }
    return std::unique_ptr<BackendState>(std::move(st));
  }

  Status forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                 std::vector<float>& logits, int64_t chunk, const CancelCheck& cancel) override {
    auto& st = static_cast<CpuState&>(state);
    const int64_t n = int64_t(tokens.size()), n_past0 = st.n_past_;
    ORCHID_TRY(check_forward_input(tokens, c_.n_vocab, st.n_past_, st.capacity_));
    reserve_kv(st, st.n_past_ + n);
    if (chunk <= 0) chunk = kDefaultChunk;
    const int64_t V = c_.n_vocab;
    logits.assign(size_t(mode == LogitsMode::all ? n * V : V), 0.f);
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
      const int64_t T = std::min(chunk, n - i0);
      const bool last_chunk = i0 + T == n;
      float* dst = mode == LogitsMode::all ? logits.data() + i0 * V : logits.data();
      // Rows needing logits: every row in "all" mode, only the final row otherwise.
      const int64_t first_row = mode == LogitsMode::all ? 0 : (last_chunk ? T - 1 : T);
      if (!run_chunk(st, tokens.subspan(size_t(i0), size_t(T)), first_row, dst, cancel)) {
        st.n_past_ = n_past0;  // the contract: KV rows written since lie past n_past
        return forward_cancelled(i0, n);
      }
    }
    return {};
  }

  std::unique_ptr<StateSnapshot> snapshot(const BackendState& state) override {
    const auto& st = static_cast<const CpuState&>(state);
    auto s = std::make_unique<CpuSnapshot>();
    s->n_past_ = st.n_past_;
    s->rewinds_seen = st.rewinds.size();
    s->conv = st.conv;
    s->rec = st.rec;
    return s;
  }

  Status restore(BackendState& state, const StateSnapshot& snap) override {
    auto& st = static_cast<CpuState&>(state);
    const auto* s = dynamic_cast<const CpuSnapshot*>(&snap);
    if (!s) return err("restore: snapshot was not made by the cpu backend");
    // KV rows below the snapshot's length must not have been rewritten since it was taken:
    // that happens only after a rewind to a shorter length.
    if (s->rewinds_seen > st.rewinds.size())
      return err("restore: snapshot does not belong to this state");
    for (size_t i = s->rewinds_seen; i < st.rewinds.size(); ++i)
      if (st.rewinds[i] < s->n_past_)
        return err("restore: snapshot at ", s->n_past_,
                   " tokens is stale (the state was rewound to ", st.rewinds[i], " tokens since)");
    if (s->n_past_ < st.n_past_) st.rewinds.push_back(s->n_past_);
    st.conv = s->conv;
    st.rec = s->rec;
    st.n_past_ = s->n_past_;
    return {};
  }

 private:
  int64_t kv_row_size() const { return int64_t(c_.n_head_kv) * c_.head_dim; }

  // Grows the KV cache geometrically up to the state's capacity.
  void reserve_kv(CpuState& st, int64_t tokens) {
    for (size_t l = 0; l < st.k.size(); ++l) {
      if (c_.layer_types[l] != LayerKind::full_attention) continue;
      const size_t have = st.k[l].size() / size_t(kv_row_size());
      if (int64_t(have) >= tokens) continue;
      const int64_t rows = std::min(st.capacity_, std::max<int64_t>(tokens, 2 * int64_t(have)));
      st.k[l].resize(size_t(rows * kv_row_size()));
      st.v[l].resize(size_t(rows * kv_row_size()));
    }
  }

  // One chunk of T tokens; logits of rows [first_row, T) go to dst (row-major [., V]). Asks
  // `cancel` before each layer (a layer of a 256-token chunk of a 35B model is a fraction of a
  // second); false: cancelled, with some layers' state updated and n_past unchanged.
  bool run_chunk(CpuState& st, std::span<const int32_t> tokens, int64_t first_row, float* dst,
                 const CancelCheck& cancel) {
    const int64_t T = int64_t(tokens.size()), H = c_.n_embd;
    const Weights& w = copy_ ? copy_->weights() : m_.weights;
    std::vector<float> x(T * H), a(T * H), m(T * H);
    for (int64_t t = 0; t < T; ++t) w.tok_embd.dequant_row(tokens[size_t(t)], x.data() + t * H);
    for (int l = 0; l < c_.n_layer; ++l) {
      if (cancel_requested(cancel)) return false;
      const LayerWeights& L = w.layers[size_t(l)];
      for (int64_t t = 0; t < T; ++t)
        cpu::rms_norm(x.data() + t * H, L.attn_norm.data(), c_.rms_norm_eps, H, a.data() + t * H);
      if (c_.layer_types[size_t(l)] == LayerKind::full_attention)
        attention_forward(mm_, c_, L.attn, st, l, a.data(), T, st.n_past_, m.data());
      else
        delta_net_forward(mm_, c_, L.gdn, st, l, a.data(), T, m.data());
      for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += m[size_t(i)];
      for (int64_t t = 0; t < T; ++t)
        cpu::rms_norm(x.data() + t * H, L.post_attn_norm.data(), c_.rms_norm_eps, H,
                      a.data() + t * H);
      moe_forward(mm_, c_, L.moe, a.data(), T, m.data());
      for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += m[size_t(i)];
    }
    st.n_past_ += T;
    if (first_row >= T) return true;
    const int64_t rows = T - first_row;
    for (int64_t t = first_row; t < T; ++t)
      cpu::rms_norm(x.data() + t * H, w.output_norm.data(), c_.rms_norm_eps, H,
                    a.data() + (t - first_row) * H);
    mm_(w.output, a.data(), rows, dst);
    return true;
  }

  const Model& m_;
  const ModelConfig& c_;
  const CpuOptions opts_;
  const Matmul mm_;
  std::unique_ptr<WeightCopy> copy_;  // the matrices in 2 MiB pages (null: m_.weights)
};

}  // namespace
}  // namespace cpu

Expected<CpuOptions> cpu_options_from_env() {
  CpuOptions o;
  auto isa = cpu::isa_from_env();
  if (!isa) return isa.error();
  o.isa = *isa;
  const char* exact = std::getenv("ORCHID_CPU_EXACT");
  if (exact && std::string_view(exact) != "0" && std::string_view(exact) != "1")
    return err("ORCHID_CPU_EXACT: expected 0 or 1, got '", exact, "'");
  o.fast = !(exact && std::string_view(exact) == "1");
  const char* v = std::getenv("ORCHID_CPU_KV");
  if (!v || std::string_view(v) == "fp32") return o;
  if (std::string_view(v) != "bf16")
    return err("ORCHID_CPU_KV: expected fp32 or bf16, got '", v, "'");
  o.kv = KvPrecision::bf16;
  return o;
}

namespace {

// A forward pass allocates and frees tens of MB of activations a layer. glibc gives blocks over
// its mmap threshold back to the kernel on free and trims the heap's top, so the next layer
// faulted the same memory in again, zero-filled — page faults that a VM makes expensive. Kept
// instead (process-wide, once): blocks up to 32 MiB (glibc's most) come from the heap, and up to
// 512 MiB of free heap top stays mapped. Alternating 512-token prefills on the 8-layer model:
// 149-169 → 153-206 tok/s.
void keep_freed_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  });
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const CpuOptions& opts) {
  keep_freed_memory();
  return std::make_unique<cpu::CpuBackend>(model, opts);
}

}  // namespace orchid

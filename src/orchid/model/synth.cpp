// Random checkpoints (see synth.h). Three steps: plan every tensor of the layout (name, shape,
// distribution, storage), cut the plan into byte-balanced shards, then per shard generate all
// values in parallel (units of a few rows, each row from its own keyed PRNG stream, so output
// bytes do not depend on the thread count) into one of two reused arenas, and write it on a
// background thread while the next shard is generated.
// Measured (16-core host): full-size qwen3.6-35b-a3b mlx4, 19.5 GB in 5 shards, in 32 s with a
// peak RSS of 7.7 GB.
#include "orchid/model/synth.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "orchid/model/quant.h"
#include "orchid/model/safetensors.h"
#include "orchid/util/bf16.h"
#include "orchid/util/fp8.h"

namespace orchid {
namespace {

constexpr int kGroup = 64;               // MLX group size for every quantized matrix
constexpr int kFp8Block = 128;           // FP8 layout: one scale per 128 x 128 block, as Qwen's
constexpr int64_t kUnitElems = 1 << 16;  // elements generated per work unit (about)

// ---- Deterministic random streams ----

uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}

struct SplitMix64 {
  uint64_t state;
  uint64_t next() { return mix64(state += 0x9e3779b97f4a7c15ull); }
};

enum class Dist { normal, uniform };
enum class Store {
  bf16,           // bf16 elements
  f32,            // f32 elements (bf16-exact values)
  bf16_plus_one,  // bf16(1 + w): MLX's pre-shifted zero-centred norm
  quant,          // MLX affine: .weight (U32 codes), .scales, .biases (bf16)
  fp8,            // block-wise FP8: name (F8_E4M3 codes), name + "_scale_inv" (bf16 per block)
};

// One logical tensor of the plan: rows x cols values, stored as one tensor or (quant) three.
struct Item {
  std::string name;            // stored name; for Store::quant the module path (no suffix)
  std::string key;             // HF tensor name: keys the random stream
  std::vector<int64_t> shape;  // stored shape (quant: the unpacked [..., cols])
  int64_t rows = 0, cols = 0;  // the values as a matrix; row r is stream row hf_row(r)
  Dist dist = Dist::normal;
  float a = 0, b = 0;  // normal: a = std; uniform: [a, b)
  Store store = Store::bf16;
  int bits = 0;  // Store::quant: 4 or 8
  // Stored row r is HF row (r / block) * stride + r % block + offset (block == 0: identity);
  // maps MLX's split switch_mlp.{gate,up}_proj onto the halves of HF's fused gate_up_proj.
  int64_t block = 0, stride = 0, offset = 0;

  int64_t hf_row(int64_t r) const { return block ? (r / block) * stride + r % block + offset : r; }
  uint64_t code_bytes() const { return uint64_t(rows) * uint64_t(cols) * uint64_t(bits) / 8; }
  uint64_t scale_bytes() const {
    if (store == Store::fp8) return uint64_t(fp8_scale_rows()) * uint64_t(fp8_scale_cols()) * 2;
    return uint64_t(rows) * uint64_t(cols / kGroup) * 2;
  }
  // FP8 scales: [lead…, ceil(out / 128), ceil(in / 128)] for a stored shape [lead…, out, in].
  int64_t fp8_scale_cols() const { return (cols + kFp8Block - 1) / kFp8Block; }
  int64_t fp8_scale_rows() const {
    const int64_t out = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
    return rows / out * ((out + kFp8Block - 1) / kFp8Block);
  }
  uint64_t bytes() const {
    switch (store) {
      case Store::quant:
        return code_bytes() + 2 * scale_bytes();
      case Store::fp8:
        return code_bytes() + scale_bytes();
      case Store::f32:
        return uint64_t(rows) * uint64_t(cols) * 4;
      default:
        return uint64_t(rows) * uint64_t(cols) * 2;
    }
  }
};

// Fills out[0, cols) with row `hf_row` of the stream `key_seed`, rounded to bf16.
void generate_row(uint64_t key_seed, int64_t hf_row, const Item& it, float* out) {
  SplitMix64 rng{mix64(key_seed + uint64_t(hf_row + 1) * 0xd1b54a32d192ed03ull)};
  if (it.dist == Dist::normal) {
    // Irwin-Hall(4): the sum of four 16-bit uniforms has mean 2 * 65535 and variance
    // 4 * (65536^2 - 1) / 12, so (sum - 131070) * sqrt(3) / 65536 is ~N(0, 1) within 3.46.
    const float scale = it.a * std::sqrt(3.0f) / 65536.0f;
    constexpr uint64_t kLow16 = 0x0000ffff0000ffffull;
    for (int64_t c = 0; c < it.cols; ++c) {
      const uint64_t r = rng.next();
      const uint64_t pairs = (r & kLow16) + ((r >> 16) & kLow16);  // two 17-bit sums
      const int32_t sum = int32_t((pairs & 0xffffffffu) + (pairs >> 32)) - 131070;
      out[c] = round_bf16(float(sum) * scale);
    }
  } else {
    const float width = (it.b - it.a) / 16777216.0f;
    for (int64_t c = 0; c < it.cols; ++c)
      out[c] = round_bf16(it.a + (float(rng.next() >> 40) + 0.5f) * width);
  }
}

// ---- The plan ----

class Planner {
 public:
  Planner(const ModelConfig& cfg, SynthLayout layout)
      : c_(cfg), mlx_(layout == SynthLayout::mlx4), fp8_(layout == SynthLayout::fp8) {}

  // A matrix [.., out, in] (in = shape.back()). `hf` is the HF name (with its suffix, e.g.
  // ".weight", or none for fused experts), `mlx` the MLX module path; `bits` the MLX width.
  void matrix(const std::string& hf, const std::string& mlx, std::vector<int64_t> shape,
              float std_dev, int bits, int64_t block = 0, int64_t stride = 0, int64_t offset = 0) {
    Item it;
    it.key = hf;
    it.cols = shape.back();
    it.rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) it.rows *= shape[i];
    it.shape = std::move(shape);
    it.dist = Dist::normal;
    it.a = std_dev;
    it.block = block, it.stride = stride, it.offset = offset;
    if (fp8_) {
      it.name = hf.find("mlp.experts.") != std::string::npos ? mlx : hf;
      // Qwen's FP8 releases keep the embeddings, lm_head, router, shared-expert gate and the
      // DeltaNet's in_proj_a / in_proj_b in bf16 (modules_to_not_convert).
      bool keep = false;
      for (const char* k : {"embed_tokens", "lm_head", "mlp.gate.", "shared_expert_gate", "in_proj_a",
                            "in_proj_b"})
        keep = keep || hf.find(k) != std::string::npos;
      if (keep) {
        not_converted_.push_back(hf.substr(0, hf.size() - std::string_view(".weight").size()));
      } else {
        it.store = Store::fp8;
        it.bits = 8;
      }
    } else if (!mlx_) {
      it.name = hf;
    } else if (it.cols % kGroup == 0) {
      it.name = mlx;
      it.store = Store::quant;
      it.bits = bits;
      if (bits != 4) quant_overrides_[mlx] = QuantSpec{bits, kGroup};
    } else {
      it.name = mlx + ".weight";  // MLX leaves a matrix whose input dim is not a multiple of 64
    }
    items_.push_back(std::move(it));
  }

  // A vector or small tensor stored unquantized: rows x cols values, stored shape per layout.
  void dense(const std::string& hf, const std::string& mlx, std::vector<int64_t> shape,
             int64_t rows, int64_t cols, Dist dist, float a, float b, Store store) {
    Item it;
    it.key = hf;
    it.name = mlx_ ? mlx : hf;
    it.shape = std::move(shape);
    it.rows = rows, it.cols = cols;
    it.dist = dist, it.a = a, it.b = b;
    it.store = store;
    items_.push_back(std::move(it));
  }

  // Zero-centred RMSNorm weight: raw w in hf, bf16(1 + w) in mlx.
  void zc_norm(const std::string& hf, const std::string& mlx, int64_t n) {
    dense(hf, mlx, {n}, 1, n, Dist::uniform, -0.5f, 0.5f,
          mlx_ ? Store::bf16_plus_one : Store::bf16);
  }

  void build() {
    const int64_t H = c_.n_embd, V = c_.n_vocab, E = c_.n_expert, I = c_.n_ff_exp;
    const int64_t S = c_.n_ff_shexp;
    const float inv_h = 1.0f / std::sqrt(float(H));
    const std::string hp = "model.language_model.", mp = "language_model.model.";
    matrix(hp + "embed_tokens.weight", mp + "embed_tokens", {V, H}, 1.0f, 4);
    for (int l = 0; l < c_.n_layer; ++l) {
      const std::string h = hp + "layers." + std::to_string(l) + ".";
      const std::string m = mp + "layers." + std::to_string(l) + ".";
      zc_norm(h + "input_layernorm.weight", m + "input_layernorm.weight", H);
      zc_norm(h + "post_attention_layernorm.weight", m + "post_attention_layernorm.weight", H);
      if (c_.layer_types[size_t(l)] == LayerKind::full_attention) {
        const int64_t D = c_.head_dim, q_out = int64_t(c_.n_head) * D * 2;
        const int64_t kv_out = int64_t(c_.n_head_kv) * D, o_in = int64_t(c_.n_head) * D;
        for (const char* p : {"q_proj", "k_proj", "v_proj"})
          matrix(h + "self_attn." + p + ".weight", m + "self_attn." + p,
                 {p[0] == 'q' ? q_out : kv_out, H}, inv_h, 4);
        matrix(h + "self_attn.o_proj.weight", m + "self_attn.o_proj", {H, o_in},
               1.0f / std::sqrt(float(o_in)), 4);
        zc_norm(h + "self_attn.q_norm.weight", m + "self_attn.q_norm.weight", D);
        zc_norm(h + "self_attn.k_norm.weight", m + "self_attn.k_norm.weight", D);
      } else {
        const int64_t C = c_.lin_conv_dim(), Vd = c_.lin_value_dim(), Hv = c_.lin_n_head_v;
        const int64_t K = c_.lin_conv_kernel;
        const std::string a = "linear_attn.";
        matrix(h + a + "in_proj_qkv.weight", m + a + "in_proj_qkv", {C, H}, inv_h, 4);
        matrix(h + a + "in_proj_z.weight", m + a + "in_proj_z", {Vd, H}, inv_h, 4);
        matrix(h + a + "in_proj_b.weight", m + a + "in_proj_b", {Hv, H}, inv_h, 4);
        matrix(h + a + "in_proj_a.weight", m + a + "in_proj_a", {Hv, H}, inv_h, 4);
        // Depthwise conv taps: HF [C, 1, K], MLX [C, K, 1]; the same bytes either way.
        dense(h + a + "conv1d.weight", m + a + "conv1d.weight",
              mlx_ ? std::vector<int64_t>{C, K, 1} : std::vector<int64_t>{C, 1, K}, C, K,
              Dist::normal, 0.5f, 0, Store::bf16);
        dense(h + a + "A_log", m + a + "A_log", {Hv}, 1, Hv, Dist::uniform, -1, 1, Store::f32);
        dense(h + a + "dt_bias", m + a + "dt_bias", {Hv}, 1, Hv, Dist::uniform, -1, 1, Store::bf16);
        dense(h + a + "norm.weight", m + a + "norm.weight", {c_.lin_head_dim_v}, 1,
              c_.lin_head_dim_v, Dist::uniform, 0.5f, 1.5f, Store::bf16);
        matrix(h + a + "out_proj.weight", m + a + "out_proj", {H, Vd}, 1.0f / std::sqrt(float(Vd)),
               4);
      }
      matrix(h + "mlp.gate.weight", m + "mlp.gate", {E, H}, 3.0f * inv_h, 8);
      const float inv_i = 1.0f / std::sqrt(float(I)), inv_s = 1.0f / std::sqrt(float(S));
      if (fp8_) {
        // Qwen's FP8 layout: every expert its own gate_proj / up_proj / down_proj, the rows of
        // HF's fused tensors (gate = rows [e·2I, e·2I + I) of gate_up_proj, up the next I).
        const std::string gu = h + "mlp.experts.gate_up_proj", dn = h + "mlp.experts.down_proj";
        for (int64_t e = 0; e < E; ++e) {
          const std::string x = h + "mlp.experts." + std::to_string(e) + ".";
          matrix(gu, x + "gate_proj.weight", {I, H}, inv_h, 8, I, 2 * I, e * 2 * I);
          matrix(gu, x + "up_proj.weight", {I, H}, inv_h, 8, I, 2 * I, e * 2 * I + I);
          matrix(dn, x + "down_proj.weight", {H, I}, inv_i, 8, H, H, e * H);
        }
      } else if (mlx_) {
        // HF's fused gate_up_proj [E, 2I, H] split on dim -2: gate = rows [0, I), up = [I, 2I).
        const std::string gu = h + "mlp.experts.gate_up_proj";
        matrix(gu, m + "mlp.switch_mlp.gate_proj", {E, I, H}, inv_h, 4, I, 2 * I, 0);
        matrix(gu, m + "mlp.switch_mlp.up_proj", {E, I, H}, inv_h, 4, I, 2 * I, I);
        matrix(h + "mlp.experts.down_proj", m + "mlp.switch_mlp.down_proj", {E, H, I}, inv_i, 4);
      } else {
        matrix(h + "mlp.experts.gate_up_proj", "", {E, 2 * I, H}, inv_h, 4);
        matrix(h + "mlp.experts.down_proj", "", {E, H, I}, inv_i, 4);
      }
      const std::string se = "mlp.shared_expert.";
      matrix(h + se + "gate_proj.weight", m + se + "gate_proj", {S, H}, inv_h, 4);
      matrix(h + se + "up_proj.weight", m + se + "up_proj", {S, H}, inv_h, 4);
      matrix(h + se + "down_proj.weight", m + se + "down_proj", {H, S}, inv_s, 4);
      matrix(h + "mlp.shared_expert_gate.weight", m + "mlp.shared_expert_gate", {1, H}, inv_h, 8);
    }
    zc_norm(hp + "norm.weight", mp + "norm.weight", H);
    if (!c_.tie_word_embeddings)
      matrix("lm_head.weight", "language_model.lm_head", {V, H}, 4.0f * inv_h, 4);
  }

  std::vector<Item>& items() { return items_; }
  const std::map<std::string, QuantSpec, std::less<>>& quant_overrides() const {
    return quant_overrides_;
  }
  const std::vector<std::string>& not_converted() const { return not_converted_; }

 private:
  const ModelConfig& c_;
  bool mlx_, fp8_;
  std::vector<Item> items_;
  std::vector<std::string> not_converted_;
  std::map<std::string, QuantSpec, std::less<>> quant_overrides_;
};

Status check_config(const ModelConfig& c) {
  const int64_t dims[] = {c.n_vocab,        c.n_embd,         c.n_layer,         c.n_head,
                          c.n_head_kv,      c.head_dim,       c.lin_n_head_k,    c.lin_n_head_v,
                          c.lin_head_dim_k, c.lin_head_dim_v, c.lin_conv_kernel, c.n_expert,
                          c.n_ff_exp,       c.n_ff_shexp};
  for (int64_t d : dims)
    if (d <= 0) return err("synth: the config has a zero or negative dimension");
  if (c.layer_types.size() != size_t(c.n_layer))
    return err("synth: layer_types has ", c.layer_types.size(), " entries for ", c.n_layer,
               " layers");
  return {};
}

// ---- Generation of one shard ----

// Where an item's stored tensors live in the shard's arena (byte offsets).
struct ItemSlots {
  uint64_t main = 0;    // dense elements, or quant codes
  uint64_t scales = 0;  // quant only
  uint64_t biases = 0;  // quant only
};

uint64_t align64(uint64_t n) {
  return (n + 63) & ~uint64_t(63);
}

// Lays the items out back to back (64-byte aligned); returns the bytes needed.
uint64_t layout_shard(std::span<const Item> items, std::vector<ItemSlots>& slots) {
  slots.assign(items.size(), {});
  uint64_t at = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    slots[i].main = at;
    if (it.store == Store::quant) {
      at = align64(at + it.code_bytes());
      slots[i].scales = at;
      at = align64(at + it.scale_bytes());
      slots[i].biases = at;
      at = align64(at + it.scale_bytes());
    } else if (it.store == Store::fp8) {
      at = align64(at + it.code_bytes());
      slots[i].scales = at;
      at = align64(at + it.scale_bytes());
    } else {
      at = align64(at + it.bytes());
    }
  }
  return at;
}

// Rows [r0, r0 + n) (whole 128-row blocks of each stored matrix, the last may be short) as e4m3
// codes with one bf16 scale a 128 x 128 block: scale = bf16(amax / 448), code = e4m3(w / scale)
// (saturating), as the FP8 checkpoints' block quantizers do.
void store_fp8(const Item& it, int64_t r0, int64_t n, const std::vector<float>& w, uint8_t* arena,
               const ItemSlots& slot) {
  const int64_t out = it.shape.size() >= 2 ? it.shape[it.shape.size() - 2] : 1;
  const int64_t sc = it.fp8_scale_cols(), blocks_per_matrix = (out + kFp8Block - 1) / kFp8Block;
  uint8_t* codes = arena + slot.main + r0 * it.cols;
  uint16_t* scales = reinterpret_cast<uint16_t*>(arena + slot.scales);
  for (int64_t b0 = 0; b0 < n;) {
    const int64_t row = r0 + b0, in_matrix = row % out;
    const int64_t b1 = std::min(n, b0 + std::min<int64_t>(kFp8Block, out - in_matrix));
    const int64_t srow = row / out * blocks_per_matrix + in_matrix / kFp8Block;
    for (int64_t g = 0; g < sc; ++g) {
      const int64_t c0 = g * kFp8Block, c1 = std::min(it.cols, c0 + kFp8Block);
      float amax = 0;
      for (int64_t r = b0; r < b1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[size_t(r * it.cols + c)]));
      const uint16_t sbits = f32_to_bf16(std::max(amax, 1e-4f) / 448.0f);
      const float s = bf16_to_f32(sbits);
      scales[srow * sc + g] = sbits;
      for (int64_t r = b0; r < b1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          codes[r * it.cols + c] = f32_to_fp8_e4m3(w[size_t(r * it.cols + c)] / s);
    }
    b0 = b1;
  }
}

void generate_unit(const Item& it, uint64_t key_seed, int64_t r0, int64_t n, uint8_t* arena,
                   const ItemSlots& slot, std::vector<float>& scratch) {
  scratch.resize(size_t(n * it.cols));
  for (int64_t r = 0; r < n; ++r)
    generate_row(key_seed, it.hf_row(r0 + r), it, scratch.data() + r * it.cols);
  const size_t count = scratch.size();
  switch (it.store) {
    case Store::bf16:
    case Store::bf16_plus_one: {
      uint16_t* dst = reinterpret_cast<uint16_t*>(arena + slot.main) + r0 * it.cols;
      const float add = it.store == Store::bf16_plus_one ? 1.0f : 0.0f;
      for (size_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(scratch[i] + add);
      break;
    }
    case Store::f32:
      std::memcpy(arena + slot.main + r0 * it.cols * 4, scratch.data(), count * 4);
      break;
    case Store::quant: {
      AffineQuantized q = quantize_affine(scratch, n, it.cols, it.bits, kGroup);
      const int64_t code_row = it.cols * it.bits / 8, scale_row = it.cols / kGroup * 2;
      std::memcpy(arena + slot.main + r0 * code_row, q.codes.data(), q.codes.size() * 4);
      std::memcpy(arena + slot.scales + r0 * scale_row, q.scales.data(), q.scales.size() * 2);
      std::memcpy(arena + slot.biases + r0 * scale_row, q.biases.data(), q.biases.size() * 2);
      break;
    }
    case Store::fp8:
      store_fp8(it, r0, n, scratch, arena, slot);
      break;
  }
}

// Generates every item of a shard into `arena` (n_threads workers over units of a few rows)
// and returns the tensors to write, pointing into the arena.
std::vector<TensorToWrite> generate_shard(std::span<const Item> items, uint64_t seed, int n_threads,
                                          uint8_t* arena) {
  std::vector<ItemSlots> slots;
  layout_shard(items, slots);
  struct Unit {
    size_t item;
    int64_t r0, n;
  };
  std::vector<Unit> units;
  std::vector<uint64_t> key_seeds(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    key_seeds[i] = mix64(fnv1a(it.key) + mix64(seed));
    int64_t step = std::max<int64_t>(1, kUnitElems / it.cols);
    if (it.store == Store::fp8) step = (step + kFp8Block - 1) / kFp8Block * kFp8Block;
    for (int64_t r = 0; r < it.rows; r += step)
      units.push_back({i, r, std::min(step, it.rows - r)});
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    std::vector<float> scratch;
    for (size_t u; (u = next.fetch_add(1)) < units.size();) {
      const Unit& un = units[u];
      generate_unit(items[un.item], key_seeds[un.item], un.r0, un.n, arena, slots[un.item],
                    scratch);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min<int>(n_threads, int(units.size())); ++t)
    threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();

  std::vector<TensorToWrite> tensors;
  auto add = [&](std::string name, DType dt, std::vector<int64_t> shape, uint64_t at, uint64_t n) {
    tensors.push_back({std::move(name), dt, std::move(shape), {arena + at, size_t(n)}});
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (it.store == Store::quant) {
      std::vector<int64_t> packed = it.shape, grouped = it.shape;
      packed.back() = it.cols * it.bits / 32;
      grouped.back() = it.cols / kGroup;
      add(it.name + ".weight", DType::U32, packed, slots[i].main, it.code_bytes());
      add(it.name + ".scales", DType::BF16, grouped, slots[i].scales, it.scale_bytes());
      add(it.name + ".biases", DType::BF16, grouped, slots[i].biases, it.scale_bytes());
    } else if (it.store == Store::fp8) {
      std::vector<int64_t> blocks = it.shape;
      blocks.back() = it.fp8_scale_cols();
      if (blocks.size() >= 2) blocks[blocks.size() - 2] = (blocks[blocks.size() - 2] + kFp8Block - 1) / kFp8Block;
      add(it.name, DType::F8_E4M3, it.shape, slots[i].main, it.code_bytes());
      add(it.name + "_scale_inv", DType::BF16, blocks, slots[i].scales, it.scale_bytes());
    } else {
      add(it.name, it.store == Store::f32 ? DType::F32 : DType::BF16, it.shape, slots[i].main,
          it.bytes());
    }
  }
  return tensors;
}

// Writes shards on a background thread so shard k is written while k + 1 is generated.
class ShardWriter {
 public:
  ~ShardWriter() { (void)wait(); }
  // Waits for the previous shard, then starts writing this one. `tensors` must stay valid
  // until the next start()/wait().
  Status start(std::string path, std::vector<TensorToWrite> tensors,
               const std::map<std::string, std::string>& meta) {
    ORCHID_TRY(wait());
    tensors_ = std::move(tensors);
    thread_ = std::thread([this, path = std::move(path), &meta] {
      status_ = write_safetensors(path, tensors_, meta);
    });
    return {};
  }
  Status wait() {
    if (thread_.joinable()) thread_.join();
    Status s = status_;
    status_ = {};
    return s;
  }

 private:
  std::thread thread_;
  std::vector<TensorToWrite> tensors_;
  Status status_;
};

Status write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return err(path, ": cannot open for writing");
    f << text;
    f.close();
    if (!f) return err(path, ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return err(path, ": rename failed: ", ec.message());
  return {};
}

std::string shard_name(int k, int n) {
  if (n == 1) return Checkpoint::kSingleFile;
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k + 1, n);
  return buf;
}

}  // namespace

std::optional<SynthLayout> parse_synth_layout(std::string_view name) {
  if (name == "hf") return SynthLayout::hf;
  if (name == "mlx4") return SynthLayout::mlx4;
  if (name == "fp8") return SynthLayout::fp8;
  return std::nullopt;
}

std::string_view synth_layout_name(SynthLayout layout) {
  return layout == SynthLayout::hf ? "hf" : layout == SynthLayout::mlx4 ? "mlx4" : "fp8";
}

Status synth_checkpoint(const ModelConfig& cfg, SynthLayout layout, const std::string& out_dir,
                        uint64_t seed) {
  SynthOptions o;
  o.seed = seed;
  return synth_checkpoint(cfg, layout, out_dir, o);
}

Status synth_checkpoint(const ModelConfig& cfg, SynthLayout layout, const std::string& out_dir,
                        const SynthOptions& opt) {
  ORCHID_TRY(check_config(cfg));
  Planner plan(cfg, layout);
  plan.build();
  const std::vector<Item>& items = plan.items();

  // Shards: k closes once the running total passes (k + 1) / n of all bytes.
  uint64_t total = 0;
  for (const Item& it : items) total += it.bytes();
  const uint64_t per_shard = std::max<uint64_t>(1, opt.shard_bytes);
  int n =
      int(std::max<uint64_t>(uint64_t(opt.min_shards.value_or(layout == SynthLayout::mlx4 ? 1 : 2)),
                             (total + per_shard - 1) / per_shard));
  n = std::clamp(n, 1, int(items.size()));
  std::vector<size_t> ends;  // one past the last item of each shard
  uint64_t cum = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    cum += items[i].bytes();
    const bool last = i + 1 == items.size();
    if (last ||
        (int(ends.size()) < n - 1 && double(cum) >= double(total) * double(ends.size() + 1) / n))
      ends.push_back(i + 1);
  }
  n = int(ends.size());

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return err(out_dir, ": cannot create directory: ", ec.message());
  const std::string dir = out_dir + "/";
  // A stale index would shadow a single model.safetensors (and point at stale shards).
  std::filesystem::remove(dir + Checkpoint::kIndexFile, ec);
  if (n > 1) std::filesystem::remove(dir + Checkpoint::kSingleFile, ec);

  ModelConfig out_cfg = cfg;
  out_cfg.quant.reset();
  out_cfg.quant_overrides.clear();
  if (layout == SynthLayout::mlx4) {
    out_cfg.quant = QuantSpec{4, kGroup};
    out_cfg.quant_overrides = plan.quant_overrides();
  }
  out_cfg.fp8.reset();
  if (layout == SynthLayout::fp8) out_cfg.fp8 = Fp8Spec{kFp8Block, kFp8Block, plan.not_converted()};
  ORCHID_TRY(write_text(dir + "config.json", config_to_json(out_cfg)));
  nlohmann::json gen = {{"eos_token_id", {cfg.n_vocab - 1}}, {"do_sample", false}};
  ORCHID_TRY(write_text(dir + "generation_config.json", gen.dump(2) + "\n"));

  const int n_threads =
      opt.n_threads > 0 ? opt.n_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::map<std::string, std::string> meta = {
      {"format", layout == SynthLayout::mlx4 ? "mlx" : "pt"}};
  // Two arenas: shard k is written from one while k + 1 is generated into the other. Reusing
  // them keeps page faults to the first two shards. Peak memory ~ 2 x the largest shard.
  std::vector<ItemSlots> slots;
  uint64_t arena_bytes = 0;
  for (size_t k = 0, first = 0; k < ends.size(); first = ends[k++]) {
    std::span<const Item> shard(items.data() + first, ends[k] - first);
    arena_bytes = std::max(arena_bytes, layout_shard(shard, slots));
  }
  std::unique_ptr<uint8_t[]> arenas[2];
  nlohmann::json weight_map = nlohmann::json::object();
  ShardWriter writer;
  size_t begin = 0;
  for (int k = 0; k < n; ++k) {
    std::unique_ptr<uint8_t[]>& arena = arenas[k % 2];
    if (!arena) arena = std::make_unique_for_overwrite<uint8_t[]>(arena_bytes);
    const std::string file = shard_name(k, n);
    std::span<const Item> shard(items.data() + begin, ends[size_t(k)] - begin);
    std::vector<TensorToWrite> tensors = generate_shard(shard, opt.seed, n_threads, arena.get());
    for (const TensorToWrite& t : tensors) weight_map[t.name] = file;
    ORCHID_TRY(writer.start(dir + file, std::move(tensors), meta));
    if (k > 0 && opt.on_shard_written) opt.on_shard_written(k - 1, n);
    begin = ends[size_t(k)];
  }
  ORCHID_TRY(writer.wait());
  if (opt.on_shard_written) opt.on_shard_written(n - 1, n);
  if (n > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    ORCHID_TRY(write_text(dir + Checkpoint::kIndexFile, index.dump(2) + "\n"));
  }
  return {};
}

}  // namespace orchid

// load_model: config.json + safetensors → Weights, for the HF and MLX layouts. Every tensor
// is checked (present, dtype, shape) before use; views point into the mapped files.
#include <cstring>
#include <optional>
#include <sstream>

#include "orchid/model/gguf.h"
#include "orchid/model/gguf_config.h"
#include "orchid/model/gguf_split.h"
#include "orchid/model/gguf_weights.h"
#include "orchid/model/model.h"
#include "orchid/model/quant.h"
#include "orchid/util/bf16.h"
#include "orchid/util/load_progress.h"

namespace orchid {
namespace {

std::string shape_str(std::span<const int64_t> shape) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? "," : "") << shape[i];
  s << ']';
  return s.str();
}

bool is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

float read_float(const TensorInfo& t, int64_t i) {
  const uint8_t* p = t.data.data();
  switch (t.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return f16_to_f32(h);
    }
    default: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return bf16_to_f32(h);
    }
  }
}

// Reads tensors by module path for one checkpoint and builds QuantMatrix views.
class Loader {
 public:
  Loader(Model& m, const LoadOptions& opts) : m_(m), ck_(*m.checkpoint), opts_(opts) {}

  const TensorInfo* find(const std::string& name) const { return ck_.find(name); }

  Expected<const TensorInfo*> require(const std::string& name) const {
    const TensorInfo* t = ck_.find(name);
    if (!t) return err(ck_.dir(), ": missing tensor '", name, "'");
    return t;
  }

  Status check_shape(const TensorInfo& t, std::span<const int64_t> want) const {
    if (!std::equal(t.shape.begin(), t.shape.end(), want.begin(), want.end()))
      return err(t.file, ": tensor '", t.name, "' has shape ", shape_str(t.shape), ", expected ",
                 shape_str(want));
    return {};
  }

  // A vector of n floats; `shift` adds 1 (zero-centred norm stored raw, HF layout).
  Expected<std::vector<float>> vec(const std::string& name, int64_t n, bool shift) const {
    auto t = require(name);
    if (!t) return t.error();
    if (!is_float((*t)->dtype))
      return err((*t)->file, ": tensor '", name, "' has dtype ", dtype_name((*t)->dtype),
                 ", expected F32, BF16 or F16");
    const int64_t want[] = {n};
    ORCHID_TRY(check_shape(**t, want));
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = read_float(**t, i) + (shift ? 1.f : 0.f);
    return v;
  }

  // The matrix stored at `base` + weight_suffix (".weight", or "" for HF fused experts):
  // logical shape lead × [rows, cols], returned as one 2-D matrix of lead·rows rows.
  // MLX-quantized when `base.scales` exists.
  Expected<QuantMatrix> matrix(const std::string& base, const char* weight_suffix,
                               std::vector<int64_t> lead, int64_t rows, int64_t cols) {
    auto w = require(base + weight_suffix);
    if (!w) return w.error();
    int64_t n_mat = 1;
    for (int64_t d : lead) n_mat *= d;
    std::vector<int64_t> want = lead;
    want.push_back(rows);
    want.push_back(cols);
    QuantMatrix q;
    q.rows = n_mat * rows;
    q.cols = cols;
    if ((*w)->dtype == DType::F8_E4M3 || (*w)->dtype == DType::F8_E5M2)
      return fp8_matrix(**w, lead, rows, cols, base);
    const TensorInfo* scales = find(base + ".scales");
    if (!scales) {
      if (!is_float((*w)->dtype))
        return err((*w)->file, ": tensor '", (*w)->name, "' has dtype ", dtype_name((*w)->dtype),
                   ", expected BF16, F16 or F32 (or U32 with scales)");
      ORCHID_TRY(check_shape(**w, want));
      q.format = WeightFormat::dense;
      q.dtype = (*w)->dtype;
      q.bits = int(dtype_size(q.dtype) * 8);
      q.data = (*w)->data.data();
      return maybe_quantize(q, base);
    }
    auto biases = require(base + ".biases");
    if (!biases) return biases.error();
    if ((*w)->dtype != DType::U32)
      return err((*w)->file, ": quantized tensor '", (*w)->name, "' has dtype ",
                 dtype_name((*w)->dtype), ", expected U32");
    if (!is_float(scales->dtype) || (*biases)->dtype != scales->dtype)
      return err(scales->file, ": '", base, ".scales/.biases' must share a float dtype");
    if ((*w)->shape.size() != want.size() || scales->shape.size() != want.size())
      return err((*w)->file, ": quantized tensor '", (*w)->name, "' has shape ",
                 shape_str((*w)->shape), ", expected rank ", want.size());
    // Bits from the config's quantization section, else inferred from the packed width.
    auto spec = m_.config.quant_for(quant_path(base));
    int64_t packed = (*w)->shape.back();
    int bits = spec ? spec->bits : int(packed * 32 / cols);
    int64_t n_groups = scales->shape.back();
    if (bits != 4 && bits != 8)
      return err((*w)->file, ": tensor '", (*w)->name, "' packs ", cols, " columns into ", packed,
                 " words: not 4- or 8-bit");
    if (n_groups <= 0 || cols % n_groups != 0)
      return err(scales->file, ": tensor '", scales->name, "' has ", n_groups,
                 " groups, which do not divide ", cols, " columns");
    int group = int(cols / n_groups);
    if (spec && spec->group_size != group)
      return err(scales->file, ": tensor '", scales->name, "' implies group size ", group,
                 " but config quantization says ", spec->group_size);
    std::vector<int64_t> want_w = want, want_s = want;
    want_w.back() = cols * bits / 32;
    want_s.back() = n_groups;
    if (cols * bits % 32 != 0)
      return err((*w)->file, ": ", cols, " columns at ", bits, " bits do not fill whole words");
    if (spec && packed != want_w.back()) {
      // Say which width the tensor was packed at, not just that its shape is off.
      std::string actual = packed * 32 % cols == 0 ? std::to_string(packed * 32 / cols) + "-bit"
                                                   : "not a whole number of bits per element";
      return err((*w)->file, ": quantized tensor '", (*w)->name, "' packs ", cols, " columns into ",
                 packed, " words per row (", actual, "), but the config's quantization for '",
                 quant_path(base), "' says ", bits, "-bit: expected shape ", shape_str(want_w));
    }
    ORCHID_TRY(check_shape(**w, want_w));
    ORCHID_TRY(check_shape(*scales, want_s));
    ORCHID_TRY(check_shape(**biases, want_s));
    q.format = WeightFormat::affine;
    q.dtype = scales->dtype;
    q.bits = bits;
    q.group = group;
    q.data = (*w)->data.data();
    q.scales = scales->data.data();
    q.biases = (*biases)->data.data();
    return q;
  }

  // Block-wise FP8: w (e4m3 [lead…, rows, cols]) with `<w's name>_scale_inv` (one float per
  // block, [lead…, ceil(rows / block_rows), ceil(cols / block_cols)]). A stack (lead) is one
  // matrix of lead·rows rows, so its experts' rows must fill whole blocks.
  Expected<QuantMatrix> fp8_matrix(const TensorInfo& w, const std::vector<int64_t>& lead,
                                   int64_t rows, int64_t cols, const std::string& base) {
    if (w.dtype != DType::F8_E4M3)
      return err(w.file, ": tensor '", w.name, "' has dtype ", dtype_name(w.dtype),
                 ", expected F8_E4M3 (e5m2 weights are not supported)");
    if (!m_.config.fp8)
      return err(w.file, ": tensor '", w.name,
                 "' is F8_E4M3 but config.json has no quantization_config with quant_method fp8");
    const Fp8Spec& f = *m_.config.fp8;
    std::vector<int64_t> want = lead, want_s = lead;
    want.push_back(rows);
    want.push_back(cols);
    want_s.push_back((rows + f.block_rows - 1) / f.block_rows);
    want_s.push_back((cols + f.block_cols - 1) / f.block_cols);
    ORCHID_TRY(check_shape(w, want));
    auto s = require(w.name + "_scale_inv");
    if (!s) return s.error();
    if (!is_float((*s)->dtype))
      return err((*s)->file, ": tensor '", (*s)->name, "' has dtype ", dtype_name((*s)->dtype),
                 ", expected BF16, F32 or F16");
    ORCHID_TRY(check_shape(**s, want_s));
    if (!lead.empty() && rows % f.block_rows != 0)
      return err(w.file, ": stacked FP8 tensor '", w.name, "' has ", rows,
                 " rows a matrix, not a multiple of the ", f.block_rows, "-row scale blocks");
    QuantMatrix q;
    q.rows = rows;
    for (int64_t d : lead) q.rows *= d;
    q.cols = cols;
    q.format = WeightFormat::fp8;
    q.dtype = (*s)->dtype;
    q.bits = 8;
    q.group = f.block_cols;
    q.block_rows = f.block_rows;
    q.data = w.data.data();
    q.scales = (*s)->data.data();
    return maybe_quantize(q, base);
  }

  Expected<QuantMatrix> linear(const std::string& base, int64_t rows, int64_t cols) {
    return matrix(base, ".weight", {}, rows, cols);
  }

  // Depthwise conv taps as [C, K] floats: HF stores [C,1,K], MLX [C,K,1].
  Expected<std::vector<float>> conv(const std::string& name, int64_t channels, int64_t k) {
    auto t = require(name);
    if (!t) return t.error();
    const int64_t hf[] = {channels, 1, k}, mlx[] = {channels, k, 1};
    const int64_t* want = m_.layout == Layout::mlx ? mlx : hf;
    if (!is_float((*t)->dtype))
      return err((*t)->file, ": tensor '", name, "' must be F32, BF16 or F16");
    ORCHID_TRY(check_shape(**t, std::span<const int64_t>(want, 3)));
    std::vector<float> v(static_cast<size_t>(channels * k));
    for (int64_t i = 0; i < channels * k; ++i) v[size_t(i)] = read_float(**t, i);
    return v;
  }

 private:
  // The config's quantization keys are module paths without the tensor suffix.
  static std::string quant_path(const std::string& base) { return base; }

  // --quantize q4: dense (and FP8) matrices whose rows split into 64-wide groups become MLX
  // affine (8-bit for the router and shared-expert gate, as MLX's own predicate does).
  Expected<QuantMatrix> maybe_quantize(const QuantMatrix& dense, const std::string& base) {
    if (!opts_.quantize_q4 || dense.cols % 64 != 0) return dense;
    bool eight = base.ends_with(".mlp.gate") || base.ends_with(".shared_expert_gate");
    int bits = eight ? 8 : 4;
    load_progress_add(uint64_t(dense.bytes()));
    std::vector<float> w(size_t(dense.rows * dense.cols));
    for (int64_t r = 0; r < dense.rows; ++r) dense.dequant_row(r, w.data() + r * dense.cols);
    AffineQuantized aq = quantize_affine(w, dense.rows, dense.cols, bits, 64);
    QuantMatrix q = dense;
    q.block_rows = 0, q.block_row0 = 0;
    q.format = WeightFormat::affine;
    q.dtype = DType::BF16;
    q.bits = bits;
    q.group = 64;
    q.data = keep(aq.codes);
    q.scales = keep(aq.scales);
    q.biases = keep(aq.biases);
    return q;
  }

  template <class T>
  const void* keep(const std::vector<T>& v) {
    auto& buf = m_.arena.emplace_back(v.size() * sizeof(T));
    std::memcpy(buf.data(), v.data(), buf.size());
    return buf.data();
  }

  Model& m_;
  const Checkpoint& ck_;
  LoadOptions opts_;
};

// Finds where the text model's tensors live and which layout names them.
Status detect_layout(Model& m) {
  const Checkpoint& ck = *m.checkpoint;
  static const char* prefixes[] = {"model.language_model.", "language_model.model.", "model."};
  std::string prefix;
  for (const char* p : prefixes) {
    if (ck.find(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  }
  if (prefix.empty())
    return err(ck.dir(),
               ": no embedding tensor found (looked for model.language_model.embed_tokens.weight,"
               " language_model.model.embed_tokens.weight, model.embed_tokens.weight)");
  m.layout = prefix == "language_model.model." ? Layout::mlx : Layout::hf;
  // mlx-lm text-only exports also use "model."; MLX marks converted conv weights [C,K,1].
  for (int i = 0; i < m.config.n_layer; ++i) {
    if (m.config.layer_types[size_t(i)] != LayerKind::linear_attention) continue;
    const TensorInfo* c =
        ck.find(prefix + "layers." + std::to_string(i) + ".linear_attn.conv1d.weight");
    if (c && c->shape.size() == 3 && c->shape[2] == 1 && c->shape[1] != 1) m.layout = Layout::mlx;
    break;
  }
  return {};
}

std::string prefix_of(const Model& m) {
  for (const char* p : {"model.language_model.", "language_model.model.", "model."})
    if (m.checkpoint->find(std::string(p) + "embed_tokens.weight")) return p;
  return "";
}

Status load_layer(Loader& ld, const Model& m, const std::string& pre, int i, LayerWeights& L) {
  const ModelConfig& c = m.config;
  const bool raw_norms = m.layout == Layout::hf;
  const int64_t H = c.n_embd;
  const std::string p = pre + "layers." + std::to_string(i) + ".";
#define LOAD(dst, expr)         \
  do {                          \
    auto r_ = (expr);           \
    if (!r_) return r_.error(); \
    dst = std::move(*r_);       \
  } while (0)
  LOAD(L.attn_norm, ld.vec(p + "input_layernorm.weight", H, raw_norms));
  LOAD(L.post_attn_norm, ld.vec(p + "post_attention_layernorm.weight", H, raw_norms));
  if (c.layer_types[size_t(i)] == LayerKind::full_attention) {
    const std::string a = p + "self_attn.";
    const int64_t hd = c.head_dim;
    LOAD(L.attn.q_proj, ld.linear(a + "q_proj", c.n_head * hd * 2, H));
    LOAD(L.attn.k_proj, ld.linear(a + "k_proj", c.n_head_kv * hd, H));
    LOAD(L.attn.v_proj, ld.linear(a + "v_proj", c.n_head_kv * hd, H));
    LOAD(L.attn.o_proj, ld.linear(a + "o_proj", H, c.n_head * hd));
    LOAD(L.attn.q_norm, ld.vec(a + "q_norm.weight", hd, raw_norms));
    LOAD(L.attn.k_norm, ld.vec(a + "k_norm.weight", hd, raw_norms));
  } else {
    const std::string a = p + "linear_attn.";
    const int64_t hv = c.lin_n_head_v;
    LOAD(L.gdn.in_proj_qkv, ld.linear(a + "in_proj_qkv", c.lin_conv_dim(), H));
    LOAD(L.gdn.in_proj_z, ld.linear(a + "in_proj_z", c.lin_value_dim(), H));
    LOAD(L.gdn.in_proj_b, ld.linear(a + "in_proj_b", hv, H));
    LOAD(L.gdn.in_proj_a, ld.linear(a + "in_proj_a", hv, H));
    LOAD(L.gdn.out_proj, ld.linear(a + "out_proj", H, c.lin_value_dim()));
    LOAD(L.gdn.conv, ld.conv(a + "conv1d.weight", c.lin_conv_dim(), c.lin_conv_kernel));
    LOAD(L.gdn.A_log, ld.vec(a + "A_log", hv, false));
    LOAD(L.gdn.dt_bias, ld.vec(a + "dt_bias", hv, false));
    LOAD(L.gdn.norm, ld.vec(a + "norm.weight", c.lin_head_dim_v, false));
  }
  const std::string mlp = p + "mlp.";
  const int64_t E = c.n_expert, I = c.n_ff_exp;
  MoeWeights& moe = L.moe;
  LOAD(moe.router, ld.linear(mlp + "gate", E, H));
  if (ld.find(mlp + "switch_mlp.gate_proj.weight")) {  // MLX stacks: [E, out, in]
    QuantMatrix g, u, d;
    LOAD(g, ld.matrix(mlp + "switch_mlp.gate_proj", ".weight", {E}, I, H));
    LOAD(u, ld.matrix(mlp + "switch_mlp.up_proj", ".weight", {E}, I, H));
    LOAD(d, ld.matrix(mlp + "switch_mlp.down_proj", ".weight", {E}, H, I));
    for (int64_t e = 0; e < E; ++e) {
      moe.gate.push_back(g.row_slice(e * I, I));
      moe.up.push_back(u.row_slice(e * I, I));
      moe.down.push_back(d.row_slice(e * H, H));
    }
  } else if (ld.find(mlp + "experts.gate_up_proj")) {  // HF fused: [E, 2I, H] and [E, H, I]
    QuantMatrix gu, d;
    LOAD(gu, ld.matrix(mlp + "experts.gate_up_proj", "", {E}, 2 * I, H));
    LOAD(d, ld.matrix(mlp + "experts.down_proj", "", {E}, H, I));
    for (int64_t e = 0; e < E; ++e) {
      moe.gate.push_back(gu.row_slice(e * 2 * I, I));
      moe.up.push_back(gu.row_slice(e * 2 * I + I, I));
      moe.down.push_back(d.row_slice(e * H, H));
    }
  } else {  // one tensor per expert
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = mlp + "experts." + std::to_string(e) + ".";
      QuantMatrix g, u, d;
      LOAD(g, ld.linear(x + "gate_proj", I, H));
      LOAD(u, ld.linear(x + "up_proj", I, H));
      LOAD(d, ld.linear(x + "down_proj", H, I));
      moe.gate.push_back(g);
      moe.up.push_back(u);
      moe.down.push_back(d);
    }
  }
  const int64_t S = c.n_ff_shexp;
  LOAD(moe.shared_gate, ld.linear(mlp + "shared_expert.gate_proj", S, H));
  LOAD(moe.shared_up, ld.linear(mlp + "shared_expert.up_proj", S, H));
  LOAD(moe.shared_down, ld.linear(mlp + "shared_expert.down_proj", H, S));
  LOAD(moe.shared_expert_gate, ld.linear(mlp + "shared_expert_gate", 1, H));
#undef LOAD
  return {};
}

}  // namespace

namespace {

Expected<std::unique_ptr<Model>> load_gguf_model(const std::string& path) {
  auto parts = open_gguf(path);
  if (!parts) return parts.error();
  auto m = std::make_unique<Model>();
  m->gguf = std::move(parts->files);
  const GgufFile* f = &parts->merged;
  auto cfg = gguf_config(*f, path);
  if (!cfg) return cfg.error();
  m->config = std::move(*cfg);
  m->layout = Layout::gguf;
  m->dir = path;
  auto w = gguf_weights(*f, m->config, path, m->arena);
  if (!w) return w.error();
  m->weights = std::move(*w);
  return m;
}

}  // namespace

Expected<std::unique_ptr<Model>> load_model(const std::string& dir, const LoadOptions& opts) {
  if (is_gguf_path(dir)) return load_gguf_model(dir);
  auto cfg = load_config(dir);
  if (!cfg) return cfg.error();
  auto ck = Checkpoint::open(dir);
  if (!ck) return ck.error();
  auto m = std::make_unique<Model>();
  m->config = std::move(*cfg);
  m->dir = dir;
  m->checkpoint = std::make_unique<Checkpoint>(std::move(*ck));
  ORCHID_TRY(detect_layout(*m));
  const std::string pre = prefix_of(*m);
  const ModelConfig& c = m->config;
  Loader ld(*m, opts);
  std::optional<LoadStep> step;  // quantizing reads every matrix: the slow part of such a load
  if (opts.quantize_q4) {
    uint64_t total = 0;
    for (const TensorInfo* t : m->checkpoint->all()) total += t->nbytes();
    step.emplace("quantizing to 4 bits", total);
  }

  auto embd = ld.linear(pre + "embed_tokens", c.n_vocab, c.n_embd);
  if (!embd) return embd.error();
  m->weights.tok_embd = *embd;
  auto norm = ld.vec(pre + "norm.weight", c.n_embd, m->layout == Layout::hf);
  if (!norm) return norm.error();
  m->weights.output_norm = std::move(*norm);

  std::string head;
  for (const char* h : {"lm_head", "language_model.lm_head", "model.lm_head"})
    if (ld.find(std::string(h) + ".weight")) head = h;
  if (!head.empty()) {
    auto out = ld.linear(head, c.n_vocab, c.n_embd);
    if (!out) return out.error();
    m->weights.output = *out;
  } else if (c.tie_word_embeddings) {
    m->weights.output = m->weights.tok_embd;
  } else {
    return err(dir, ": missing tensor 'lm_head.weight' (and tie_word_embeddings is false)");
  }

  m->weights.layers.resize(size_t(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i)
    ORCHID_TRY(load_layer(ld, *m, pre, i, m->weights.layers[size_t(i)]));
  return m;
}

}  // namespace orchid

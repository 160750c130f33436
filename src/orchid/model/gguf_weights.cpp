// gguf_weights: a qwen35moe GGUF's tensors → Weights (names and transforms: docs/gguf.md).
#include "orchid/model/gguf_weights.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>

#include "orchid/model/gguf_affine.h"
#include "orchid/model/gguf_dequant.h"
#include "orchid/model/gguf_heads.h"

namespace orchid {
namespace {

// Dims with trailing 1s dropped ({2048, 1} and {2048} are one shape).
std::vector<int64_t> squeezed(std::vector<int64_t> d) {
  while (d.size() > 1 && d.back() == 1) d.pop_back();
  return d;
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

class Reader {
 public:
  Reader(const GgufFile& f, const ModelConfig& c, std::string_view file,
         std::deque<std::vector<uint8_t>>& arena)
      : f_(f), c_(c), file_(file), arena_(arena) {}

  // The tensor `name` with dims `dims` (innermost first).
  Expected<const GgufTensor*> get(const std::string& name, std::vector<int64_t> dims) const {
    const GgufTensor* t = f_.find(name);
    if (!t) return err(file_, ": missing tensor '", name, "'");
    if (squeezed(t->dims) != squeezed(dims))
      return err(file_, ": tensor '", name, "' has dims ", dims_text(t->dims), ", expected ",
                 dims_text(dims));
    return t;
  }

  // A small tensor's n values as fp32 (any type with a dequantizer).
  Expected<std::vector<float>> vec(const std::string& name, std::vector<int64_t> dims) const {
    auto t = get(name, dims);
    if (!t) return t.error();
    std::vector<float> v(size_t((*t)->numel()));
    if (Status s = dequantize_gguf((*t)->type, (*t)->data, int64_t(v.size()), v.data()); !s.ok())
      return err(file_, ": tensor '", name, "': ", s.message());
    return v;
  }

  // The tensor `name` of dims {cols, rows…} as a [rows, cols] matrix (rows: the outer dims'
  // product). owned: in buffers of the arena even where a view of the file would do (heads are
  // put back in order in place).
  Expected<QuantMatrix> matrix(const std::string& name, std::vector<int64_t> dims,
                               bool owned = false) {
    auto got = get(name, dims);
    if (!got) return got.error();
    const GgufTensor& t = **got;
    QuantMatrix m;
    m.cols = t.dims[0];
    m.rows = t.numel() / m.cols;
    if (t.type == uint32_t(GgmlType::F32) || t.type == uint32_t(GgmlType::F16) ||
        t.type == uint32_t(GgmlType::BF16)) {
      m.dtype = t.type == uint32_t(GgmlType::F32)   ? DType::F32
                : t.type == uint32_t(GgmlType::F16) ? DType::F16
                                                    : DType::BF16;
      m.bits = int(dtype_size(m.dtype)) * 8;
      m.data = owned ? copy(t.data) : t.data.data();
      return m;
    }
    GgmlBlock blk;
    ggml_block(t.type, blk);  // the parser admitted only types whose block it knows
    const int64_t row_bytes = m.cols / blk.elems * blk.bytes;
    if (const int bits = gguf_affine_bits(t.type); bits > 0) {
      m.format = WeightFormat::affine;
      m.dtype = DType::F32;
      m.bits = bits;
      m.group = gguf_affine_group(t.type);
      const int64_t words = m.cols * bits / 32, groups = m.cols / m.group;
      auto* codes = reinterpret_cast<uint32_t*>(buffer(size_t(m.rows * words) * 4));
      auto* scales = reinterpret_cast<float*>(buffer(size_t(m.rows * groups) * 4));
      auto* biases = reinterpret_cast<float*>(buffer(size_t(m.rows * groups) * 4));
      for (int64_t r = 0; r < m.rows; ++r) {
        const Status s = gguf_row_to_affine(t.type, t.data.subspan(size_t(r * row_bytes), size_t(row_bytes)),
                                            m.cols, codes + r * words, scales + r * groups,
                                            biases + r * groups);
        if (!s.ok()) return err(file_, ": tensor '", name, "': ", s.message());
      }
      m.data = codes, m.scales = scales, m.biases = biases;
      return m;
    }
    // A type with a dequantizer but no affine form here: fp32.
    auto* out = reinterpret_cast<float*>(buffer(size_t(m.rows * m.cols) * 4));
    for (int64_t r = 0; r < m.rows; ++r) {
      const Status s = dequantize_gguf(t.type, t.data.subspan(size_t(r * row_bytes), size_t(row_bytes)),
                                       m.cols, out + r * m.cols);
      if (!s.ok())
        return err(file_, ": tensor '", name, "' of type ", ggml_type_name(t.type),
                   " is not supported: ", s.message());
    }
    m.dtype = DType::F32, m.bits = 32, m.data = out;
    return m;
  }

  // The value heads of rows [row0, row0 + V · per_head) of an owned matrix put back in order.
  Status undo_rows(const std::string& name, QuantMatrix& m, int64_t row0, int64_t per_head) const {
    auto rows = [&](const void* p, int64_t row_bytes) {
      auto* base = static_cast<uint8_t*>(const_cast<void*>(p)) + row0 * row_bytes;
      return undo_in_place(base, size_t(per_head * row_bytes));
    };
    Status s = m.format == WeightFormat::dense
                   ? rows(m.data, m.cols * int64_t(dtype_size(m.dtype)))
                   : rows(m.data, m.cols * m.bits / 8);
    if (s.ok() && m.format == WeightFormat::affine) s = rows(m.scales, m.cols / m.group * 4);
    if (s.ok() && m.format == WeightFormat::affine) s = rows(m.biases, m.cols / m.group * 4);
    if (!s.ok()) return err(file_, ": tensor '", name, "': ", s.message());
    return {};
  }

  // The value heads (per_head columns each) of every row of an owned matrix put back in order.
  Status undo_cols(const std::string& name, QuantMatrix& m, int64_t per_head) const {
    auto each_row = [&](const void* p, int64_t row_bytes, int64_t head_bytes) -> Status {
      auto* base = static_cast<uint8_t*>(const_cast<void*>(p));
      for (int64_t r = 0; r < m.rows; ++r)
        ORCHID_TRY(undo_in_place(base + r * row_bytes, size_t(head_bytes)));
      return {};
    };
    if (m.format == WeightFormat::dense) {
      const int64_t e = int64_t(dtype_size(m.dtype));
      const Status s = each_row(m.data, m.cols * e, per_head * e);
      return s.ok() ? Status{} : err(file_, ": tensor '", name, "': ", s.message());
    }
    if (per_head % m.group != 0 || per_head * m.bits % 8 != 0)
      return err(file_, ": tensor '", name, "': value heads of ", per_head,
                 " columns do not split its groups of ", m.group);
    Status s = each_row(m.data, m.cols * m.bits / 8, per_head * m.bits / 8);
    if (s.ok()) s = each_row(m.scales, m.cols / m.group * 4, per_head / m.group * 4);
    if (s.ok()) s = each_row(m.biases, m.cols / m.group * 4, per_head / m.group * 4);
    if (!s.ok()) return err(file_, ": tensor '", name, "': ", s.message());
    return {};
  }

  const std::string& file() const { return file_; }

  // The value heads of a vector of V blocks of `per_head` values from offset `off`.
  Status undo_vec(std::vector<float>& v, int64_t off, int64_t per_head) const {
    return undo_in_place(reinterpret_cast<uint8_t*>(v.data() + off),
                         size_t(per_head) * sizeof(float));
  }

 private:
  // K · R blocks of head_bytes at p, stored order → Hugging Face order.
  Status undo_in_place(uint8_t* p, size_t head_bytes) const {
    const int k = c_.lin_n_head_k, r = c_.lin_n_head_v / c_.lin_n_head_k;
    if (r == 1) return {};
    const size_t n = size_t(k) * size_t(r) * head_bytes;
    std::vector<uint8_t> tmp(p, p + n);
    return undo_v_head_reorder(tmp, std::span<uint8_t>(p, n), k, r, head_bytes);
  }
  uint8_t* buffer(size_t bytes) {
    arena_.emplace_back(bytes);
    return arena_.back().data();
  }
  const void* copy(std::span<const uint8_t> src) {
    uint8_t* p = buffer(src.size());
    std::memcpy(p, src.data(), src.size());
    return p;
  }

  const GgufFile& f_;
  const ModelConfig& c_;
  std::string file_;
  std::deque<std::vector<uint8_t>>& arena_;
};

#define ORCHID_ASSIGN(dst, expr)             \
  do {                                       \
    auto orchid_v_ = (expr);                 \
    if (!orchid_v_) return orchid_v_.error(); \
    dst = std::move(*orchid_v_);             \
  } while (0)

Status delta_net(Reader& rd, const ModelConfig& c, const std::string& b, DeltaNetWeights& g) {
  const int64_t H = c.n_embd, V = c.lin_n_head_v, dv = c.lin_head_dim_v;
  const int64_t key_dim = int64_t(c.lin_n_head_k) * c.lin_head_dim_k, value_dim = V * dv;
  const int64_t conv_dim = 2 * key_dim + value_dim, k = c.lin_conv_kernel;
  ORCHID_ASSIGN(g.in_proj_qkv, rd.matrix(b + "attn_qkv.weight", {H, conv_dim}, true));
  ORCHID_TRY(rd.undo_rows(b + "attn_qkv.weight", g.in_proj_qkv, 2 * key_dim, dv));
  ORCHID_ASSIGN(g.in_proj_z, rd.matrix(b + "attn_gate.weight", {H, value_dim}, true));
  ORCHID_TRY(rd.undo_rows(b + "attn_gate.weight", g.in_proj_z, 0, dv));
  ORCHID_ASSIGN(g.in_proj_b, rd.matrix(b + "ssm_beta.weight", {H, V}, true));
  ORCHID_TRY(rd.undo_rows(b + "ssm_beta.weight", g.in_proj_b, 0, 1));
  ORCHID_ASSIGN(g.in_proj_a, rd.matrix(b + "ssm_alpha.weight", {H, V}, true));
  ORCHID_TRY(rd.undo_rows(b + "ssm_alpha.weight", g.in_proj_a, 0, 1));
  ORCHID_ASSIGN(g.out_proj, rd.matrix(b + "ssm_out.weight", {value_dim, H}, true));
  ORCHID_TRY(rd.undo_cols(b + "ssm_out.weight", g.out_proj, dv));
  // {kernel, conv_dim}: channel-major, as orchid keeps it ([conv_dim, kernel]).
  ORCHID_ASSIGN(g.conv, rd.vec(b + "ssm_conv1d.weight", {k, conv_dim}));
  ORCHID_TRY(rd.undo_vec(g.conv, 2 * key_dim * k, dv * k));
  std::vector<float> a;
  ORCHID_ASSIGN(a, rd.vec(b + "ssm_a", {V}));
  ORCHID_TRY(rd.undo_vec(a, 0, 1));
  g.A_log.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] < 0.f))
      return err(rd.file(), ": tensor '", b, "ssm_a' holds ", a[i], " (−exp(A_log) is negative)");
    g.A_log[i] = std::log(-a[i]);
  }
  ORCHID_ASSIGN(g.dt_bias, rd.vec(b + "ssm_dt.bias", {V}));
  ORCHID_TRY(rd.undo_vec(g.dt_bias, 0, 1));
  ORCHID_ASSIGN(g.norm, rd.vec(b + "ssm_norm.weight", {dv}));
  return {};
}

Status attention(Reader& rd, const ModelConfig& c, const std::string& b, AttentionWeights& a) {
  const int64_t H = c.n_embd, hd = c.head_dim;
  ORCHID_ASSIGN(a.q_proj, rd.matrix(b + "attn_q.weight", {H, c.n_head * hd * 2}));
  ORCHID_ASSIGN(a.k_proj, rd.matrix(b + "attn_k.weight", {H, c.n_head_kv * hd}));
  ORCHID_ASSIGN(a.v_proj, rd.matrix(b + "attn_v.weight", {H, c.n_head_kv * hd}));
  ORCHID_ASSIGN(a.o_proj, rd.matrix(b + "attn_output.weight", {c.n_head * hd, H}));
  ORCHID_ASSIGN(a.q_norm, rd.vec(b + "attn_q_norm.weight", {hd}));
  ORCHID_ASSIGN(a.k_norm, rd.vec(b + "attn_k_norm.weight", {hd}));
  return {};
}

Status moe(Reader& rd, const GgufFile& f, const ModelConfig& c, const std::string& b,
           MoeWeights& m) {
  const int64_t H = c.n_embd, E = c.n_expert, ff = c.n_ff_exp, sh = c.n_ff_shexp;
  ORCHID_ASSIGN(m.router, rd.matrix(b + "ffn_gate_inp.weight", {H, E}));
  m.gate.resize(size_t(E)), m.up.resize(size_t(E)), m.down.resize(size_t(E));
  if (f.find(b + "ffn_gate_up_exps.weight")) {
    QuantMatrix gu;  // per expert: gate rows, then up rows
    ORCHID_ASSIGN(gu, rd.matrix(b + "ffn_gate_up_exps.weight", {H, 2 * ff, E}));
    for (int64_t e = 0; e < E; ++e)
      m.gate[size_t(e)] = gu.row_slice(2 * ff * e, ff), m.up[size_t(e)] = gu.row_slice(2 * ff * e + ff, ff);
  } else {
    QuantMatrix g, u;
    ORCHID_ASSIGN(g, rd.matrix(b + "ffn_gate_exps.weight", {H, ff, E}));
    ORCHID_ASSIGN(u, rd.matrix(b + "ffn_up_exps.weight", {H, ff, E}));
    for (int64_t e = 0; e < E; ++e)
      m.gate[size_t(e)] = g.row_slice(ff * e, ff), m.up[size_t(e)] = u.row_slice(ff * e, ff);
  }
  QuantMatrix d;
  ORCHID_ASSIGN(d, rd.matrix(b + "ffn_down_exps.weight", {ff, H, E}));
  for (int64_t e = 0; e < E; ++e) m.down[size_t(e)] = d.row_slice(H * e, H);
  ORCHID_ASSIGN(m.shared_gate, rd.matrix(b + "ffn_gate_shexp.weight", {H, sh}));
  ORCHID_ASSIGN(m.shared_up, rd.matrix(b + "ffn_up_shexp.weight", {H, sh}));
  ORCHID_ASSIGN(m.shared_down, rd.matrix(b + "ffn_down_shexp.weight", {sh, H}));
  ORCHID_ASSIGN(m.shared_expert_gate, rd.matrix(b + "ffn_gate_inp_shexp.weight", {H}));
  return {};
}

}  // namespace

Expected<Weights> gguf_weights(const GgufFile& f, const ModelConfig& c, std::string_view file,
                               std::deque<std::vector<uint8_t>>& arena) {
  Reader rd(f, c, file, arena);
  Weights w;
  const int64_t H = c.n_embd;
  ORCHID_ASSIGN(w.tok_embd, rd.matrix("token_embd.weight", {H, c.n_vocab}));
  ORCHID_ASSIGN(w.output_norm, rd.vec("output_norm.weight", {H}));
  if (f.find("output.weight"))
    ORCHID_ASSIGN(w.output, rd.matrix("output.weight", {H, c.n_vocab}));
  else
    w.output = w.tok_embd;  // tied
  w.layers.resize(size_t(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    ORCHID_ASSIGN(L.attn_norm, rd.vec(b + "attn_norm.weight", {H}));
    ORCHID_ASSIGN(L.post_attn_norm, rd.vec(b + "post_attention_norm.weight", {H}));
    if (c.layer_types[size_t(l)] == LayerKind::full_attention)
      ORCHID_TRY(attention(rd, c, b, L.attn));
    else
      ORCHID_TRY(delta_net(rd, c, b, L.gdn));
    ORCHID_TRY(moe(rd, f, c, b, L.moe));
  }
  return w;
}

}  // namespace orchid

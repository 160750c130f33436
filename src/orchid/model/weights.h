// The canonical in-memory model: every weight as a (possibly quantized) matrix view plus
// small fp32 vectors. Matrices point into the memory-mapped checkpoint or into buffers the
// loader owns (Model::arena); quantized weights are never expanded in memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "orchid/model/dtype.h"

namespace orchid {

// How a matrix's elements are stored.
enum class WeightFormat {
  dense,   // `data` is [rows, cols] of `dtype` (F32, BF16 or F16)
  affine,  // MLX affine: `data` is uint32 [rows, cols*bits/32], scales/biases [rows, cols/group]
  fp8,     // block-wise FP8: `data` is e4m3 bytes [rows, cols], `scales` one `dtype` scale per
           // block_rows × group block, [ceil(rows/block_rows), ceil(cols/group)]; w = code × scale
};

// A linear layer's weight W [rows = out, cols = in]; y = x · Wᵀ.
struct QuantMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  WeightFormat format = WeightFormat::dense;
  DType dtype = DType::BF16;  // dense: element type; affine / fp8: type of the scales (and biases)
  int bits = 16;              // affine: 4 or 8; dense: element bits; fp8: 8
  int group = 0;              // affine: elements per (scale, bias) pair along a row; fp8: block columns
  int block_rows = 0;         // fp8: rows a scale covers
  int64_t block_row0 = 0;     // fp8: row 0's place in its block (a row_slice's offset), < block_rows
  const void* data = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;

  bool quantized() const { return format == WeightFormat::affine; }
  bool fp8() const { return format == WeightFormat::fp8; }
  // Bytes this matrix occupies (codes + scales + biases, or dense elements).
  int64_t bytes() const;
  // Row r as fp32 (dequantized if needed). PRECONDITION: out has cols elements.
  void dequant_row(int64_t r, float* out) const;
  // A view of rows [r0, r0 + n) (for fused [gate; up] stacks).
  QuantMatrix row_slice(int64_t r0, int64_t n) const;
};

struct AttentionWeights {
  QuantMatrix q_proj;         // [n_head * head_dim * 2, n_embd]: per head [query(hd) | gate(hd)]
  QuantMatrix k_proj;         // [n_head_kv * head_dim, n_embd]
  QuantMatrix v_proj;         // [n_head_kv * head_dim, n_embd]
  QuantMatrix o_proj;         // [n_embd, n_head * head_dim]
  std::vector<float> q_norm;  // [head_dim] effective scale (1 + w)
  std::vector<float> k_norm;  // [head_dim] effective scale (1 + w)
};

struct DeltaNetWeights {
  QuantMatrix in_proj_qkv;     // [conv_dim, n_embd]: rows Q(key_dim) | K(key_dim) | V(value_dim)
  QuantMatrix in_proj_z;       // [value_dim, n_embd]
  QuantMatrix in_proj_b;       // [lin_n_head_v, n_embd]
  QuantMatrix in_proj_a;       // [lin_n_head_v, n_embd]
  QuantMatrix out_proj;        // [n_embd, value_dim]
  std::vector<float> conv;     // [conv_dim, conv_kernel]: tap K-1 multiplies the current token
  std::vector<float> A_log;    // [lin_n_head_v]
  std::vector<float> dt_bias;  // [lin_n_head_v]
  std::vector<float> norm;     // [lin_head_dim_v] gated RMSNorm weight (plain, not 1 + w)
};

struct MoeWeights {
  QuantMatrix router;              // [n_expert, n_embd]
  std::vector<QuantMatrix> gate;   // n_expert x [n_ff_exp, n_embd]
  std::vector<QuantMatrix> up;     // n_expert x [n_ff_exp, n_embd]
  std::vector<QuantMatrix> down;   // n_expert x [n_embd, n_ff_exp]
  QuantMatrix shared_gate;         // [n_ff_shexp, n_embd]
  QuantMatrix shared_up;           // [n_ff_shexp, n_embd]
  QuantMatrix shared_down;         // [n_embd, n_ff_shexp]
  QuantMatrix shared_expert_gate;  // [1, n_embd]
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd] effective scale (1 + w)
  std::vector<float> post_attn_norm;  // [n_embd] effective scale (1 + w)
  AttentionWeights attn;              // full-attention layers only
  DeltaNetWeights gdn;                // linear-attention layers only
  MoeWeights moe;
};

struct Weights {
  QuantMatrix tok_embd;              // [n_vocab, n_embd]
  std::vector<LayerWeights> layers;  // [n_layer]
  std::vector<float> output_norm;    // [n_embd] effective scale (1 + w)
  QuantMatrix output;                // [n_vocab, n_embd] (lm_head)
};

// Calls f(QuantMatrix&) (const for a const Weights) on every matrix of w: embeddings, lm_head,
// and each layer's attention, DeltaNet, router, experts and shared expert. Matrices a layer does
// not use are empty (rows 0, no data).
template <typename W, typename F>
void for_each_matrix(W& w, F&& f) {
  f(w.tok_embd);
  f(w.output);
  for (auto& L : w.layers) {
    for (auto* q :
         {&L.attn.q_proj, &L.attn.k_proj, &L.attn.v_proj, &L.attn.o_proj, &L.gdn.in_proj_qkv,
          &L.gdn.in_proj_z, &L.gdn.in_proj_b, &L.gdn.in_proj_a, &L.gdn.out_proj, &L.moe.router,
          &L.moe.shared_gate, &L.moe.shared_up, &L.moe.shared_down, &L.moe.shared_expert_gate})
      f(*q);
    for (auto* v : {&L.moe.gate, &L.moe.up, &L.moe.down})
      for (auto& q : *v) f(q);
  }
}

}  // namespace orchid

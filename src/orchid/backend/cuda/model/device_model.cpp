// Uploads a loaded checkpoint to the GPU (model/device_model.h): every matrix once, kept in its
// stored format, routed experts and the shared expert stacked; memory from a DeviceArena.
#include "orchid/backend/cuda/model/device_model.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>

#include "orchid/backend/cuda/prefill/prefill_kernels.h"
#include "orchid/util/bf16.h"
#include "orchid/util/load_progress.h"

namespace orchid::cuda {

DeviceArena::~DeviceArena() {
  for (void* p : blocks_) cudaFree(p);
}

Expected<void*> DeviceArena::alloc(size_t bytes) {
  void* p = nullptr;
  const size_t n = std::max<size_t>(bytes, 16);
  if (cudaError_t e = cudaMalloc(&p, n); e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return err("GPU memory: cannot allocate ", n >> 20, " MiB (", free_b >> 20, " MiB free of ",
               total_b >> 20, "; ", bytes_ >> 20,
               " MiB already taken by the model): ", cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaMemset(p, 0, n); e != cudaSuccess) {
    cudaFree(p);
    return err("cudaMemset: ", cudaGetErrorString(e));
  }
  blocks_.push_back(p);
  bytes_ += int64_t(n);
  return p;
}

int64_t matrix_bytes(const DevMatrix& m) {
  int64_t n = int64_t(m.rows) * m.units * 16;
  if (m.fmt != DevFormat::bf16) n += int64_t(m.rows) * (m.cols / m.group) * 4;
  return n;
}

namespace {

Status copy_to(void* dst, const void* src, size_t bytes) {
  if (cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice); e != cudaSuccess)
    return err("cudaMemcpy: ", cudaGetErrorString(e));
  return {};
}

Expected<const float*> upload_vec(DeviceArena& arena, const std::vector<float>& v) {
  auto p = arena.alloc(v.size() * sizeof(float));
  if (!p) return p.error();
  ORCHID_TRY(copy_to(*p, v.data(), v.size() * sizeof(float)));
  return static_cast<const float*>(*p);
}

uint16_t to_bf16_bits(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::BF16:
      return static_cast<const uint16_t*>(base)[i];
    case DType::F16:
      return f32_to_bf16(f16_to_f32(static_cast<const uint16_t*>(base)[i]));
    default:
      return f32_to_bf16(static_cast<const float*>(base)[i]);
  }
}

// Stacks `parts` (each padded to `rows` rows and `cols` columns) into one device matrix. Parts
// that are all affine with one bit width and group and the exact shape keep their codes;
// anything else (or `dense`) becomes bf16 (exact for bf16 sources; quantized ones are dequantized
// first).
Expected<DevMatrix> upload_stack(DeviceArena& arena, const std::vector<const QuantMatrix*>& parts,
                                 int rows, int cols, bool dense = false) {
  const QuantMatrix& p0 = *parts.front();
  bool raw = !dense && p0.quantized() && (p0.bits == 4 || p0.bits == 8) && p0.group > 0;
  for (const QuantMatrix* q : parts)
    raw = raw && q->quantized() && q->bits == p0.bits && q->group == p0.group && q->rows == rows &&
          q->cols == cols;
  DevMatrix m;
  m.cols = cols;
  m.rows = int(parts.size()) * rows;
  if (raw) {
    m.fmt = p0.bits == 4 ? DevFormat::q4 : DevFormat::q8;
    m.group = p0.group;
    const int E = unit_elems(m.fmt);
    if (cols % E != 0 || p0.group % E != 0 || cols % p0.group != 0)
      return err("a ", p0.bits, "-bit matrix with ", cols, " columns and group ", p0.group,
                 " does not fit the GPU kernels' layout");
    m.units = cols / E;
    const size_t row_bytes = size_t(m.units) * 16, groups = size_t(cols / p0.group);
    auto w = arena.alloc(size_t(m.rows) * row_bytes);
    if (!w) return w.error();
    auto sb = arena.alloc(size_t(m.rows) * groups * 4);
    if (!sb) return sb.error();
    std::vector<uint32_t> pairs(size_t(rows) * groups);
    for (size_t i = 0; i < parts.size(); ++i) {
      const QuantMatrix& q = *parts[i];
      load_progress_add(uint64_t(q.bytes()));
      ORCHID_TRY(
          copy_to(static_cast<uint8_t*>(*w) + i * rows * row_bytes, q.data, rows * row_bytes));
      for (size_t g = 0; g < pairs.size(); ++g)
        pairs[g] = uint32_t(to_bf16_bits(q.scales, q.dtype, int64_t(g))) |
                   (uint32_t(to_bf16_bits(q.biases, q.dtype, int64_t(g))) << 16);
      ORCHID_TRY(
          copy_to(static_cast<uint32_t*>(*sb) + i * pairs.size(), pairs.data(), pairs.size() * 4));
    }
    m.w = *w;
    m.sb = static_cast<const uint32_t*>(*sb);
    ORCHID_TRY(set_scaled_code_exp(m, nullptr));
    return m;
  }
  m.fmt = DevFormat::bf16;
  m.units = (cols + 7) / 8;
  const size_t stride = size_t(m.units) * 8;
  auto w = arena.alloc(size_t(m.rows) * stride * 2);
  if (!w) return w.error();
  std::vector<uint16_t> host(size_t(rows) * stride);
  std::vector<float> row(static_cast<size_t>(cols));
  for (size_t i = 0; i < parts.size(); ++i) {
    const QuantMatrix& q = *parts[i];
    load_progress_add(uint64_t(q.bytes()));
    std::fill(host.begin(), host.end(), uint16_t(0));
    for (int64_t r = 0; r < std::min<int64_t>(q.rows, rows); ++r) {
      q.dequant_row(r, row.data());
      for (int64_t c = 0; c < std::min<int64_t>(q.cols, cols); ++c)
        host[size_t(r) * stride + size_t(c)] = f32_to_bf16(row[size_t(c)]);
    }
    ORCHID_TRY(copy_to(static_cast<uint16_t*>(*w) + i * host.size(), host.data(), host.size() * 2));
  }
  m.w = *w;
  return m;
}

// Same shape and storage, so the two can share a stacked device matrix without conversion.
bool same_layout(const QuantMatrix& a, const QuantMatrix& b) {
  return a.rows == b.rows && a.cols == b.cols && a.format == b.format && a.bits == b.bits &&
         a.group == b.group && (a.quantized() || a.dtype == b.dtype);
}

Expected<DevMatrix> upload_one(DeviceArena& arena, const QuantMatrix& q) {
  return upload_stack(arena, {&q}, int(q.rows), int(q.cols));
}

// Router and shared-expert gate go through one launch, so they must share a format.
Status upload_router(DeviceArena& arena, const MoeWeights& w, DevLayer& L) {
  auto r = upload_one(arena, w.router);
  if (!r) return r.error();
  auto g = upload_one(arena, w.shared_expert_gate);
  if (!g) return g.error();
  if (r->fmt != g->fmt || r->units != g->units) {
    r = upload_stack(arena, {&w.router}, int(w.router.rows), int(w.router.cols), true);
    if (!r) return r.error();
    g = upload_stack(arena, {&w.shared_expert_gate}, 1, int(w.router.cols), true);
    if (!g) return g.error();
  }
  L.router = *r;
  L.shared_gate = *g;
  return {};
}

}  // namespace

Status add_router_halves(DeviceArena& arena, DevLayer& L) {
  const DevMatrix& r = L.router;
  if (r.fmt != DevFormat::q8 || r.group != 64 || r.cols % 64 != 0) return {};
  auto w = arena.alloc(size_t(r.rows) * size_t(r.cols));  // 2 · rows of cols / 2 bytes
  if (!w) return w.error();
  auto sb = arena.alloc_n<uint32_t>(int64_t(2) * r.rows * (r.cols / 64));
  if (!sb) return sb.error();
  ORCHID_TRY(launch_split_q8(r, *w, *sb, nullptr));
  if (cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess)
    return err("splitting the router: ", cudaGetErrorString(e));
  L.router_halves = DevMatrix{*w, *sb, 2 * r.rows, r.cols, r.cols / 32, 64, DevFormat::q4};
  return set_scaled_code_exp(L.router_halves, nullptr);
}

namespace {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  std::vector<float> f(size_t(std::max(c.n_rot / 2, 1)));
  for (int i = 0; i < c.n_rot / 2; ++i)
    f[size_t(i)] = float(1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.n_rot)));
  return f;
}

Status check_shapes(const ModelConfig& c) {
  if (c.head_dim > kMaxHeadDim || c.head_dim % 8 != 0)
    return err("head_dim ", c.head_dim, " is not supported by the CUDA backend (multiple of 8, ≤ ",
               kMaxHeadDim, ")");
  const int g = c.n_head / c.n_head_kv;
  if (g > kMaxGqaGroup || g == 5 || g == 7)
    return err("a GQA group of ", g, " query heads is not supported by the CUDA backend");
  if (c.lin_head_dim_k > kMaxGdnHeadDim || c.lin_head_dim_v > kMaxGdnHeadDim)
    return err("linear-attention head dims above ", kMaxGdnHeadDim, " are not supported");
  if (c.n_expert_used + 1 > 32) return err("more than 31 experts per token are not supported");
  if (c.n_expert > 1024) return err("more than 1024 experts are not supported");
  return {};
}

}  // namespace

Expected<std::unique_ptr<DeviceModel>> upload_model(const Model& model) {
  uint64_t matrix_bytes = 0;
  for_each_matrix(model.weights, [&](const QuantMatrix& q) { matrix_bytes += uint64_t(q.bytes()); });
  LoadStep step("uploading weights to the GPU", matrix_bytes);
  const ModelConfig& c = model.config;
  ORCHID_TRY(check_shapes(c));
  auto dm = std::make_unique<DeviceModel>();
  dm->config = c;
  DeviceArena& A = dm->arena;
  const Weights& w = model.weights;
#define ORCHID_UP(dst, expr)    \
  do {                          \
    auto r_ = (expr);           \
    if (!r_) return r_.error(); \
    dst = *r_;                  \
  } while (0)
  ORCHID_UP(dm->embd, upload_one(A, w.tok_embd));
  ORCHID_UP(dm->lm_head, upload_one(A, w.output));
  ORCHID_UP(dm->out_norm, upload_vec(A, w.output_norm));
  ORCHID_UP(dm->inv_freq, upload_vec(A, rope_inv_freq(c)));
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    DevLayer L;
    ORCHID_UP(L.attn_norm, upload_vec(A, lw.attn_norm));
    ORCHID_UP(L.post_norm, upload_vec(A, lw.post_attn_norm));
    if (c.layer_types[size_t(l)] == LayerKind::full_attention) {
      ORCHID_UP(L.q, upload_one(A, lw.attn.q_proj));
      ORCHID_UP(L.k, upload_one(A, lw.attn.k_proj));
      ORCHID_UP(L.v, upload_one(A, lw.attn.v_proj));
      ORCHID_UP(L.o, upload_one(A, lw.attn.o_proj));
      ORCHID_UP(L.q_norm, upload_vec(A, lw.attn.q_norm));
      ORCHID_UP(L.k_norm, upload_vec(A, lw.attn.k_norm));
    } else {
      const DeltaNetWeights& g = lw.gdn;
      ORCHID_UP(L.qkv, upload_one(A, g.in_proj_qkv));
      ORCHID_UP(L.z, upload_one(A, g.in_proj_z));
      ORCHID_UP(L.b, upload_one(A, g.in_proj_b));
      ORCHID_UP(L.a, upload_one(A, g.in_proj_a));
      ORCHID_UP(L.out, upload_one(A, g.out_proj));
      ORCHID_UP(L.conv_w, upload_vec(A, g.conv));
      ORCHID_UP(L.A_log, upload_vec(A, g.A_log));
      ORCHID_UP(L.dt_bias, upload_vec(A, g.dt_bias));
      ORCHID_UP(L.gnorm, upload_vec(A, g.norm));
    }
    const MoeWeights& m = lw.moe;
    ORCHID_TRY(upload_router(A, m, L));
    ORCHID_TRY(add_router_halves(A, L));
    std::vector<const QuantMatrix*> gate, up, down;
    for (int e = 0; e < c.n_expert; ++e) {
      gate.push_back(&m.gate[size_t(e)]);
      up.push_back(&m.up[size_t(e)]);
      down.push_back(&m.down[size_t(e)]);
    }
    L.shared_apart = !same_layout(m.shared_gate, m.gate[0]) || !same_layout(m.shared_up, m.up[0]) ||
                     !same_layout(m.shared_down, m.down[0]);
    if (L.shared_apart) {
      ORCHID_UP(L.sh_gate, upload_one(A, m.shared_gate));
      ORCHID_UP(L.sh_up, upload_one(A, m.shared_up));
      ORCHID_UP(L.sh_down, upload_one(A, m.shared_down));
    } else {
      gate.push_back(&m.shared_gate);
      up.push_back(&m.shared_up);
      down.push_back(&m.shared_down);
    }
    ORCHID_UP(L.gate, upload_stack(A, gate, c.n_ff_exp, c.n_embd));
    ORCHID_UP(L.up, upload_stack(A, up, c.n_ff_exp, c.n_embd));
    ORCHID_UP(L.down, upload_stack(A, down, c.n_embd, c.n_ff_exp));
    dm->layers.push_back(L);
  }
#undef ORCHID_UP
  return dm;
}

}  // namespace orchid::cuda

// `orchid info -m DIR|FILE.gguf`: what was loaded — layout, dimensions, storage of each tensor
// group (bits, group size) and bytes.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "orchid/backend/cpu/isa.h"
#include "orchid/model/gguf_split.h"

namespace orchid::cli {
namespace {

std::string describe(const QuantMatrix& m) {
  if (m.fp8())
    return "e4m3/" + std::to_string(m.block_rows) + "x" + std::to_string(m.group) + " " +
           std::string(dtype_name(m.dtype));
  if (!m.quantized()) return std::string(dtype_name(m.dtype));
  return "q" + std::to_string(m.bits) + " g" + std::to_string(m.group);
}

// Tensor groups in a fixed order, each with its storage kinds and bytes.
struct GroupStats {
  std::map<std::string, int64_t> kinds;  // storage → bytes
};

void add(std::map<std::string, GroupStats>& g, const std::string& group, const QuantMatrix& m) {
  g[group].kinds[describe(m)] += m.bytes();
}

}  // namespace

void add_info(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ModelOptions>();
  CLI::App* cmd = app.add_subcommand("info", "describe a model directory or GGUF file");
  add_model_options(cmd, *opts);
  cmd->callback([opts, &exit_code] {
    LoadOptions lo;
    lo.quantize_q4 = opts->quantize == "q4";
    auto loaded = load_model(opts->dir, lo);
    if (!loaded) return void(exit_code = fail(loaded.message()));
    const Model& m = **loaded;
    const ModelConfig& c = m.config;
    std::printf("model      %s\n", m.dir.c_str());
    std::printf("layout     %s (config %s, %s)\n", m.layout_name().c_str(), c.model_type.c_str(),
                c.nested ? "nested text_config" : "flat");
    if (m.checkpoint)
      std::printf("tensors    %zu in %zu file(s), %.2f MiB\n", m.checkpoint->size(),
                  m.checkpoint->shard_count(), double(m.checkpoint->total_bytes()) / (1 << 20));
    else if (!m.gguf.empty()) {
      size_t bytes = 0;
      for (const MappedFile& f : m.gguf) bytes += f.size();
      std::printf("file       GGUF, %zu part(s), %.2f MiB\n", m.gguf.size(),
                  double(bytes) / (1 << 20));
      // The file's own tensor types: count, bytes and bits per weight of each.
      if (auto parts = open_gguf(m.dir)) {
        struct TypeStats {
          int64_t tensors = 0, elems = 0, bytes = 0;
        };
        std::map<std::string, TypeStats> types;
        int64_t elems = 0, tbytes = 0;
        for (const GgufTensor& t : parts->merged.tensors) {
          TypeStats& s = types[ggml_type_name(t.type)];
          ++s.tensors, s.elems += t.numel(), s.bytes += int64_t(t.nbytes);
          elems += t.numel(), tbytes += int64_t(t.nbytes);
        }
        std::printf("\n%-10s %8s %14s %14s %6s\n", "gguf type", "tensors", "weights", "bytes",
                    "bpw");
        for (const auto& [name, s] : types)
          std::printf("%-10s %8lld %14lld %14lld %6.2f\n", name.c_str(), (long long)s.tensors,
                      (long long)s.elems, (long long)s.bytes,
                      8.0 * double(s.bytes) / double(s.elems));
        std::printf("%-10s %8zu %14lld %14lld %6.2f\n", "total", parts->merged.tensors.size(),
                    (long long)elems, (long long)tbytes, 8.0 * double(tbytes) / double(elems));
      }
    }
    std::printf("vocab      %lld   hidden %d   layers %d (%d full attention, %d Gated DeltaNet)\n",
                (long long)c.n_vocab, c.n_embd, c.n_layer, c.n_full_layers(),
                c.n_layer - c.n_full_layers());
    std::printf("attention  %d q heads, %d kv heads, head_dim %d, rotary %d, theta %g\n", c.n_head,
                c.n_head_kv, c.head_dim, c.n_rot, c.rope_theta);
    std::printf("deltanet   %d k heads x %d, %d v heads x %d, conv %d\n", c.lin_n_head_k,
                c.lin_head_dim_k, c.lin_n_head_v, c.lin_head_dim_v, c.lin_conv_kernel);
    std::printf("moe        %d experts, top %d, ff %d, shared ff %d\n", c.n_expert, c.n_expert_used,
                c.n_ff_exp, c.n_ff_shexp);

    std::printf("cpu        %s; the cpu backend's fast path runs on it (--exact: the fp32 one)\n",
                std::string(cpu::isa_name(cpu::detected_isa())).c_str());

    std::map<std::string, GroupStats> groups;
    const Weights& w = m.weights;
    add(groups, "1 embed_tokens", w.tok_embd);
    add(groups, "8 lm_head", w.output);
    for (const LayerWeights& L : w.layers) {
      if (L.attn.q_proj.data) {
        for (const auto* q : {&L.attn.q_proj, &L.attn.k_proj, &L.attn.v_proj, &L.attn.o_proj})
          add(groups, "2 attention", *q);
      } else {
        for (const auto* q : {&L.gdn.in_proj_qkv, &L.gdn.in_proj_z, &L.gdn.in_proj_b,
                              &L.gdn.in_proj_a, &L.gdn.out_proj})
          add(groups, "3 deltanet", *q);
      }
      add(groups, "4 router", L.moe.router);
      for (size_t e = 0; e < L.moe.gate.size(); ++e) {
        add(groups, "5 experts", L.moe.gate[e]);
        add(groups, "5 experts", L.moe.up[e]);
        add(groups, "5 experts", L.moe.down[e]);
      }
      for (const auto* q : {&L.moe.shared_gate, &L.moe.shared_up, &L.moe.shared_down})
        add(groups, "6 shared expert", *q);
      add(groups, "7 shared expert gate", L.moe.shared_expert_gate);
    }
    int64_t total = 0;
    std::printf("\n%-22s %-22s %12s\n", "group", "storage", "bytes");
    for (const auto& [name, g] : groups) {
      std::string kinds;
      int64_t bytes = 0;
      for (const auto& [k, b] : g.kinds) {
        kinds += (kinds.empty() ? "" : ", ") + k;
        bytes += b;
      }
      total += bytes;
      std::printf("%-22s %-22s %12lld\n", name.substr(2).c_str(), kinds.c_str(), (long long)bytes);
    }
    std::printf("%-22s %-22s %12lld (%.2f MiB, matrices only)\n", "total", "", (long long)total,
                double(total) / (1 << 20));
  });
}

}  // namespace orchid::cli

#include "orchid/backend/select_backend.h"

#include "orchid/backend/cpu/cpu_backend.h"
#ifdef ORCHID_HAVE_CUDA
#include "orchid/backend/cuda/cuda_backend.h"
#endif

namespace orchid {

namespace {

// The note only says why the cpu backend runs when cuda was asked for (auto, a GPU present):
// the CLI prints notes on stderr, which tools and tests read beside stdout.
std::unique_ptr<Backend> cpu_backend(const Model& model, const CpuOptions& o, std::string* note,
                                     const std::string& why = "") {
  if (note && !why.empty()) *note = why + "; using the cpu backend (" + cpu_path_summary(o) + ")";
  return make_cpu_backend(model, o);
}

}  // namespace

std::string cpu_path_summary(const CpuOptions& o) {
  return o.fast ? "fast path on " + cpu::isa_summary(o.isa) : "exact fp32 path";
}

Expected<CpuOptions> cpu_options(bool exact) {
  auto cpu = cpu_options_from_env();
  if (cpu && exact) cpu->fast = false;
  return cpu;
}

Expected<std::unique_ptr<Backend>> make_backend(const std::string& name, const Model& model,
                                                std::string* note, bool exact) {
  auto cpu = cpu_options(exact);
  if (!cpu) return cpu.error();
  if (name == "cpu") return cpu_backend(model, *cpu, note);
  if (name != "cuda" && name != "auto")
    return err("unknown backend '", name, "' (expected cpu, cuda or auto)");
#ifdef ORCHID_HAVE_CUDA
  Status usable = cuda_device_usable();
  if (usable.ok()) {
    auto b = make_cuda_backend(model);
    if (b) {
      if (note) *note = cuda_backend_summary(**b);
      return b;
    }
    if (name == "cuda") return b.error();
    return cpu_backend(model, *cpu, note, "cuda backend unavailable (" + b.message() + ")");
  }
  if (name == "cuda") return err("--backend cuda: ", usable.message());
  return cpu_backend(model, *cpu, note);
#else
  if (name == "cuda") return err("--backend cuda: this build of orchid has no CUDA backend");
  return cpu_backend(model, *cpu, note);
#endif
}

}  // namespace orchid

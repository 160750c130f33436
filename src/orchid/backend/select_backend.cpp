#include "orchid/backend/select_backend.h"

#include "orchid/backend/cpu/cpu_backend.h"
#ifdef ORCHID_HAVE_CUDA
#include "orchid/backend/cuda/cuda_backend.h"
#endif

namespace orchid {

Expected<std::unique_ptr<Backend>> make_backend(const std::string& name, const Model& model,
                                                std::string* note) {
  auto cpu = cpu_options_from_env();
  if (!cpu) return cpu.error();
  if (name == "cpu") return make_cpu_backend(model, *cpu);
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
    if (note) *note = "cuda backend unavailable (" + b.message() + "); using the cpu backend";
    return make_cpu_backend(model, *cpu);
  }
  if (name == "cuda") return err("--backend cuda: ", usable.message());
  return make_cpu_backend(model, *cpu);
#else
  if (name == "cuda") return err("--backend cuda: this build of orchid has no CUDA backend");
  return make_cpu_backend(model, *cpu);
#endif
}

}  // namespace orchid

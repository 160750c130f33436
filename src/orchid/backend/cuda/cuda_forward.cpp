// Running tokens through a state: forward() (prompts in chunks on the tensor cores,
// prefill/chunk.cpp; one token, or every token with ORCHID_PREFILL_CHUNK=1, as a decode step, logits to
// the host where asked) and the on-device decode loop (the next token chosen and fed on the device;
// the host reads ids from a double-buffered pinned slot), plus synthetic contexts for speed runs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid::cuda {

Status CudaBackend::forward(BackendState& state, std::span<const int32_t> tokens, LogitsMode mode,
                            std::vector<float>& logits, int64_t chunk, const CancelCheck& cancel) {
  auto& st = static_cast<CudaState&>(state);
  const int64_t n = int64_t(tokens.size()), n_past0 = st.n_past_;
  ORCHID_TRY(check_forward_input(tokens, c_.n_vocab, st.n_past_, st.capacity_));
  const int64_t V = c_.n_vocab;
  logits.assign(size_t(mode == LogitsMode::all ? n * V : V), 0.f);
  // Two tokens or more: chunks on the tensor cores (one token is a decode step either way).
  if (sw_.prefill && n >= 2 && prefill_supported())
    return forward_chunked(st, tokens, mode, logits, chunk, nullptr, cancel);
  ORCHID_CUDA(cudaMemsetAsync(st.d_halt, 0, sizeof(int), stream_));
  PickConfig pick;
  pick.want_logits = true;
  for (int64_t c0 = 0; c0 < n; c0 += kPromptChunk) {
    const int64_t cn = std::min<int64_t>(kPromptChunk, n - c0);
    ORCHID_CUDA(cudaMemcpyAsync(prompt_, tokens.data() + c0, size_t(cn) * 4, cudaMemcpyHostToDevice,
                                stream_));
    for (int64_t i = 0; i < cn; ++i) {
      const int64_t t = c0 + i;
      // Token by token, each step is a "chunk": asked before each (the host runs ahead of the
      // GPU by the launch queue, so the stop lands within that many steps).
      if (cancel_requested(cancel)) return cancel_forward(st, n_past0, t, n);
      const bool head = mode == LogitsMode::all || t == n - 1;
      ORCHID_CUDA(cudaMemcpyAsync(token_, prompt_ + i, 4, cudaMemcpyDeviceToDevice, stream_));
      ORCHID_TRY(run_step(st, head, pick));
      st.n_past_ += 1;
      if (head) {
        float* dst = logits.data() + (mode == LogitsMode::all ? t * V : 0);
        ORCHID_CUDA(cudaMemcpyAsync(dst, logits_, size_t(V) * 4, cudaMemcpyDeviceToHost, stream_));
      }
    }
    ORCHID_TRY(sync("forward"));  // the prompt chunk buffer is reused next round
  }
  return {};
}

Status CudaBackend::cancel_forward(CudaState& st, int64_t n_past0, int64_t done, int64_t total) {
  const int pos[2] = {int(n_past0), 0};
  ORCHID_CUDA(cudaMemcpyAsync(st.d_pos, pos, sizeof pos, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(sync("cancelled forward"));  // after the launched work, which writes past n_past0
  st.n_past_ = n_past0;
  return forward_cancelled(done, total);
}

Expected<std::vector<int32_t>> CudaBackend::decode_on_device(
    BackendState& state, int32_t token, int max_new, const DeviceDecodeOptions& opts,
    const std::function<bool(int32_t)>& on_token) {
  auto& st = static_cast<CudaState&>(state);
  if (token < 0 || token >= c_.n_vocab)
    return err("token id ", token, " is outside the vocabulary");
  if (int(opts.stop_ids.size()) > kMaxStop) return err("at most ", kMaxStop, " stop ids");
  max_new = int(std::min<int64_t>(max_new, st.capacity_ - st.n_past_));
  std::vector<int32_t> consumed = {token};
  if (max_new <= 0) return err("context overflow: the state is full");
  PickConfig pick;
  pick.n_stop = int(opts.stop_ids.size());
  pick.inv_temp = opts.temperature > 0.f ? 1.f / opts.temperature : 0.f;
  pick.seed = opts.seed;
  ORCHID_CUDA(cudaMemsetAsync(st.d_halt, 0, sizeof(int), stream_));
  if (!opts.stop_ids.empty())
    ORCHID_CUDA(cudaMemcpyAsync(stop_ids_, opts.stop_ids.data(), opts.stop_ids.size() * 4,
                                cudaMemcpyHostToDevice, stream_));
  ORCHID_CUDA(cudaMemcpyAsync(token_, &token, 4, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(sync("decode start"));
  const int64_t start = st.n_past_;
  std::vector<int32_t> picks;
  int enqueued = 0, handled = 0;
  bool stop = false;
  auto enqueue = [&]() -> Status {
    ORCHID_TRY(run_step(st, true, pick));
    ORCHID_CUDA(cudaEventRecord(slot_ev_[enqueued % 2], stream_));
    ++enqueued;
    st.n_past_ += 1;  // provisional: corrected from the device below
    return {};
  };
  ORCHID_TRY(enqueue());
  while (handled < enqueued) {
    if (!stop && enqueued < max_new) ORCHID_TRY(enqueue());
    ORCHID_CUDA(cudaEventSynchronize(slot_ev_[handled % 2]));
    // The step at position start + handled wrote its id to slot (position & 1) of the mapped
    // buffer; a step halted by an earlier stop id writes nothing, but then `stop` is set.
    const int32_t id = static_cast<volatile int*>(pinned_)[(start + handled) & 1];
    picks.push_back(id);
    ++handled;
    if (stop) continue;
    if (std::find(opts.stop_ids.begin(), opts.stop_ids.end(), id) != opts.stop_ids.end() ||
        !on_token(id))
      stop = true;
  }
  ORCHID_CUDA(cudaMemcpyAsync(pinned_ + 2, st.d_pos, 4, cudaMemcpyDeviceToHost, stream_));
  ORCHID_TRY(sync("decode"));
  st.n_past_ = pinned_[2];
  for (int64_t i = 1; i < st.n_past_ - start && size_t(i - 1) < picks.size(); ++i)
    consumed.push_back(picks[size_t(i - 1)]);
  return consumed;
}

Expected<int32_t> CudaBackend::step_and_pick(BackendState& state, int32_t token,
                                             const std::vector<uint32_t>* allowed,
                                             const DeviceDecodeOptions& opts) {
  auto& st = static_cast<CudaState&>(state);
  ORCHID_TRY(check_forward_input(std::span<const int32_t>(&token, 1), c_.n_vocab, st.n_past_,
                                 st.capacity_));
  const size_t words = size_t((c_.n_vocab + 31) / 32);
  if (allowed && allowed->size() != words)
    return err("allowed-ids bitset of ", allowed->size(), " words; the vocabulary needs ", words);
  PickConfig pick;
  pick.inv_temp = opts.temperature > 0.f ? 1.f / opts.temperature : 0.f;
  pick.seed = opts.seed;
  pick.masked = allowed != nullptr;
  ORCHID_CUDA(cudaMemsetAsync(st.d_halt, 0, sizeof(int), stream_));
  if (allowed)
    ORCHID_CUDA(cudaMemcpyAsync(allowed_, allowed->data(), words * 4, cudaMemcpyHostToDevice,
                                stream_));
  ORCHID_CUDA(cudaMemcpyAsync(token_, &token, 4, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(run_step(st, true, pick));
  st.n_past_ += 1;
  ORCHID_CUDA(cudaMemcpyAsync(pinned_ + 2, token_, 4, cudaMemcpyDeviceToHost, stream_));
  ORCHID_TRY(sync("constrained step"));
  const int32_t id = pinned_[2];
  if (id < 0 || id >= c_.n_vocab) return err("constrained step: the device picked no token");
  return id;
}

Status CudaBackend::fill_synthetic_context(BackendState& state, int64_t n, uint64_t seed) {
  auto& st = static_cast<CudaState&>(state);
  if (n < 0 || n >= st.capacity_) return err("synthetic context of ", n, " tokens does not fit");
  const int64_t kv = n * c_.n_head_kv * c_.head_dim;
  for (int l = 0; l < c_.n_layer; ++l) {
    if (!st.kc[size_t(l)]) continue;
    ORCHID_TRY(launch_fill_uniform_bf16(st.kc[size_t(l)], kv, -1.f, 1.f, seed + 2 * l, stream_));
    ORCHID_TRY(
        launch_fill_uniform_bf16(st.vc[size_t(l)], kv, -1.f, 1.f, seed + 2 * l + 1, stream_));
  }
  ORCHID_TRY(launch_fill_uniform_f32(st.rec_block, st.rec_bytes / 4, -0.05f, 0.05f, seed ^ 0x5eed,
                                     stream_));
  const int pos[2] = {int(n), 0};
  ORCHID_CUDA(cudaMemcpyAsync(st.d_pos, pos, sizeof pos, cudaMemcpyHostToDevice, stream_));
  ORCHID_TRY(sync("synthetic context"));
  st.n_past_ = n;
  return {};
}

}  // namespace orchid::cuda

// The batched decode: up to kMaxSlots states advanced together, one token each a step, by one
// launch sequence whose kernels take a slot grid dimension (common/kernels.h: SlotBatch). The
// weights are read once a step for all slots (the lm_head's stream multiplies each staged row
// with every slot's x̂; the other GEMVs' slot copies read rows the first copy just pulled into
// L2), and the ~7 launches a layer are paid once for the batch. Each slot's arithmetic is its
// batch-1 kernel's, so a lane gets exactly the tokens it gets alone.
//
// Each lane's picks feed its next step on the device; the host reads them from mapped memory one
// step behind the device (as the batch-1 loop does), and halts a lane on the device once it has
// ended (its caller stopped, or all its picks are made); a stop id halts its lane on the device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "orchid/backend/cuda/cuda_backend_impl.h"

namespace orchid::cuda {

bool CudaBackend::batch_step_runs() {
  const Switches& w = sw_;
  if (!(w.batch_decode && w.dp4a && w.fused_norm && w.fused_routing && w.fused_expert && w.fused_qk &&
        w.mma_attention && w.split_kv && bulk_batched_supported()))
    return false;
  if (batch_runs_ < 0) {
    // Capture one step of two slots, never launched: each launcher refuses a shape it has no
    // batched kernel for.
    sw_.apply();
    const SlotBatch b{2, slot_stride_, slot_states_, 0, c_.n_layer};
    bool ok = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (ok) {
      const Status s = enqueue_step(nullptr, b, true, PickConfig{}, 1, 1, nullptr);
      cudaGraph_t graph = nullptr;
      ok = cudaStreamEndCapture(stream_, &graph) == cudaSuccess && s.ok();
      if (graph) cudaGraphDestroy(graph);
    }
    cudaGetLastError();  // a refused launch's error, if any, is answered by `ok`
    batch_runs_ = ok ? 1 : 0;
  }
  return batch_runs_ == 1;
}

Status CudaBackend::run_batch_step(int slots, int n_split, int n_split_min, int n_stop) {
  sw_.apply();
  PickConfig pick;
  pick.n_stop = n_stop;
  const SlotBatch b{slots, slot_stride_, slot_states_, 0, c_.n_layer};
  auto enqueue = [&] {
    return enqueue_step(nullptr, b, true, pick, n_split, n_split_min, nullptr);
  };
  if (!sw_.graph) return enqueue();
  const std::string key = std::to_string(slots) + "/" + std::to_string(n_split) + "/" +
                          std::to_string(n_split_min) + "/" + std::to_string(n_stop) + "/" +
                          sw_.graph_key();
  return launch_graph(batch_graph_, key, enqueue);
}

Status CudaBackend::decode_batch(std::span<DecodeLane> lanes,
                                 const std::function<bool()>& pause) {
  for (size_t i = 0; i < lanes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (lanes[i].state == lanes[j].state) return err("decode_batch: a state in two lanes");
  if (lanes.size() < 2 || !batch_step_runs()) return Backend::decode_batch(lanes);
  for (size_t i = 0; i < lanes.size(); i += kMaxSlots) {
    std::span<DecodeLane> group = lanes.subspan(i, std::min<size_t>(kMaxSlots, lanes.size() - i));
    ORCHID_TRY(group.size() == 1 ? Backend::decode_batch(group) : decode_slots(group, pause));
  }
  return {};
}

Status CudaBackend::upload_slots(std::span<const DecodeLane> lanes) {
  const int B = int(lanes.size());
  if (B < 1 || B > kMaxSlots) return err("a batch of ", B, " lanes (1 to ", kMaxSlots, ")");
  std::vector<void*> table(size_t(kMaxSlots) * c_.n_layer * 2, nullptr);
  float inv_temp[kMaxSlots] = {};
  uint64_t seed[kMaxSlots] = {};
  std::vector<int> stops(size_t(kMaxSlots) * kMaxStopIds, -1);
  for (int b = 0; b < B; ++b) {
    const DecodeLane& l = lanes[size_t(b)];
    const auto* st = static_cast<const CudaState*>(l.state);
    if (l.token < 0 || l.token >= c_.n_vocab)
      return err("token id ", l.token, " is outside the vocabulary");
    if (int(l.opts.stop_ids.size()) > kMaxStopIds) return err("at most ", kMaxStopIds, " stop ids");
    for (int layer = 0; layer < c_.n_layer; ++layer) {
      const size_t at = (size_t(b) * c_.n_layer + size_t(layer)) * 2;
      const bool attn = st->kc[size_t(layer)] != nullptr;
      table[at] = attn ? static_cast<void*>(st->kc[size_t(layer)]) : st->ring[size_t(layer)];
      table[at + 1] = attn ? static_cast<void*>(st->vc[size_t(layer)]) : st->S[size_t(layer)];
    }
    inv_temp[b] = l.opts.temperature > 0.f ? 1.f / l.opts.temperature : 0.f;
    seed[b] = l.opts.seed;
    std::copy(l.opts.stop_ids.begin(), l.opts.stop_ids.end(),
              stops.begin() + int64_t(b) * kMaxStopIds);
  }
  ORCHID_CUDA(cudaMemcpyAsync(slot_states_, table.data(), table.size() * sizeof(void*),
                              cudaMemcpyHostToDevice, stream_));
  ORCHID_CUDA(cudaMemcpyAsync(slot_inv_temp_, inv_temp, sizeof inv_temp, cudaMemcpyHostToDevice,
                              stream_));
  ORCHID_CUDA(cudaMemcpyAsync(slot_seed_, seed, sizeof seed, cudaMemcpyHostToDevice, stream_));
  ORCHID_CUDA(cudaMemcpyAsync(slot_stop_ids_, stops.data(), stops.size() * sizeof(int),
                              cudaMemcpyHostToDevice, stream_));
  for (int b = 0; b < B; ++b) {
    const int64_t so = int64_t(b) * slot_stride_;
    ORCHID_CUDA(cudaMemcpyAsync(slot_pos_ + so, static_cast<const CudaState*>(lanes[size_t(b)].state)->d_pos,
                                sizeof(int), cudaMemcpyDeviceToDevice, stream_));
    ORCHID_CUDA(cudaMemsetAsync(slot_halt_ + so, 0, sizeof(int), stream_));
    ORCHID_CUDA(cudaMemcpyAsync(token_ + so, &lanes[size_t(b)].token, sizeof(int),
                                cudaMemcpyHostToDevice, stream_));
  }
  return sync("batched decode start");  // the host arrays above go out of scope
}

Expected<std::vector<KernelTiming>> CudaBackend::profile_batch_step(
    std::span<const DecodeLane> lanes) {
  ORCHID_TRY(upload_slots(lanes));
  sw_.apply();
  int n_split = 1, n_split_min = kMaxSplitsPerHead;
  for (const DecodeLane& l : lanes) {
    const int s = split_for(l.state->n_past() + 1);
    n_split = std::max(n_split, s), n_split_min = std::min(n_split_min, s);
  }
  Profiler prof(stream_);
  prof.mark("start", 0);
  const SlotBatch b{int(lanes.size()), slot_stride_, slot_states_, 0, c_.n_layer};
  ORCHID_TRY(enqueue_step(nullptr, b, true, PickConfig{}, n_split, n_split_min, &prof));
  ORCHID_TRY(sync("profiled batched step"));
  return prof.timings();
}

Status CudaBackend::decode_slots(std::span<DecodeLane> lanes,
                                 const std::function<bool()>& pause) {
  const int B = int(lanes.size());
  struct Run {
    CudaState* st = nullptr;
    int max_new = 0;
    int64_t start = 0;              // n_past before the first step
    std::vector<int32_t> picks;     // the id each step it ran wrote (stale once halted)
    bool ended = false;             // the host has seen its last pick
    bool stopped = false;           // by a stop id or its caller
    bool halted = false;            // the host has halted it on the device
  };
  std::vector<Run> runs(static_cast<size_t>(B));
  int n_stop = 0;
  for (int b = 0; b < B; ++b) {
    DecodeLane& l = lanes[size_t(b)];
    Run& r = runs[size_t(b)];
    r.st = static_cast<CudaState*>(l.state);
    r.max_new = int(std::min<int64_t>(l.max_new, r.st->capacity_ - r.st->n_past_));
    if (r.max_new <= 0) return err("context overflow: the state is full");
    r.start = r.st->n_past_;
    n_stop = std::max(n_stop, int(l.opts.stop_ids.size()));
  }
  ORCHID_TRY(upload_slots(lanes));

  std::vector<unsigned> ran;  // per enqueued step: the lanes it ran (bit b)
  bool paused = false;        // `pause` said so: no more steps
  // Enqueues the next step for the lanes still going, after halting on the device those the host
  // has ended or whose picks are all enqueued; false when none is left.
  auto enqueue = [&]() -> Expected<bool> {
    const int k = int(ran.size());
    unsigned mask = 0;
    int n_split = 1, n_split_min = kMaxSplitsPerHead;
    for (int b = 0; b < B; ++b) {
      Run& r = runs[size_t(b)];
      if (!r.halted && (r.ended || k >= r.max_new)) {
        ORCHID_CUDA(cudaMemsetAsync(slot_halt_ + int64_t(b) * slot_stride_, 0xff, sizeof(int),
                                    stream_));
        r.halted = true;
      }
      if (r.halted) continue;
      mask |= 1u << b;
      const int s = split_for(r.start + k + 1);
      n_split = std::max(n_split, s), n_split_min = std::min(n_split_min, s);
    }
    if (mask == 0 || paused) return false;
    ORCHID_TRY(run_batch_step(B, n_split, n_split_min, n_stop));
    ORCHID_CUDA(cudaEventRecord(slot_ev_[k % 2], stream_));
    ran.push_back(mask);
    return true;
  };
  Expected<bool> more = enqueue();
  if (!more) return more.error();
  for (size_t handled = 0; handled < ran.size(); ++handled) {
    if (*more) {
      more = enqueue();
      if (!more) return more.error();
    }
    ORCHID_CUDA(cudaEventSynchronize(slot_ev_[handled % 2]));
    for (int b = 0; b < B; ++b) {
      if (!(ran[handled] >> b & 1)) continue;
      Run& r = runs[size_t(b)];
      // Written by this step unless an earlier stop id halted the lane (then r.ended is set).
      const int32_t id =
          static_cast<volatile int*>(pinned_slots_)[2 * b + ((r.start + int64_t(handled)) & 1)];
      r.picks.push_back(id);
      if (r.ended) continue;
      const DecodeLane& l = lanes[size_t(b)];
      if (std::find(l.opts.stop_ids.begin(), l.opts.stop_ids.end(), id) != l.opts.stop_ids.end() ||
          !l.on_token(id))
        r.ended = r.stopped = true;
      else if (int(handled) + 1 == r.max_new)
        r.ended = true;
    }
    if (!paused && pause && pause()) paused = true;
  }
  // Where each lane stands: its position on the device, back into its state.
  int* const host_pos = pinned_slots_ + 2 * kMaxSlots;
  for (int b = 0; b < B; ++b) {
    const int64_t so = int64_t(b) * slot_stride_;
    ORCHID_CUDA(cudaMemcpyAsync(host_pos + b, slot_pos_ + so, sizeof(int), cudaMemcpyDeviceToHost,
                                stream_));
    ORCHID_CUDA(cudaMemcpyAsync(runs[size_t(b)].st->d_pos, slot_pos_ + so, sizeof(int),
                                cudaMemcpyDeviceToDevice, stream_));
  }
  ORCHID_TRY(sync("batched decode"));
  for (int b = 0; b < B; ++b) {
    Run& r = runs[size_t(b)];
    DecodeLane& l = lanes[size_t(b)];
    r.st->n_past_ = static_cast<volatile int*>(host_pos)[b];
    l.ended = r.stopped;
    l.consumed = {l.token};
    for (int64_t i = 1; i < r.st->n_past_ - r.start && size_t(i - 1) < r.picks.size(); ++i)
      l.consumed.push_back(r.picks[size_t(i - 1)]);
  }
  return {};
}

}  // namespace orchid::cuda

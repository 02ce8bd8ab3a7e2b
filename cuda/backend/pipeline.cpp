// Pipelined steps (scheduler.async_steps; docs/contracts.md "Pipelined steps", docs/cuda-backend.md
// "Pipelined steps"): submit() plans step n+1 into the upload image step n does not read (two
// alternate), launches or replays it behind step n on the one stream and returns without
// synchronizing; collect() waits for the step's end event and reads its tokens from pinned
// buffers its async copies wrote. Pending inputs are the previous step's sampled tokens, fed on
// the device (cuda/async_steps.h, cuda/async_feed.h).
//
// CUDA graphs: the captures read the fixed device buffers (d_tokens, d_tables, ...) that
// upload_step() fills by on-stream copies from whichever image this step uses, so one capture
// serves both images (no capture per image) and the pending-token gather runs on d_tokens
// between the upload and the replay.
//
// A step that cannot be pipelined (cuda/async_steps.h pipeline_blocker_*: a host-sampled row,
// return_logits, several lm_head chunks, profiling) waits for the steps in flight, resolves its
// pending rows on the host from their results and runs as step() does; its StepStats::sync says
// why (the engine counts them: strata_sync_steps_total). A census step (report_kept) pipelines:
// the gather of its rows' kept positions and the copy to the slot's pinned buffer are queued
// after the step's work, and collect() counts them (census.cpp).
// released_pages need nothing here: the backend keeps no per-page state that a release clears
// (scores and positions of a page are rewritten by the plan that next writes it, in stream
// order after every earlier step).
//
// Not yet run on a GPU (tests/gpu/async_steps_test.cpp is the proof to run).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "cuda/async_feed.h"
#include "cuda/backend/backend_impl.h"
#include "runtime/error.h"

namespace strata::cuda {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void CudaBackendImpl::ensure_async() {
  if (async_ready) return;
  const StepImageLayout at = StepImageLayout::for_limits(step_limits());
  for (AsyncSlot& sl : aslots) {
    sl.image_mem = PinnedArray<std::byte>(at.bytes);
    sl.image = StepImage(std::span<std::byte>(sl.image_mem.get(), sl.image_mem.size()), at);
    sl.h_argmax = PinnedArray<int>(static_cast<std::size_t>(logit_rows));
    sl.h_logz = PinnedArray<float>(static_cast<std::size_t>(logit_rows));
    sl.aux = PinnedArray<std::int32_t>(static_cast<std::size_t>(5) * max_seqs);
    sl.sampler = std::make_unique<DeviceSampler>();
  }
  for (auto& pair : aev)
    for (cudaEvent_t& e : pair) CUDA_CHECK(cudaEventCreate(&e));
  d_fed = DeviceArray<std::int32_t>(static_cast<std::size_t>(max_seqs));
  d_aux = DeviceArray<std::int32_t>(static_cast<std::size_t>(5) * max_seqs);
  async_ready = true;
}

void CudaBackendImpl::submit(const StepPlan& plan) {
  CUDA_CHECK(cudaSetDevice(device));
  ensure_async();
  const SyncReason why =
      pipeline_blocker_of_plan(plan, mc.vocab_size, tp.comm != nullptr, profile != nullptr);
  if (why != SyncReason::kNone)
    submit_host(plan, why);
  else
    submit_device(plan);
}

StepResult CudaBackendImpl::collect() {
  STRATA_CHECK(!inflight.empty(), "collect() without a submitted step");
  if (!inflight.front().done) finish(inflight.front());
  AsyncStep st = std::move(inflight.front());
  inflight.pop_front();
  if (st.error) std::rethrow_exception(st.error);
  return std::move(st.result);
}

void CudaBackendImpl::finish_all() {
  for (AsyncStep& st : inflight)
    if (!st.done) finish(st);
}

void CudaBackendImpl::submit_host(const StepPlan& plan, SyncReason why) {
  finish_all();  // their results resolve this plan's pending rows
  if (last_kind == LastStep::kDevice) {
    // step() measures its gap from ev1 (swapped into ev1_prev): the last pipelined step's end.
    CUDA_CHECK(cudaEventRecord(ev1, stream));
    have_prev_end = true;
  }
  AsyncStep st;
  st.done = true;
  try {
    const StepPlan& run = host_pending.resolve(plan);
    st.result = step(run);
  } catch (...) {
    host_pending.forget();
    feed.forget();
    last_kind = LastStep::kNone;
    throw;  // nothing queued
  }
  host_pending.record(plan, st.result);
  st.result.stats.sync = why;
  ++async_host_steps;
  last_kind = LastStep::kHost;
  last_end = ev1;  // step() recorded this step's end there
  last_failed = false;
  inflight.push_back(std::move(st));
}

void CudaBackendImpl::submit_device(const StepPlan& plan) {
  const auto wall0 = std::chrono::steady_clock::now();
  const int slot_index = next_slot;
  AsyncSlot& sl = aslots[static_cast<std::size_t>(slot_index)];
  if (sl.busy) {  // a third step without a collect: its image is free once that step ended
    for (AsyncStep& st : inflight)
      if (!st.done && st.slot == slot_index) finish(st);
  }
  // The pending rows: fed on the device after a pipelined step, else resolved on the host (the
  // previous step ran synchronously; none before: a pending row is an engine bug).
  std::vector<FeedPair> inputs;
  const StepPlan* run = &plan;
  try {
    run = last_kind == LastStep::kDevice ? &feed.stage(plan, inputs) : &host_pending.resolve(plan);
  } catch (...) {
    feed.forget();
    host_pending.forget();
    last_kind = LastStep::kNone;
    throw;
  }
  // This slot's image, layout and sparse staging become the ones upload_step() and
  // upload_sparse_work() read; swapped back on every way out.
  struct Swap {
    CudaBackendImpl& b;
    AsyncSlot& s;
    void flip() {
      std::swap(b.image_mem, s.image_mem);
      std::swap(b.image, s.image);
      std::swap(b.layout, s.layout);
      std::swap(b.sp_meta, s.sp_meta);
    }
    Swap(CudaBackendImpl& bb, AsyncSlot& ss) : b(bb), s(ss) { flip(); }
    ~Swap() { flip(); }
    Swap(const Swap&) = delete;
    Swap& operator=(const Swap&) = delete;
  };
  AsyncStep st;
  std::vector<FeedPair> tok_feed, hist_feed;
  std::vector<std::int32_t> sources;
  SampleBatch batch;
  SyncReason why = SyncReason::kNone;
  try {
    Swap swap(*this, sl);
    planner->build(*run,
                   StepOptions{.graphs = use_graphs,
                               .sparse_graphs = sparse_graphs,
                               .forced_splits = forced_splits,
                               .device_tables = device_tables},
                   image, layout);
    if (layout.num_seqs == 0) {
      st.done = true;
      st.result.step_id = plan.step_id;
      inflight.push_back(std::move(st));
      return;
    }
    why = pipeline_blocker_of_layout(layout);
    if (why != SyncReason::kNone) {
      planner->forget_tables();  // the staged deltas will not be uploaded: rewrite whole rows
    } else {
      {
        // Sampling requests first (InvalidRequest before anything is queued).
        const int V = mc.vocab_size, S = layout.num_seqs;
        std::vector<SampleRequest> reqs;
        std::vector<int> dev_plan;
        st.dev_index.assign(static_cast<std::size_t>(S), -1);
        if (!layout.chunks.empty()) {
          for (int i : layout.chunks.front().device_sampled) {
            const SeqStep& s = run->seqs[static_cast<std::size_t>(i)];
            const LmSlot slot = layout.lm[static_cast<std::size_t>(i)];
            SampleRequest q;
            q.logit_row = slot.first + slot.count - 1;
            q.params = s.params;
            q.prompt = s.prompt;
            q.output = s.output;  // staged: *output + the pending token's placeholder
            q.eos_ids = s.params->ignore_eos ? nullptr : &mc.eos_token_ids;
            st.dev_index[static_cast<std::size_t>(i)] = static_cast<int>(reqs.size());
            dev_plan.push_back(i);
            reqs.push_back(q);
          }
        }
        batch = prepare_samples(reqs, V);
        tok_feed = token_feeds(inputs, layout);
        hist_feed = history_feeds(inputs, dev_plan, batch);
        sources = feed_sources(layout);
        // The census's host half before anything is queued (an InternalError queues nothing).
        st.census = plan_census(*run, sl.census);
        std::int32_t* aux = sl.aux.get();
        const std::size_t ms = static_cast<std::size_t>(max_seqs);
        if (!tok_feed.empty())
          std::memcpy(aux, tok_feed.data(), tok_feed.size() * sizeof(FeedPair));
        if (!hist_feed.empty())
          std::memcpy(aux + 2 * ms, hist_feed.data(), hist_feed.size() * sizeof(FeedPair));
        std::memcpy(aux + 4 * ms, sources.data(), sources.size() * sizeof(std::int32_t));

        // Launch: the same order as run_layout(), with the feed around it.
        const std::vector<LayerSparseWork> work = upload_sparse_work();
        const int k = next_ev;
        CUDA_CHECK(cudaEventRecord(aev[static_cast<std::size_t>(k)][0], stream));
        upload_step();
        CUDA_CHECK(cudaMemcpyAsync(d_aux.get(), aux, 5 * ms * sizeof(std::int32_t),
                                   cudaMemcpyHostToDevice, stream));
        const auto* d_pairs = reinterpret_cast<const FeedPair*>(d_aux.get());
        CUDA_CHECK(launch_feed_gather(d_tokens.get(), d_pairs, static_cast<int>(tok_feed.size()),
                                      d_fed.get(), stream));
        launch_forward(work);
        if (!layout.chunks.empty()) {  // one chunk at base 0: forward() ran its lm_head
          const int n = layout.chunks.front().rows;
          CUDA_CHECK(cudaMemcpyAsync(sl.h_argmax.get(), d_argmax.get(), n * sizeof(int),
                                     cudaMemcpyDeviceToHost, stream));
          CUDA_CHECK(cudaMemcpyAsync(sl.h_logz.get(), d_logz.get(), n * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream));
        }
        sl.sampler->run(logits.get(), V, batch, stream,
                        {.pairs = d_pairs + ms,  // aux + 2 * max_seqs int32
                         .n = static_cast<int>(hist_feed.size()),
                         .fed = d_fed.get()});
        CUDA_CHECK(launch_feed_scatter(d_fed.get(), d_aux.get() + 4 * ms, S, d_argmax.get(),
                                       sl.sampler->device_results(), stream));
        // After the step's work (the positions it leaves), inside its events: collect() counts.
        if (st.census) queue_census(sl.census, sl.census_src, sl.census_host);
        CUDA_CHECK(cudaEventRecord(aev[static_cast<std::size_t>(k)][1], stream));
        st.ev = k;
      }
    }
  } catch (...) {              // nothing queued for this step
    planner->forget_tables();  // the device tables may not hold what the plan assumed
    feed.forget();
    host_pending.forget();
    last_kind = LastStep::kNone;
    throw;
  }
  if (st.ev < 0) {  // not pipelinable after planning: the synchronous step
    submit_host(plan, why);
    return;
  }
  st.slot = slot_index;
  st.prev_end = last_end;
  st.plan = &plan;
  st.dev_rows = std::move(batch.rows);
  st.fed = !inputs.empty();
  st.host_ms = ms_since(wall0);
  sl.busy = true;
  ++async_device_steps;
  async_fed_rows += static_cast<int>(inputs.size());
  for (const AsyncStep& o : inflight)
    if (!o.done) {
      ++async_overlapped;  // launched behind a step the host has not waited for
      break;
    }
  last_end = aev[static_cast<std::size_t>(st.ev)][1];
  last_kind = LastStep::kDevice;
  feed.record(plan);
  next_slot ^= 1;
  next_ev = (next_ev + 1) % 3;
  inflight.push_back(std::move(st));
}

void CudaBackendImpl::finish(AsyncStep& st) {
  const auto wall0 = std::chrono::steady_clock::now();
  AsyncSlot& sl = aslots[static_cast<std::size_t>(st.slot)];
  st.done = true;
  sl.busy = false;
  const bool prev_failed = last_failed;
  try {
    CUDA_CHECK(cudaEventSynchronize(aev[static_cast<std::size_t>(st.ev)][1]));
    const StepPlan& plan = *st.plan;
    STRATA_CHECK(!(st.fed && prev_failed), "pending input of step " + std::to_string(plan.step_id) +
                                               ": the step that sampled it failed");
    const StepLayout& lay = sl.layout;
    StepResult& result = st.result;
    result.step_id = plan.step_id;
    result.seqs.resize(plan.seqs.size());
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      const SeqStep& s = plan.seqs[i];
      SeqResult& out = result.seqs[i];
      out.seq_id = s.seq_id;
      const LmSlot slot = lay.lm[i];
      if (!s.sample || slot.first < 0) continue;
      const int last = slot.first + slot.count - 1;
      const SampleRoute route = lay.route[i];
      if (route == SampleRoute::kDeviceArgmax) {
        out.token = sl.h_argmax[static_cast<std::size_t>(last)];
        out.argmax = out.token;
        out.logprob = -sl.h_logz[static_cast<std::size_t>(last)];
      } else if (route == SampleRoute::kDeviceSampler) {
        const int j = st.dev_index[i];
        const SampleOutput so =
            finish_sample(sl.sampler->results()[j], st.dev_rows[static_cast<std::size_t>(j)]);
        out.token = so.token;
        out.logprob = so.logprob;
        out.argmax = so.argmax;
        out.top = so.top;
      }
    }
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, aev[static_cast<std::size_t>(st.ev)][0],
                                    aev[static_cast<std::size_t>(st.ev)][1]));
    result.stats.device_ms = ms;
    if (st.prev_end) {  // completed: it is earlier on the stream than this step's end
      float gap = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&gap, st.prev_end, aev[static_cast<std::size_t>(st.ev)][0]));
      result.stats.device_gap_ms = std::max(0.0f, gap);
    }
    if (st.census) count_census(sl.census, sl.census_host.get(), result);
    result.stats.tokens = lay.rows;
    result.stats.table_bytes = lay.table_bytes;
    result.stats.host_ms = st.host_ms + ms_since(wall0);
    host_pending.record(plan, result);
    last_failed = false;
  } catch (...) {
    st.error = std::current_exception();
    host_pending.forget();
    last_failed = true;
  }
}

}  // namespace strata::cuda

// Logits and sampling of one step: the lm_head in chunks of logit_rows lm rows (the first
// computed by forward()), then per chunk the device argmax, the device sampler
// (cuda/sampling.h) or a host copy for runtime/sampler.h, as the step layout routes each row;
// results in plan order.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "cuda/kernels.h"
#include "cuda/tp/collectives.h"
#include "cuda/tp/tp_backends.h"
#include "runtime/error.h"
#include "runtime/sampler.h"

namespace strata::cuda {

void CudaBackendImpl::lm_logits(int n) {
  const int H = mc.hidden_size, V = mc.vocab_size;
  if (!tp.comm) {
    gemm->linear_f32out(lm_normed.get(), lm_head, logits.get(), n, V, H);
    return;
  }
  const int vs = shard.vocab_slice;
  gemm->linear_f32out(lm_normed.get(), lm_head, logits_local.get(), n, vs, H);
  tp::gather_vocab_logits(*tp.comm, full_mc, logits_local.get(), logits_parts.get(), logits.get(),
                          n, stream);
}

void CudaBackendImpl::lm_chunk(int base, int n, bool argmax) {
  // resid_in_gemm (this step's forward): the last down GEMM already added its output.
  launch_rmsnorm({.resid = resid.get(),
                  .delta = resid_in_gemm ? nullptr : delta.get(),
                  .weight = final_norm,
                  .out = lm_normed.get(),
                  .rows = d_lm_rows.get() + base,
                  .num_rows = n,
                  .hidden = mc.hidden_size,
                  .eps = static_cast<float>(mc.rms_norm_eps),
                  .vec = vec_kernels},
                 stream);
  lm_logits(n);
  if (argmax)
    launch_argmax({.logits = logits.get(),
                   .out = d_argmax.get(),
                   .rows = n,
                   .vocab = mc.vocab_size,
                   .log_z = d_logz.get()},
                  stream);
}

namespace {

// Copies the host-bound logits rows of one chunk into the sequence's return_logits and draws
// its token (the chunk holding its last lm row).
void collect_seq(const SeqStep& s, const LmSlot& slot, const LmChunk& c, SampleRoute route,
                 bool graph, int V, const float* h_logits, const int* h_argmax, const float* h_logz,
                 const SampleOutput* dev_out, const std::vector<std::int32_t>& eos_ids,
                 SeqResult& out) {
  static const std::vector<std::int32_t> empty;
  const int r0 = slot.first, last = slot.first + slot.count - 1, base = c.base, n = c.rows;
  if (s.return_logits) {
    out.logits.resize(static_cast<std::size_t>(s.tokens.size()) * V);
    for (int r = std::max(r0, base); r <= std::min(last, base + n - 1); ++r) {
      const int t = graph ? 0 : r - r0;
      std::memcpy(out.logits.data() + static_cast<std::size_t>(t) * V,
                  h_logits + static_cast<std::size_t>(r - base) * V, V * sizeof(float));
    }
  }
  if (!s.sample || last < base || last >= base + n) return;
  if (route == SampleRoute::kDeviceArgmax) {
    // The row is unprocessed (no bias, bans or penalties): the token is its argmax and its
    // logprob is -log_z (what sample_row reports).
    out.token = h_argmax[last - base];
    out.argmax = out.token;
    out.logprob = -h_logz[last - base];
  } else if (route == SampleRoute::kDeviceSampler) {
    out.token = dev_out->token;
    out.logprob = dev_out->logprob;
    out.argmax = dev_out->argmax;
    out.top = dev_out->top;
  } else {
    std::vector<float> row_copy(h_logits + static_cast<std::size_t>(last - base) * V,
                                h_logits + static_cast<std::size_t>(last - base + 1) * V);
    const SamplingParams& p = *s.params;
    const SampleOutput so =
        sample_row(std::span<float>(row_copy), p, s.prompt ? *s.prompt : empty,
                   s.output ? *s.output : empty, p.ignore_eos ? empty : eos_ids);
    out.token = so.token;
    out.logprob = so.logprob;
    out.argmax = so.argmax;
    out.top = so.top;
  }
}

}  // namespace

void CudaBackendImpl::sample_and_collect(const StepPlan& plan, StepResult& result) {
  const int S = layout.num_seqs, V = mc.vocab_size;
  const bool graph = layout.graph.bucket > 0;
  for (const LmChunk& c : layout.chunks) {
    const int base = c.base, n = c.rows;
    // forward() ran the first chunk (inside the graph when replaying); each row is in exactly
    // one chunk, so the others run here.
    if (base > 0) lm_chunk(base, n, true);
    CUDA_CHECK(cudaMemcpyAsync(h_argmax.get(), d_argmax.get(), n * sizeof(int),
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(h_logz.get(), d_logz.get(), n * sizeof(float),
                               cudaMemcpyDeviceToHost, stream));
    // The rows the device sampler draws in this chunk (plan order).
    std::vector<SampleRequest> dev_reqs;
    std::vector<int> dev_index(static_cast<std::size_t>(S), -1);
    for (int i : c.device_sampled) {
      const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
      const LmSlot slot = layout.lm[static_cast<std::size_t>(i)];
      SampleRequest q;
      q.logit_row = slot.first + slot.count - 1 - base;
      q.params = s.params;
      q.prompt = s.prompt;
      q.output = s.output;
      q.eos_ids = s.params->ignore_eos ? nullptr : &mc.eos_token_ids;
      dev_index[static_cast<std::size_t>(i)] = static_cast<int>(dev_reqs.size());
      dev_reqs.push_back(q);
    }
    // Validation before anything is queued (InvalidRequest names the parameter).
    const SampleBatch dev_batch = prepare_samples(dev_reqs, V);
    for (int r : c.host_rows)
      CUDA_CHECK(cudaMemcpyAsync(h_logits.get() + static_cast<std::size_t>(r) * V,
                                 logits.get() + static_cast<std::size_t>(r) * V, V * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
    // After the copies (stream order): the sampler edits its rows in place.
    sampler.run(logits.get(), V, dev_batch, stream);
    if (base + n >= layout.run_lm_rows) CUDA_CHECK(cudaEventRecord(ev1, stream));
    // tp > 1: bounded wait, so a rank that died mid-step fails this one instead of hanging.
    if (tp.comm) tp.comm->wait(stream, std::chrono::seconds(120));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < S; ++i) {
      const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
      SeqResult& out = result.seqs[static_cast<std::size_t>(i)];
      out.seq_id = s.seq_id;
      const LmSlot slot = layout.lm[static_cast<std::size_t>(i)];
      if (slot.first < 0) continue;
      const int j = dev_index[static_cast<std::size_t>(i)];
      SampleOutput dev_out;
      if (j >= 0)
        dev_out = finish_sample(sampler.results()[j], dev_batch.rows[static_cast<std::size_t>(j)]);
      collect_seq(s, slot, c, layout.route[static_cast<std::size_t>(i)], graph, V, h_logits.get(),
                  h_argmax.get(), h_logz.get(), j >= 0 ? &dev_out : nullptr, mc.eos_token_ids, out);
    }
  }
  if (layout.run_lm_rows == 0) {
    CUDA_CHECK(cudaEventRecord(ev1, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  for (int i = 0; i < S; ++i)
    result.seqs[static_cast<std::size_t>(i)].seq_id = plan.seqs[static_cast<std::size_t>(i)].seq_id;
}

}  // namespace strata::cuda

// Device sampling (docs/sampling.md "CUDA"): the rules of runtime/sampler.cpp (the oracle)
// on logits rows that stay on the GPU; only token ids and logprob data come back.
//
// Two halves:
//  * host preparation (cuda/sampling_prep.h, cuda/sampling.cpp; runs without a GPU,
//    unit-tested in CI):
//    prepare_samples() validates each request exactly as sample_row does and flattens it into
//    the POD images of the device buffers (per-row descriptors, logit_bias/ban edits, token
//    history for the penalties); finish_sample() turns a device result back into a
//    SampleOutput or the error sample_row would have thrown;
//  * the kernel (cuda/sampling.cu): one 1024-thread block per row, applied IN PLACE to the
//    logits rows (a row that is also returned as logits must be copied out first).
//
// Deliberately not on the device (the backend keeps runtime/sampler.cpp for these rows):
// logprobs > kMaxDeviceLogprobs, vocabularies above kMaxDeviceVocab. Plain C++ header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/async_steps.h"
#include "cuda/sampling_prep.h"

namespace strata::cuda {

// Launch over `logits` ([*, vocab] fp32, rows named by SampleRowDesc::logit_row, modified in
// place to the row after steps 1-2). All pointers are device pointers of the batch images;
// counts: [count_rows][vocab] int32 scratch.
struct SampleKernelParams {
  float* logits = nullptr;
  int vocab = 0;
  int num_rows = 0;
  const SampleRowDesc* rows = nullptr;
  const SampleEdit* edits = nullptr;
  const float* biases = nullptr;
  const std::int32_t* history = nullptr;
  int* counts = nullptr;
  SampleResultDev* out = nullptr;
};
void launch_sample(const SampleKernelParams& p, cudaStream_t s);

// Pipelined steps (cuda/async_steps.h): history entries DeviceSampler::run overwrites on the
// device with the pending tokens (fed[src]) after its upload, before the kernel; n == 0: none.
struct SampleHistoryFeed {
  const FeedPair* pairs = nullptr;  // device: dst = index into the batch's history
  int n = 0;
  const std::int32_t* fed = nullptr;
};

// Device buffers + pinned staging of the sampler, grow-only (one per backend/stream).
// run(): uploads the batch, launches, and queues the download of the results on `s`;
// results() is valid after the stream is synchronised.
class DeviceSampler {
 public:
  DeviceSampler() = default;
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  void run(float* logits, int vocab, const SampleBatch& batch, cudaStream_t s,
           const SampleHistoryFeed& feed = {});
  const SampleResultDev* results() const { return h_out_; }
  // The last run's results on the device (read by the pipelined steps' token feed).
  const SampleResultDev* device_results() const { return d_out_; }

 private:
  void* d_buf_ = nullptr;  // rows | edits | biases | history | results
  std::size_t d_bytes_ = 0;
  void* h_buf_ = nullptr;  // pinned: the same layout (uploads) + results
  std::size_t h_bytes_ = 0;
  int* d_counts_ = nullptr;
  std::size_t counts_elems_ = 0;
  SampleResultDev* h_out_ = nullptr;
  SampleResultDev* d_out_ = nullptr;
};

}  // namespace strata::cuda

// Device half of the pipelined steps' token feed (cuda/async_steps.h): one launch copies
// fed[src] into dst entries (a step's pending input rows, or the sampler's history entries that
// stand for the pending token), one writes each sampled row's token into fed. Plain C++ header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/async_steps.h"
#include "cuda/sampling_prep.h"

namespace strata::cuda {

// dst[pairs[i].dst] = fed[pairs[i].src] for i < n (device pointers; n == 0 launches nothing).
cudaError_t launch_feed_gather(std::int32_t* dst, const FeedPair* pairs, int n,
                               const std::int32_t* fed, cudaStream_t stream);

// fed[i] = the token of plan row i for i < n: src[i] >= 0: argmax[src[i]]; src[i] <= -2:
// results[-src[i] - 2].token; -1: left unchanged.
cudaError_t launch_feed_scatter(std::int32_t* fed, const std::int32_t* src, int n,
                                const std::int32_t* argmax, const SampleResultDev* results,
                                cudaStream_t stream);

}  // namespace strata::cuda

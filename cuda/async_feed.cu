#include "cuda/async_feed.h"

namespace strata::cuda {

namespace {

__global__ void feed_gather_kernel(std::int32_t* dst, const FeedPair* pairs, int n,
                                   const std::int32_t* fed) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[pairs[i].dst] = fed[pairs[i].src];
}

__global__ void feed_scatter_kernel(std::int32_t* fed, const std::int32_t* src, int n,
                                    const std::int32_t* argmax, const SampleResultDev* results) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::int32_t s = src[i];
  if (s >= 0)
    fed[i] = argmax[s];
  else if (s <= -2)
    fed[i] = results[-s - 2].token;
}

}  // namespace

cudaError_t launch_feed_gather(std::int32_t* dst, const FeedPair* pairs, int n,
                               const std::int32_t* fed, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  feed_gather_kernel<<<(n + 255) / 256, 256, 0, stream>>>(dst, pairs, n, fed);
  return cudaGetLastError();
}

cudaError_t launch_feed_scatter(std::int32_t* fed, const std::int32_t* src, int n,
                                const std::int32_t* argmax, const SampleResultDev* results,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  feed_scatter_kernel<<<(n + 255) / 256, 256, 0, stream>>>(fed, src, n, argmax, results);
  return cudaGetLastError();
}

}  // namespace strata::cuda

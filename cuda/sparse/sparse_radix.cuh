// Exact block-wide top-k by radix select (cuda/sparse/*.cu only).
#pragma once

#include <cstdint>
#include <cub/block/block_scan.cuh>

namespace strata::cuda::sparse::detail {

constexpr int kSelectThreads = 256;  // = radix bins
using BlockScan = cub::BlockScan<int, kSelectThreads>;

// The key of rank `k` (1-based, k <= n) among the unique keys of [lo, hi) in descending order.
template <typename KeyFn>
__device__ __forceinline__ std::uint64_t radix_select(int lo, int hi, int k, KeyFn key_of,
                                                      int* hist, BlockScan::TempStorage& scan,
                                                      int* shared_digit, int* shared_rem) {
  const int tid = threadIdx.x;
  std::uint64_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    hist[tid] = 0;
    __syncthreads();
    for (int i = lo + tid; i < hi; i += kSelectThreads) {
      const std::uint64_t key = key_of(i);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFF], 1);
    }
    __syncthreads();
    // Thread t holds bin 255 - t: the inclusive scan counts keys in bins >= 255 - t.
    const int count = hist[255 - tid];
    int incl = 0;
    BlockScan(scan).InclusiveSum(count, incl);
    if (incl - count < remaining && remaining <= incl) {
      *shared_digit = 255 - tid;
      *shared_rem = remaining - (incl - count);
    }
    __syncthreads();
    prefix |= static_cast<std::uint64_t>(*shared_digit) << shift;
    mask |= static_cast<std::uint64_t>(0xFF) << shift;
    remaining = *shared_rem;
    __syncthreads();
  }
  return prefix;
}

}  // namespace strata::cuda::sparse::detail

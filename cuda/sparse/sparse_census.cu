// The census of kept positions (SeqStep::report_kept): the position pool of the pages a census
// reads, gathered into one contiguous buffer so the host copies it in one transfer. Runs only
// on steps that ask for a census (cuda/backend/census.cpp), never inside a graph.
#include "cuda/sparse/sparse_kernels.h"

namespace strata::cuda::sparse {
namespace {

constexpr int kGatherThreads = 256;

// One block per page (grid-stride over pages), threads over the page's entries.
__global__ void __launch_bounds__(kGatherThreads)
    gather_positions_kernel(const std::int32_t* positions, const std::int32_t* pages, int num_pages,
                            int per_page, std::int32_t* out) {
  for (int i = blockIdx.x; i < num_pages; i += gridDim.x) {
    const std::int32_t* src = positions + static_cast<std::size_t>(pages[i]) * per_page;
    std::int32_t* dst = out + static_cast<std::size_t>(i) * per_page;
    for (int e = threadIdx.x; e < per_page; e += kGatherThreads) dst[e] = src[e];
  }
}

}  // namespace

cudaError_t launch_gather_positions(const std::int32_t* positions, const std::int32_t* pages,
                                    int num_pages, int per_page, std::int32_t* out,
                                    cudaStream_t stream) {
  if (num_pages <= 0) return cudaSuccess;
  if (per_page <= 0) return cudaErrorInvalidValue;
  const int blocks = num_pages < 4096 ? num_pages : 4096;
  gather_positions_kernel<<<blocks, kGatherThreads, 0, stream>>>(positions, pages, num_pages,
                                                                 per_page, out);
  return cudaGetLastError();
}

}  // namespace strata::cuda::sparse

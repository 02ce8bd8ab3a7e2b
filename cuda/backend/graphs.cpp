// CUDA graphs of decode-only steps: one per (batch bucket, sparse slot bucket, decode splits,
// layer taps), captured on first use, replayed against the fixed device buffers the run has
// just uploaded (docs/cuda-backend.md "CUDA graphs").
#include <cuda_runtime.h>

#include <tuple>

#include "cuda/backend/backend_impl.h"

namespace strata::cuda {

void CudaBackendImpl::replay_graph() {
  const GraphChoice& g = layout.graph;
  const std::tuple<int, int, int, bool> key{g.bucket, g.slot_bucket, g.splits, taps};
  auto it = graphs.find(key);
  if (it == graphs.end()) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      forward({.rows = g.bucket,
               .decode_rows = g.bucket,
               .tiles = 0,
               .splits = g.splits,
               .lm_rows = g.bucket,
               .argmax = true,
               .work = nullptr,
               .sparse_decode = layout.sparse_decode,
               .dec_max_slots = g.slot_bucket});
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    it = graphs.emplace(key, exec).first;
  }
  CUDA_CHECK(cudaGraphLaunch(it->second, stream));
}

}  // namespace strata::cuda

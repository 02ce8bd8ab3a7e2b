// CUDA graphs of decode-only steps: one per (batch bucket, sparse slot bucket, decode splits,
// layer taps), captured on first use, replayed against the fixed device buffers the run has
// just uploaded (docs/cuda-backend.md "CUDA graphs").
#include <cuda.h>
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/backend/backend_impl.h"

namespace strata::cuda {
namespace {

// A kernel node's (mangled) function name, "" when the driver cannot say: the runtime's own
// kernels come as CUkernels, the ones cuBLAS launches as CUfunctions.
std::string kernel_node_name(cudaGraphNode_t node) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*);
  using KernelName = CUresult (*)(const char**, CUkernel);
  using FuncName = CUresult (*)(const char**, CUfunction);
  static const auto get = driver_fn<GetParams>("cuGraphKernelNodeGetParams", 12000);
  static const auto kname = driver_fn<KernelName>("cuKernelGetName", 12030);
  static const auto fname = driver_fn<FuncName>("cuFuncGetName", 12030);
  CUDA_KERNEL_NODE_PARAMS_v2 kp{};
  if (get == nullptr || get(node, &kp) != CUDA_SUCCESS) return "";
  const char* name = nullptr;
  if (kp.func != nullptr) {
    if (fname == nullptr || fname(&name, kp.func) != CUDA_SUCCESS) return "";
  } else if (kp.kern != nullptr) {
    if (kname == nullptr || kname(&name, kp.kern) != CUDA_SUCCESS) return "";
  }
  return name ? name : "";
}

// Disables in `exec` every kernel node of `graph` whose name contains `pattern`; returns how many
// and counts every kernel node by name into `census`.
int disable_kernels(cudaGraph_t graph, cudaGraphExec_t exec, const std::string& pattern,
                    std::map<std::string, int>& census) {
  census.clear();
  std::size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  int disabled = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    const std::string name = kernel_node_name(node);
    ++census[name];
    if (name.find(pattern) == std::string::npos) continue;
    CUDA_CHECK(cudaGraphNodeSetEnabled(exec, node, 0));
    ++disabled;
  }
  return disabled;
}

}  // namespace

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
    if (!graph_skip.empty())
      graph_skipped = disable_kernels(graph, exec, graph_skip, graph_kernels);
    CUDA_CHECK(cudaGraphDestroy(graph));
    it = graphs.emplace(key, exec).first;
  }
  CUDA_CHECK(cudaGraphLaunch(it->second, stream));
}

}  // namespace strata::cuda

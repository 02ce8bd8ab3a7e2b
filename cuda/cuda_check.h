// CUDA error checking for host code: every CUDA / cuBLAS call goes through CUDA_CHECK or
// CUBLAS_CHECK, which throw strata::InternalError naming the call, the error and file:line.
// Plain C++ header (no Boost): usable from .cu and .cpp files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "runtime/error.h"

namespace strata::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file,
                                          int line) {
  throw InternalError(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                      cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace strata::cuda

#define CUDA_CHECK(call)                                                             \
  do {                                                                               \
    const cudaError_t strata_cuda_err_ = (call);                                     \
    if (strata_cuda_err_ != cudaSuccess)                                             \
      ::strata::cuda::throw_cuda_error(strata_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace strata::cuda {

// The driver API entry point `name` of CUDA `version` (12000 = 12.0), looked up through the
// runtime so that no target links libcuda; nullptr where the driver lacks it. The one place
// the lookup is spelled (tensor maps, green contexts, graph node names).
template <typename F>
F driver_fn(const char* name, int version) {
  cudaDriverEntryPointQueryResult q{};
  void* f = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<F>(f);
}

// One kernel launch through cudaLaunchKernelEx, with programmatic dependent launch when `pdl`
// (the kernel may then start while the previous kernel on the stream drains; it must call
// griddepcontrol.wait, cuda/hopper_sm90.cuh's griddep_wait, before reading what that kernel
// writes or writing what it reads) and thread-block clusters of `cluster_x` consecutive blocks
// when it is above 1. The one place these launch attributes are spelled.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                   cudaStream_t stream, bool pdl, unsigned cluster_x, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  cfg.attrs = attr;
  if (pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs++].val.clusterDim = {cluster_x, 1, 1};
  }
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...));
}

}  // namespace strata::cuda

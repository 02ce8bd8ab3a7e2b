// CUDA error checking for host code: every CUDA / cuBLAS call goes through CUDA_CHECK or
// CUBLAS_CHECK, which throw strata::InternalError naming the call, the error and file:line.
// Plain C++ header (no Boost): usable from .cu and .cpp files.
#pragma once

#include <cuda_runtime.h>

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

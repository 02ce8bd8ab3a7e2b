// Linear layers through cuBLAS: y[T, N] = x[T, K] . W[N, K]^T (HF weight layout, row-major),
// bf16 inputs, fp32 accumulation, bf16 or fp32 output. A fixed workspace is given to cuBLAS
// so calls can be captured in CUDA graphs. One Gemm per device/stream, not thread-safe.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/device_buffer.h"

namespace strata::cuda {

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream, std::size_t workspace_bytes = 32u << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void linear(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int T, int N,
              int K);
  void linear_f32out(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int T, int N, int K);

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceArray<unsigned char> workspace_;
};

}  // namespace strata::cuda

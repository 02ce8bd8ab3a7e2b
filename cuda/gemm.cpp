#include "cuda/gemm.h"

#include <string>

#include "runtime/error.h"

#define CUBLAS_CHECK(call)                                                                   \
  do {                                                                                       \
    const cublasStatus_t st_ = (call);                                                       \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      throw ::strata::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                    ": " #call ": " + cublasGetStatusString(st_));           \
  } while (0)

namespace strata::cuda {

Gemm::Gemm(cudaStream_t stream, std::size_t workspace_bytes) : workspace_(workspace_bytes) {
  CUBLAS_CHECK(cublasCreate(&handle_));
  CUBLAS_CHECK(cublasSetStream(handle_, stream));
  CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()));
  CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(handle_);
}

namespace {
void gemm_ex(cublasHandle_t h, const void* x, const void* w, void* y, cudaDataType_t ytype, int T,
             int N, int K) {
  if (T == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: Y^T [N, T] = W [N, K] (stored as K x N col-major, transposed) . X^T.
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, w, CUDA_R_16BF, K, x,
                            CUDA_R_16BF, K, &beta, y, ytype, N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}
}  // namespace

void Gemm::linear(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int T, int N,
                  int K) {
  gemm_ex(handle_, x, w, y, CUDA_R_16BF, T, N, K);
}

void Gemm::linear_f32out(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int T, int N,
                         int K) {
  gemm_ex(handle_, x, w, y, CUDA_R_32F, T, N, K);
}

}  // namespace strata::cuda

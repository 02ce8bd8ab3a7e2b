// FP8 quantization kernels (cuda/fp8.h).
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/fp8.cuh"
#include "cuda/fp8.h"

namespace strata::cuda {
namespace {

__global__ void quantize_rows_kernel(const __nv_bfloat16* x, long long ld, int cols, Fp8Rows out,
                                     float static_scale) {
  const long long r = blockIdx.x;
  const __nv_bfloat16* row = x + r * ld;
  fp8::quantize_row([&](int i) { return __bfloat162float(row[i]); }, cols, out.codes + r * cols,
                    out.scale + r, static_scale);
}

// Vectorized rows (cols a multiple of 8, at most 8 * 4 * 256; 16-byte aligned rows).
constexpr int kQuantVecThreads = 256, kQuantVecPerThread = 4;
__global__ void __launch_bounds__(kQuantVecThreads)
    quantize_rows_vec_kernel(const __nv_bfloat16* x, long long ld, int cols, Fp8Rows out,
                             float static_scale) {
  const long long r = blockIdx.x;
  const __nv_bfloat16* row = x + r * ld;
  fp8::quantize_row_vec<kQuantVecPerThread>(
      [&](int i, float(&v)[8]) { fp8::load8_bf16(row + 8 * i, v); }, cols / 8, out.codes + r * cols,
      out.scale + r, static_scale);
}

__global__ void scale_outer_kernel(const float* acc, const float* xs, const float* ws,
                                   __nv_bfloat16* y, int T, int N) {
  const long long n = static_cast<long long>(T) * N;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long t = i / N, c = i % N;
    y[i] = __float2bfloat16_rn(acc[i] * xs[t] * ws[c]);
  }
}

}  // namespace

void launch_quantize_rows(const __nv_bfloat16* x, long long ld, int rows, int cols, Fp8Rows out,
                          cudaStream_t s, float static_scale) {
  if (rows <= 0 || cols <= 0) return;
  const bool vec = cols % 8 == 0 && ld % 8 == 0 &&
                   cols / 8 <= kQuantVecPerThread * kQuantVecThreads &&
                   (reinterpret_cast<std::uintptr_t>(x) & 15) == 0;
  if (vec)
    quantize_rows_vec_kernel<<<rows, kQuantVecThreads, 0, s>>>(x, ld, cols, out, static_scale);
  else
    quantize_rows_kernel<<<rows, 256, 0, s>>>(x, ld, cols, out, static_scale);
  CUDA_CHECK_LAUNCH();
}

void launch_scale_outer(const float* acc, const float* xs, const float* ws, __nv_bfloat16* y, int T,
                        int N, cudaStream_t s) {
  const long long n = static_cast<long long>(T) * N;
  if (n == 0) return;
  const long long blocks = std::min<long long>((n + 255) / 256, 132 * 16);
  scale_outer_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(acc, xs, ws, y, T, N);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda

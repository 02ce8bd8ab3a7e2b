// Skinny GEMMs (cuda/gemm.h): y[T, N] = x[T, K] . W[N, K]^T for T <= kSkinnyMaxRows (1-2 rows:
// single-stream decode), where a library GEMM computes a tile of 64+ rows for one real one.
//
// Counted: the weights are the bytes (T x K activations are kilobytes, read through L1 by every
// block). One block of 256 threads owns kRows consecutive output columns n (rows of W) and the
// whole K: thread t reads 16-byte chunks t, t + 256, ... of each of its kRows W rows (kUnroll
// chunks of every row in flight before any FMA: 2 x 4 x 16 B per thread; a warp's load covers
// 512 contiguous bytes of one row), bypassing L1 (ld.global.nc.L1::no_allocate: W is read
// once), and multiplies each chunk with the same 8 columns of the T activation rows on CUDA
// cores (T FMAs per weight: beyond 2 rows the FMAs, not the bytes, bound it; measured in
// docs/benchmarks.md, where a tensor-core variant whose fragment loads touch 8 rows x 64 B per
// warp instruction read the weights slower). fp32 accumulation; the partial sums are reduced in
// a fixed order (warp butterfly, then the 8 warps in index order): deterministic, no atomics.
// The e4m3 kernel (cuda/gemm_fp8.cu) runs the same scheme over 1-byte weights in its own body;
// one shared template compiled this one to 58 registers instead of 47 at one row and made the
// e4m3 one slower on the H200 (cuda/skinny.cuh).
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/skinny.cuh"

namespace strata::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256, kWarps = kThreads / 32, kRows = 4, kUnroll = 2;

using skinny::load_stream;
using skinny::unpack8;

template <int T, bool F32>
__global__ void __launch_bounds__(kThreads)
    skinny_gemm_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, void* y, int N,
                       int K) {
  const int n0 = static_cast<int>(blockIdx.x) * kRows;
  const int chunks = K / 8;  // 16-byte chunks per row
  const bf16* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)  // rows past N re-read the last row; their sums are dropped
    wr[r] = w + static_cast<long long>(min(n0 + r, N - 1)) * K;
  float acc[kRows][T];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

  for (int c0 = static_cast<int>(threadIdx.x); c0 < chunks; c0 += kThreads * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        wv[u][r] = c < chunks ? load_stream(wr[r] + c * 8) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float xf[8];
        unpack8(*reinterpret_cast<const uint4*>(x + static_cast<long long>(t) * K + c * 8), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float wf[8];
          unpack8(wv[u][r], wf);
          float s = acc[r][t];
#pragma unroll
          for (int e = 0; e < 8; ++e) s = fmaf(xf[e], wf[e], s);
          acc[r][t] = s;
        }
      }
    }
  }

  __shared__ float red[kWarps][kRows * T];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) red[warp][r * T + t] = v;
    }
  __syncthreads();
  const int i = static_cast<int>(threadIdx.x);
  if (i < kRows * T) {
    const int r = i / T, t = i % T;
    if (n0 + r < N) {
      float v = red[0][i];
#pragma unroll
      for (int k = 1; k < kWarps; ++k) v += red[k][i];
      const long long at = static_cast<long long>(t) * N + n0 + r;
      if constexpr (F32)
        static_cast<float*>(y)[at] = v;
      else
        static_cast<bf16*>(y)[at] = __float2bfloat16_rn(v);
    }
  }
}

template <int T>
void launch_t(const bf16* x, const bf16* w, void* y, bool f32out, int N, int K, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((N + kRows - 1) / kRows);
  if (f32out)
    skinny_gemm_kernel<T, true><<<blocks, kThreads, 0, s>>>(x, w, y, N, K);
  else
    skinny_gemm_kernel<T, false><<<blocks, kThreads, 0, s>>>(x, w, y, N, K);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool skinny_gemm_applies(const void* x, const void* w, const void* y, int T, int N, int K) {
  const auto a16 = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; };
  return T >= 1 && T <= kSkinnyMaxRows && N >= 1 && K >= 8 && K % 8 == 0 && a16(x) && a16(w) &&
         y != nullptr;
}

void launch_skinny_gemm(const bf16* x, const bf16* w, void* y, bool f32out, int T, int N, int K,
                        cudaStream_t s) {
  if (!skinny_gemm_applies(x, w, y, T, N, K))
    throw InternalError("skinny GEMM: T=" + std::to_string(T) + " N=" + std::to_string(N) + " K=" +
                        std::to_string(K) + " (needs T in 1.." + std::to_string(kSkinnyMaxRows) +
                        ", K a multiple of 8, 16-byte aligned x and w)");
  static_assert(kSkinnyMaxRows == 2, "instantiate every row count up to kSkinnyMaxRows");
  if (T == 1)
    launch_t<1>(x, w, y, f32out, N, K, s);
  else
    launch_t<2>(x, w, y, f32out, N, K, s);
}

}  // namespace strata::cuda

// The skinny GEMM scheme of cuda/gemm_skinny.cu (bf16, its own copy of the body: see there) as
// a template, run by the e4m3 kernel (cuda/gemm_fp8.cu): y[T, N] = x[T, K] . W[N, K]^T for a few
// rows T, where the weights are the bytes. One block of kThreads owns kRows consecutive output
// columns n (rows of W) and the whole K: thread t reads 16-byte chunks t, t + kThreads, ... of each
// of its kRows W rows (kUnroll chunks of every row in flight before any FMA), bypassing L1 (W is
// read once), and multiplies each chunk with the same columns of the T activation rows on CUDA
// cores (T FMAs per weight). fp32 accumulation; the partial sums are reduced in a fixed order (warp
// butterfly, then the warps in index order): deterministic, no atomics. CUDA-only header.
#pragma once

#include <cstdint>

namespace strata::cuda::skinny {

// A 16-byte load that bypasses L1 (ld.global.nc.L1::no_allocate): streamed weights.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// The block's kRows x T sums. x and w are byte pointers to rows of row_bytes bytes (a multiple
// of 16), kElems values per 16-byte chunk, unpack(chunk, float[kElems]) decoding a chunk of x or
// W alike; emit(r, t, sum) runs once per output (n0 + r < N) on thread r * T + t.
template <int kElems, int T, int kThreads, int kRows, int kUnroll, typename Unpack, typename Emit>
__device__ __forceinline__ void gemm_block(const std::uint8_t* __restrict__ x,
                                           const std::uint8_t* __restrict__ w, int N, int row_bytes,
                                           Unpack unpack, Emit emit) {
  constexpr int kWarps = kThreads / 32;
  const int n0 = static_cast<int>(blockIdx.x) * kRows;
  const int chunks = row_bytes / 16;
  const std::uint8_t* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)  // rows past N re-read the last row; their sums are dropped
    wr[r] = w + static_cast<long long>(min(n0 + r, N - 1)) * row_bytes;
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
        wv[u][r] = c < chunks ? load_stream(wr[r] + c * 16) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float xf[kElems];
        unpack(*reinterpret_cast<const uint4*>(x + t * row_bytes + c * 16), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float wf[kElems];
          unpack(wv[u][r], wf);
          float s = acc[r][t];
#pragma unroll
          for (int e = 0; e < kElems; ++e) s = fmaf(xf[e], wf[e], s);
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
      emit(n0 + r, t, v);
    }
  }
}

}  // namespace strata::cuda::skinny

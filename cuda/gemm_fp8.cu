// Skinny FP8 GEMMs (cuda/fp8.h): y[T, N] = bf16((x̂ · Ŵ^T)[t][n] * xs[t] * ws[n]) for T <=
// kSkinnyFp8MaxRows, x̂ [T, K] and Ŵ [N, K] e4m3 codes. The bf16 skinny kernel's scheme
// (cuda/gemm_skinny.cu) over 1-byte weights: one block of 128 threads owns kRows consecutive
// output columns n and the whole K; thread t streams 16-byte chunks (16 codes) t, t + 128, ... of
// each of its kRows W rows (kUnroll chunks of every row in flight, L1 bypassed: W is read once)
// and multiplies them on CUDA cores with the same 16 columns of the T activation rows (decoded
// from L1-cached codes). Products of two e4m3 values are exact in fp32; the sums are fp32 in a
// fixed order (per thread, warp butterfly, the 8 warps in index order): deterministic, no
// atomics. It keeps its own body: the same scheme as one template shared with the bf16 kernel
// (ac187fe) compiled to 45 instead of 54 registers but read the weights at 66.4 % of the copy
// ceiling at one row instead of 73.4 % (H200, 2026-12-01, gpu_bench gemm-fp8). Then the
// small-row tensor-core kernel.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/cp_async.cuh"
#include "cuda/cuda_check.h"
#include "cuda/fp8.cuh"
#include "cuda/fp8.h"
#include "cuda/mma.cuh"
#include "cuda/skinny.cuh"

namespace strata::cuda {
namespace {

// 128 threads: at K = 4096 each thread's kUnroll x kRows loads cover its whole share of K
// (2 chunks of 16 codes per row), all in flight at once.
constexpr int kThreads = 128, kWarps = kThreads / 32, kRows = 4, kUnroll = 2;

using skinny::load_stream;

__device__ __forceinline__ void unpack16(const uint4& u, float (&f)[16]) {
  const std::uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 lo = fp8::decode2(static_cast<std::uint16_t>(w[i] & 0xffffu));
    const float2 hi = fp8::decode2(static_cast<std::uint16_t>(w[i] >> 16));
    f[4 * i] = lo.x, f[4 * i + 1] = lo.y, f[4 * i + 2] = hi.x, f[4 * i + 3] = hi.y;
  }
}

template <int T>
__global__ void __launch_bounds__(kThreads)
    skinny_fp8_kernel(const std::uint8_t* __restrict__ x, const float* __restrict__ xs,
                      const std::uint8_t* __restrict__ w, const float* __restrict__ ws,
                      __nv_bfloat16* __restrict__ y, int N, int K) {
  const int n0 = static_cast<int>(blockIdx.x) * kRows;
  const int chunks = K / 16;
  const std::uint8_t* wr[kRows];
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
        wv[u][r] = c < chunks ? load_stream(wr[r] + c * 16) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float xf[16];
        unpack16(*reinterpret_cast<const uint4*>(x + static_cast<long long>(t) * K + c * 16), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float wf[16];
          unpack16(wv[u][r], wf);
          float s = acc[r][t];
#pragma unroll
          for (int e = 0; e < 16; ++e) s = fmaf(xf[e], wf[e], s);
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
      y[static_cast<long long>(t) * N + n0 + r] = __float2bfloat16_rn(v * xs[t] * ws[n0 + r]);
    }
  }
}

// ---- Small-row FP8 GEMMs on tensor cores (up to kSmallFp8MaxRows rows; cuda/fp8.h) ----
// A block of 4 warps owns 64 output channels (16 per warp: one m16 tile of W rows) and one
// split of K, walked in stages of 256 bytes of K. Weights go straight from global memory into
// m16n8k32 e4m3 A fragments: lane (g, t) loads bytes [16t, 16t + 16) of each 64-byte chunk of
// rows g and g + 8 (L1 bypassed; a warp reads 256 contiguous bytes of each of its rows per stage),
// and the next stage's weights are loaded before this stage's mma run. The tokens' codes of a
// stage are copied once per block into shared memory (cp.async, double-buffered, rows padded to
// 320 bytes: conflict-free 16-byte reads) and read as the n8 B fragments. The k order inside a
// 64-byte chunk is permuted the same way for A and B (logical k 4t + i of mma m <-> byte
// 16t + 8m + i, 16 + 4t + i <-> 16t + 8m + 4 + i), which leaves every dot product unchanged.
// Splits of K write fp32 partials that a second kernel sums in split order (deterministic).
// Two shapes (the `wide` flag of cuda/fp8.h): 16 weight rows per warp with 4-chunk stages, or
// 32 rows per warp (two m16 tiles sharing each B fragment, so every staged token byte serves
// twice the weights: the tokens' reads from L2 per weight byte halve) with 2-chunk stages.
constexpr int kMmaWarps = 4, kChunk = 64;

template <int NT, int MT, int SC, bool kPartial>
__global__ void __launch_bounds__(32 * kMmaWarps)
    small_fp8_kernel(const std::uint8_t* __restrict__ x, const float* __restrict__ xs,
                     const std::uint8_t* __restrict__ w, const float* __restrict__ ws,
                     __nv_bfloat16* __restrict__ y, float* __restrict__ partial, int T, int N,
                     int K, int split_bytes) {
  constexpr int TP = 8 * NT;  // token rows staged (rows >= T are zero-filled)
  constexpr int kStage = kChunk * SC, kXPitch = kStage + 64;
  __shared__ __align__(16) std::uint8_t xsm[2][TP * kXPitch];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = static_cast<int>(blockIdx.x) * (16 * MT * kMmaWarps) + warp * 16 * MT;
  const long long k0 = static_cast<long long>(blockIdx.y) * split_bytes;
  const std::uint8_t* wr[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      wr[m][h] =
          w + static_cast<long long>(min(row0 + 16 * m + 8 * h + g, N - 1)) * K + k0 + 16 * t;
  const int stages = split_bytes / kStage;
  const auto load_x = [&](int st, int buf) {
    for (int p = tid; p < TP * (kStage / 16); p += 32 * kMmaWarps) {
      const int tok = p / (kStage / 16), col = (p % (kStage / 16)) * 16;
      const bool ok = tok < T;
      async::cp_async16(&xsm[buf][tok * kXPitch + col],
                        x + static_cast<long long>(ok ? tok : 0) * K + k0 +
                            static_cast<long long>(st) * kStage + col,
                        ok);
    }
    async::cp_async_commit();
  };
  uint4 cur[MT][2][SC], nxt[MT][2][SC];
  const auto load_w = [&](int st, uint4(&r)[MT][2][SC]) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int u = 0; u < SC; ++u)
          r[m][h][u] = load_stream(wr[m][h] + static_cast<long long>(st) * kStage + u * kChunk);
  };
  float acc[MT][NT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;
  load_x(0, 0);
  load_w(0, cur);
  for (int st = 0; st < stages; ++st) {
    const bool more = st + 1 < stages;
    if (more) {
      load_x(st + 1, (st + 1) & 1);
      load_w(st + 1, nxt);
      async::cp_async_wait<1>();
    } else {
      async::cp_async_wait<0>();
    }
    __syncthreads();
    const std::uint8_t* xb = xsm[st & 1];
#pragma unroll
    for (int u = 0; u < SC; ++u)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint4 xv =
            *reinterpret_cast<const uint4*>(xb + (8 * j + g) * kXPitch + u * kChunk + 16 * t);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const uint4 a = cur[m][0][u], b = cur[m][1][u];
          mma::mma_e4m3(acc[m][j], a.x, b.x, a.y, b.y, xv.x, xv.y);
          mma::mma_e4m3(acc[m][j], a.z, b.z, a.w, b.w, xv.z, xv.w);
        }
      }
    __syncthreads();  // buffer st & 1 is refilled by stage st + 2's copies
    if (more) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int u = 0; u < SC; ++u) cur[m][h][u] = nxt[m][h][u];
    }
  }
  // c0, c1: row g, tokens 8j + 2t, + 1; c2, c3: row g + 8 (of m-tile m).
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = row0 + 16 * m + g + 8 * h;
        if (n >= N) continue;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tok = 8 * j + 2 * t + e;
          if (tok >= T) continue;
          const float v = acc[m][j][2 * h + e];
          if constexpr (kPartial)
            partial[(static_cast<long long>(blockIdx.y) * T + tok) * N + n] = v;
          else
            y[static_cast<long long>(tok) * N + n] = __float2bfloat16_rn(v * xs[tok] * ws[n]);
        }
      }
}

__global__ void small_fp8_reduce_kernel(const float* __restrict__ partial, int splits,
                                        const float* __restrict__ xs, const float* __restrict__ ws,
                                        __nv_bfloat16* __restrict__ y, int T, int N) {
  const long long n = static_cast<long long>(T) * N;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    float v = partial[i];
    for (int s = 1; s < splits; ++s) v += partial[s * n + i];
    y[i] = __float2bfloat16_rn(v * xs[i / N] * ws[i % N]);
  }
}

template <int NT, int MT, int SC>
void launch_small(const std::uint8_t* x, const float* xs, const std::uint8_t* w, const float* ws,
                  __nv_bfloat16* y, float* partial, int splits, int T, int N, int K,
                  cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((N + 16 * MT * kMmaWarps - 1) / (16 * MT * kMmaWarps)),
                  static_cast<unsigned>(splits));
  if (splits == 1) {
    small_fp8_kernel<NT, MT, SC, false>
        <<<grid, 32 * kMmaWarps, 0, s>>>(x, xs, w, ws, y, nullptr, T, N, K, K);
  } else {
    small_fp8_kernel<NT, MT, SC, true>
        <<<grid, 32 * kMmaWarps, 0, s>>>(x, xs, w, ws, y, partial, T, N, K, K / splits);
    CUDA_CHECK_LAUNCH();
    const long long n = static_cast<long long>(T) * N;
    small_fp8_reduce_kernel<<<static_cast<unsigned>(std::min<long long>((n + 255) / 256, 1024)),
                              256, 0, s>>>(partial, splits, xs, ws, y, T, N);
  }
  CUDA_CHECK_LAUNCH();
}

template <int MT, int SC>
void launch_small_nt(const std::uint8_t* x, const float* xs, const std::uint8_t* w, const float* ws,
                     __nv_bfloat16* y, float* partial, int splits, int T, int N, int K,
                     cudaStream_t s) {
  static_assert(kSmallFp8MaxRows == 64, "instantiate every n8 tile count up to 8");
  switch ((T + 7) / 8) {
    case 1:
      launch_small<1, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
    case 2:
      launch_small<2, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
    case 3:
      launch_small<3, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
    case 4:
      launch_small<4, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
    case 5:
      launch_small<5, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
    case 6:
      launch_small<6, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
    case 7:
      launch_small<7, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
    default:
      launch_small<8, MT, SC>(x, xs, w, ws, y, partial, splits, T, N, K, s);
      break;
  }
}

// ---- FP8 GEMMs with K split across the warps of one block (kWarpK; up to kWarpKFp8MaxRows) ----
// The small-row kernel's fragments (the same permuted k order, lane (g, t) holding bytes
// [16t, 16t + 16) of each 64-byte chunk of rows g and g + 8) without its two costs measured on
// the H200 (docs/benchmarks.md, ninth session: 13.6 us for o_proj's 16.8 MB at 8 rows, 29 % of
// the ceiling): the split-K partials and their second kernel, and the per-stage block barriers of
// the shared token tile. A block of kWkWarps warps owns 16 output channels and the whole K; warp w
// takes the contiguous stages [w S / W, (w + 1) S / W) (S = K / 256) and keeps two stages of
// weights in registers in flight (8 KB per warp; at K = 4096 each warp's whole share, issued at
// its start). The tokens' codes are read per warp straight from L1/L2 (16-byte __ldg: x is small
// and shared by every block). The warps' fp32 sums meet in shared memory and are added in warp
// order: one kernel, deterministic, no atomics. Up to 32 rows: two blocks of 256 threads per SM
// fit in 128 registers per thread (ptxas: no spill at 1-2 tiles of 8 tokens, 4 bytes at 3-4);
// 5-8 tiles needed 236-255 registers and spilled up to 136 bytes (one block per SM), so T > 32
// is left to the other kernels. With `pdl` the launch may start while the
// previous kernel on the stream drains (programmatic dependent launch): the weight loads (W is
// never written by a kernel) are issued before griddepcontrol.wait, the tokens' codes and scales
// read and y written after it.
constexpr int kWkWarps = 8, kWkStage = 256, kWkSC = kWkStage / kChunk;

template <int NT, bool kPdl>
__global__ void __launch_bounds__(32 * kWkWarps, 2)
    warpk_fp8_kernel(const std::uint8_t* __restrict__ x, const float* __restrict__ xs,
                     const std::uint8_t* __restrict__ w, const float* __restrict__ ws,
                     __nv_bfloat16* __restrict__ y, int T, int N, int K) {
  __shared__ float red[kWkWarps][NT * 4][32];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = static_cast<int>(blockIdx.x) * 16;
  const int stages = K / kWkStage;
  const int s_begin = warp * stages / kWkWarps, s_end = (warp + 1) * stages / kWkWarps;
  // Rows past N re-read the last row; their sums are dropped.
  const std::uint8_t* const w0 = w + static_cast<long long>(min(row0 + g, N - 1)) * K + 16 * t;
  const std::uint8_t* const w1 = w + static_cast<long long>(min(row0 + 8 + g, N - 1)) * K + 16 * t;
  uint4 buf[2][2][kWkSC];
  const auto load_w = [&](int st, uint4(&r)[2][kWkSC]) {
#pragma unroll
    for (int u = 0; u < kWkSC; ++u) {
      const long long off = static_cast<long long>(st) * kWkStage + u * kChunk;
      r[0][u] = load_stream(w0 + off);
      r[1][u] = load_stream(w1 + off);
    }
  };
  if (s_begin < s_end) load_w(s_begin, buf[0]);
  if (s_begin + 1 < s_end) load_w(s_begin + 1, buf[1]);
  if constexpr (kPdl) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  }
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // Token rows 8j + g (rows >= T read as zeros: their columns of the product are dropped).
  const std::uint8_t* xr[NT];
  bool xok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int tok = 8 * j + g;
    xok[j] = tok < T;
    xr[j] = x + static_cast<long long>(xok[j] ? tok : 0) * K + 16 * t;
  }
  const auto compute = [&](const uint4(&r)[2][kWkSC], int st) {
#pragma unroll
    for (int u = 0; u < kWkSC; ++u) {
      const long long off = static_cast<long long>(st) * kWkStage + u * kChunk;
      uint4 xv[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j)
        xv[j] =
            xok[j] ? __ldg(reinterpret_cast<const uint4*>(xr[j] + off)) : make_uint4(0, 0, 0, 0);
      const uint4 a = r[0][u], b = r[1][u];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        mma::mma_e4m3(acc[j], a.x, b.x, a.y, b.y, xv[j].x, xv[j].y);
        mma::mma_e4m3(acc[j], a.z, b.z, a.w, b.w, xv[j].z, xv[j].w);
      }
    }
  };
  for (int s = s_begin; s < s_end; s += 2) {
#pragma unroll
    for (int d = 0; d < 2; ++d) {
      const int st = s + d;
      if (st < s_end) {
        compute(buf[d], st);
        if (st + 2 < s_end) load_w(st + 2, buf[d]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[warp][j * 4 + e][lane] = acc[j][e];
  __syncthreads();
  // c0, c1: row g, tokens 8j + 2t, + 1; c2, c3: row g + 8 (the mma's D layout).
  for (int i = tid; i < NT * 4 * 32; i += 32 * kWkWarps) {
    const int je = i / 32, ln = i % 32, j = je / 4, e = je % 4;
    float v = red[0][je][ln];
#pragma unroll
    for (int k = 1; k < kWkWarps; ++k) v += red[k][je][ln];
    const int n = row0 + (ln >> 2) + 8 * (e >> 1), tok = 8 * j + 2 * (ln & 3) + (e & 1);
    if (n < N && tok < T)
      y[static_cast<long long>(tok) * N + n] = __float2bfloat16_rn(v * xs[tok] * ws[n]);
  }
}

template <int NT>
void launch_warpk(const std::uint8_t* x, const float* xs, const std::uint8_t* w, const float* ws,
                  __nv_bfloat16* y, int T, int N, int K, bool pdl, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((N + 15) / 16)), block(32 * kWkWarps);
  if (pdl)
    launch_kernel(warpk_fp8_kernel<NT, true>, grid, block, 0, s, true, 1, x, xs, w, ws, y, T, N, K);
  else
    launch_kernel(warpk_fp8_kernel<NT, false>, grid, block, 0, s, false, 1, x, xs, w, ws, y, T, N,
                  K);
}

template <int T>
void launch_t(const std::uint8_t* x, const float* xs, const std::uint8_t* w, const float* ws,
              __nv_bfloat16* y, int N, int K, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((N + kRows - 1) / kRows);
  skinny_fp8_kernel<T><<<blocks, kThreads, 0, s>>>(x, xs, w, ws, y, N, K);
  CUDA_CHECK_LAUNCH();
}

// The two shapes' rows per block and K bytes per stage.
constexpr int block_rows(bool wide) {
  return wide ? 128 : 64;
}
constexpr int stage_bytes(bool wide) {
  return wide ? 128 : 256;
}

}  // namespace

bool skinny_fp8_applies(const void* x, const void* w, int T, int N, int K) {
  const auto a16 = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; };
  return T >= 1 && T <= kSkinnyFp8MaxRows && N >= 1 && K >= 16 && K % 16 == 0 && a16(x) && a16(w);
}

bool small_fp8_applies(const void* x, const void* w, int T, int N, int K, bool wide) {
  const auto a16 = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; };
  const int st = stage_bytes(wide);
  return T >= 1 && T <= kSmallFp8MaxRows && N >= 1 && K >= st && K % st == 0 && a16(x) && a16(w);
}

int small_fp8_splits(int T, int N, int K, int num_sms, std::size_t partial_floats, bool wide) {
  const int blocks = (N + block_rows(wide) - 1) / block_rows(wide), stages = K / stage_bytes(wide);
  int splits = 1;
  while (blocks * splits < 2 * num_sms && splits < 8 && stages % (2 * splits) == 0 &&
         static_cast<std::size_t>(2 * splits) * T * N <= partial_floats)
    splits *= 2;
  return splits;
}

void launch_small_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                           const float* ws, __nv_bfloat16* y, int T, int N, int K, float* partial,
                           int splits, bool wide, cudaStream_t s) {
  if (!small_fp8_applies(x, w, T, N, K, wide) || splits < 1 ||
      (K / stage_bytes(wide)) % splits != 0 || (splits > 1 && partial == nullptr))
    throw InternalError(
        "small FP8 GEMM: T=" + std::to_string(T) + " N=" + std::to_string(N) +
        " K=" + std::to_string(K) + " splits=" + std::to_string(splits) + (wide ? " wide" : "") +
        " (needs T in 1.." + std::to_string(kSmallFp8MaxRows) + ", K a multiple of " +
        std::to_string(stage_bytes(wide)) + " split evenly, 16-byte aligned x and w)");
  if (wide)
    launch_small_nt<2, 2>(x, xs, w, ws, y, partial, splits, T, N, K, s);
  else
    launch_small_nt<1, 4>(x, xs, w, ws, y, partial, splits, T, N, K, s);
}

bool warpk_fp8_applies(const void* x, const void* w, int T, int N, int K) {
  const auto a16 = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; };
  return T >= 1 && T <= kWarpKFp8MaxRows && N >= 1 && K >= kWkStage && K % kWkStage == 0 &&
         a16(x) && a16(w);
}

void launch_warpk_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                           const float* ws, __nv_bfloat16* y, int T, int N, int K, bool pdl,
                           cudaStream_t s) {
  if (!warpk_fp8_applies(x, w, T, N, K))
    throw InternalError("split-K-in-block FP8 GEMM: T=" + std::to_string(T) +
                        " N=" + std::to_string(N) + " K=" + std::to_string(K) + " (needs T in 1.." +
                        std::to_string(kWarpKFp8MaxRows) + ", K a multiple of " +
                        std::to_string(kWkStage) + ", 16-byte aligned x and w)");
  static_assert(kWarpKFp8MaxRows == 32, "instantiate every n8 tile count up to 4");
  switch ((T + 7) / 8) {
    case 1:
      launch_warpk<1>(x, xs, w, ws, y, T, N, K, pdl, s);
      break;
    case 2:
      launch_warpk<2>(x, xs, w, ws, y, T, N, K, pdl, s);
      break;
    case 3:
      launch_warpk<3>(x, xs, w, ws, y, T, N, K, pdl, s);
      break;
    default:
      launch_warpk<4>(x, xs, w, ws, y, T, N, K, pdl, s);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void launch_skinny_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                            const float* ws, __nv_bfloat16* y, int T, int N, int K,
                            cudaStream_t s) {
  if (!skinny_fp8_applies(x, w, T, N, K))
    throw InternalError("skinny FP8 GEMM: T=" + std::to_string(T) + " N=" + std::to_string(N) +
                        " K=" + std::to_string(K) + " (needs T in 1.." +
                        std::to_string(kSkinnyFp8MaxRows) +
                        ", K a multiple of 16, 16-byte aligned x and w)");
  static_assert(kSkinnyFp8MaxRows == 4, "instantiate every row count up to kSkinnyFp8MaxRows");
  switch (T) {
    case 1:
      launch_t<1>(x, xs, w, ws, y, N, K, s);
      break;
    case 2:
      launch_t<2>(x, xs, w, ws, y, N, K, s);
      break;
    case 3:
      launch_t<3>(x, xs, w, ws, y, N, K, s);
      break;
    default:
      launch_t<4>(x, xs, w, ws, y, N, K, s);
      break;
  }
}

}  // namespace strata::cuda

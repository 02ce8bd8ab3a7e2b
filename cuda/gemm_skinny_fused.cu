// The skinny GEMM with the decode layer's element-wise work fused in (cuda/gemm_skinny_fused.h).
//
// The scheme is cuda/gemm_skinny.cu's (one block of 256 threads per 4 consecutive output
// columns, the whole K per block, 16-byte weight loads that bypass L1, kUnroll x kRows loads in
// flight before any FMA, partial sums reduced in a fixed order: warp butterfly, then the 8
// warps in index order). What changes is where x comes from and where y goes:
// - kNorm: thread t reads the fp32 residual and gamma for its chunks, multiplies them and sums
//   the residual's squares beside the dot products; the squares go through the same fixed-order
//   reduction, so every block of the launch computes the same inv(t) (bitwise) and scales its
//   sums by it at the end. Counted (docs/benchmarks.md, seventh session): 24 KB of resid +
//   gamma per block and row from L1/L2 beside 32 KB of weights per block, 8 more FMAs per chunk.
// - kSwiglu: gate and up chunks (2 x 16 B) per 8 inputs, silu(g) . u rounded to bf16 as the
//   16-byte SwiGLU kernel does, recomputed by every block (1024 blocks of the down GEMM:
//   14336 exp per row per block, on the SFU beside the FMA pipe).
// - resid_out: resid[t][n] += sum, one thread per element after the block's reduction.
// - pdl: the first loads of W (never written by a kernel) are issued before griddepcontrol.wait,
//   so they overlap the previous kernel's tail.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/gemm.h"
#include "cuda/gemm_skinny_fused.h"
#include "cuda/skinny.cuh"
#include "runtime/error.h"

namespace strata::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256, kWarps = kThreads / 32, kRows = 4, kUnroll = 2;

using skinny::load_stream;
using skinny::unpack8;

__device__ __forceinline__ uint4 load_nc(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// The 8 inputs of chunk c of row t (and, for kNorm, their squares added to ss).
template <SkinnyIn In>
__device__ __forceinline__ void load_x(const SkinnyFusedParams& p, int t, int c, float (&xf)[8],
                                       float& ss) {
  if constexpr (In == SkinnyIn::kBf16) {
    unpack8(load_nc(p.x + static_cast<long long>(t) * p.K + c * 8), xf);
  } else if constexpr (In == SkinnyIn::kNorm) {
    const float* r = p.resid_in + static_cast<long long>(t) * p.K + c * 8;
    const uint4 a = load_nc(r), b = load_nc(r + 4);
    const float rv[8] = {__uint_as_float(a.x), __uint_as_float(a.y), __uint_as_float(a.z),
                         __uint_as_float(a.w), __uint_as_float(b.x), __uint_as_float(b.y),
                         __uint_as_float(b.z), __uint_as_float(b.w)};
    float g[8];
    unpack8(load_nc(p.gamma + c * 8), g);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      ss = fmaf(rv[e], rv[e], ss);
      xf[e] = rv[e] * g[e];
    }
  } else {
    const bf16* g = p.gu + static_cast<long long>(t) * 2 * p.K + c * 8;
    float gv[8], uv[8];
    unpack8(load_nc(g), gv);
    unpack8(load_nc(g + p.K), uv);
#pragma unroll
    for (int e = 0; e < 8; ++e)  // launch_swiglu's 16-byte kernel: same expression, same rounding
      xf[e] = __bfloat162float(__float2bfloat16_rn(gv[e] / (1.0f + __expf(-gv[e])) * uv[e]));
  }
}

template <int T, SkinnyIn In, bool Resid, bool Pdl>
__global__ void __launch_bounds__(kThreads)
    skinny_fused_kernel(const __grid_constant__ SkinnyFusedParams p) {
  constexpr bool kNorm = In == SkinnyIn::kNorm;
  const int N = p.N, K = p.K;
  const int n0 = static_cast<int>(blockIdx.x) * kRows;
  const int chunks = K / 8;  // 16-byte chunks per row
  const bf16* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)  // rows past N re-read the last row; their sums are dropped
    wr[r] = p.w + static_cast<long long>(min(n0 + r, N - 1)) * K;
  float acc[kRows][T];
  float ss[T];
#pragma unroll
  for (int t = 0; t < T; ++t) {
    ss[t] = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r][t] = 0.0f;
  }

  constexpr int kStep = kThreads * kUnroll;
  int c0 = static_cast<int>(threadIdx.x);
  uint4 wv[kUnroll][kRows];
  auto load_w = [&](int base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = base + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        wv[u][r] = c < chunks ? load_stream(wr[r] + c * 8) : make_uint4(0, 0, 0, 0);
    }
  };
  load_w(c0);  // W is never written by a kernel: safe before the dependency wait
  if constexpr (Pdl) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  }
  while (c0 < chunks) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float xf[8];
        load_x<In>(p, t, c, xf, ss[t]);
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
    c0 += kStep;
    if (c0 < chunks) load_w(c0);
  }

  constexpr int kSlots = kRows * T + (kNorm ? T : 0);
  __shared__ float red[kWarps][kSlots];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  auto warp_sum = [](float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  };
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) red[warp][r * T + t] = v;
    }
  if constexpr (kNorm) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float v = warp_sum(ss[t]);
      if (lane == 0) red[warp][kRows * T + t] = v;
    }
  }
  __syncthreads();
  const int i = static_cast<int>(threadIdx.x);
  if (i < kRows * T) {
    const int r = i / T, t = i % T;
    if (n0 + r < N) {
      float v = red[0][i];
#pragma unroll
      for (int k = 1; k < kWarps; ++k) v += red[k][i];
      if constexpr (kNorm) {
        float q = red[0][kRows * T + t];
#pragma unroll
        for (int k = 1; k < kWarps; ++k) q += red[k][kRows * T + t];
        v *= rsqrtf(q / static_cast<float>(K) + p.eps);
      }
      const long long at = static_cast<long long>(t) * N + n0 + r;
      if constexpr (Resid)
        p.resid_out[at] += v;
      else
        p.y[at] = __float2bfloat16_rn(v);
    }
  }
}

template <int T, SkinnyIn In, bool Resid>
void launch_3(const SkinnyFusedParams& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.N + kRows - 1) / kRows)), block(kThreads);
  if (p.pdl)
    launch_kernel(skinny_fused_kernel<T, In, Resid, true>, grid, block, 0, s, true, 1, p);
  else
    launch_kernel(skinny_fused_kernel<T, In, Resid, false>, grid, block, 0, s, false, 1, p);
}

template <int T, SkinnyIn In>
void launch_2(const SkinnyFusedParams& p, cudaStream_t s) {
  if (p.resid_out)
    launch_3<T, In, true>(p, s);
  else
    launch_3<T, In, false>(p, s);
}

template <int T>
void launch_1(const SkinnyFusedParams& p, cudaStream_t s) {
  switch (p.in) {
    case SkinnyIn::kBf16:
      launch_2<T, SkinnyIn::kBf16>(p, s);
      break;
    case SkinnyIn::kNorm:
      launch_2<T, SkinnyIn::kNorm>(p, s);
      break;
    case SkinnyIn::kSwiglu:
      launch_2<T, SkinnyIn::kSwiglu>(p, s);
      break;
  }
}

bool a16(const void* q) {
  return (reinterpret_cast<std::uintptr_t>(q) & 15) == 0;
}

}  // namespace

bool skinny_fused_applies(const SkinnyFusedParams& p) {
  if (p.T < 1 || p.T > kSkinnyMaxRows || p.N < 1 || p.K < 8 || p.K % 8 != 0 || !a16(p.w) ||
      p.w == nullptr)
    return false;
  if ((p.y == nullptr) == (p.resid_out == nullptr)) return false;  // exactly one output
  switch (p.in) {
    case SkinnyIn::kBf16:
      return p.x != nullptr && a16(p.x);
    case SkinnyIn::kNorm:
      return p.resid_in != nullptr && p.gamma != nullptr && a16(p.resid_in) && a16(p.gamma);
    case SkinnyIn::kSwiglu:
      return p.gu != nullptr && a16(p.gu);
  }
  return false;
}

void launch_skinny_fused(const SkinnyFusedParams& p, cudaStream_t s) {
  if (!skinny_fused_applies(p))
    throw InternalError("fused skinny GEMM: T=" + std::to_string(p.T) +
                        " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K) +
                        " in=" + std::to_string(static_cast<int>(p.in)) + " (needs T in 1.." +
                        std::to_string(kSkinnyMaxRows) +
                        ", K a multiple of 8, 16-byte aligned inputs, exactly one of y and "
                        "resid_out)");
  static_assert(kSkinnyMaxRows == 2, "instantiate every row count up to kSkinnyMaxRows");
  if (p.T == 1)
    launch_1<1>(p, s);
  else
    launch_1<2>(p, s);
}

int decode_fusion_from_env() {
  const char* v = std::getenv("STRATA_DECODE_FUSION");
  const std::string s = v ? v : "";
  if (s.empty() || s == "0") return 0;
  if (s == "1") return 1;
  // Mode 2 (programmatic dependent launch) is refused: on the H200 (2026-12-02, seventh session)
  // GpuModel.Llama8BWidthDecodeFusionMatchesUnfusedAndReference found its results differing from
  // mode 1's (eager, 8B width), i.e. a dependency the PDL launches do not honour. Tests and
  // gpu_bench still reach it through CudaBackendProbe::set_decode_fusion(2) to find the cause.
  if (s == "2")
    throw ConfigError("STRATA_DECODE_FUSION",
                      "2 (programmatic dependent launch) is disabled: its results differed from "
                      "mode 1's on the H200 (docs/cuda-backend.md \"Decode fusion at 1-2 rows\"); "
                      "use 0 or 1");
  throw ConfigError("STRATA_DECODE_FUSION",
                    "'" + s +
                        "' is not one of: 0 (unfused decode at 1-2 rows), 1 (the fused skinny "
                        "GEMMs: RMSNorm, SwiGLU and the residual add inside them)");
}

}  // namespace strata::cuda

// Skinny GEMMs with the decode layer's element-wise work fused in (issue 18 item 3, single-stream
// decode; cuda/gemm_skinny_fused.cu): the same 1..kSkinnyMaxRows-row kernel as
// launch_skinny_gemm (cuda/gemm.h), with the RMSNorm or the SwiGLU in its input load and the
// residual add in its epilogue, so that a decode layer at 1-2 rows runs 3 kernels fewer
// (docs/cuda-backend.md "Decode fusion at 1-2 rows"). Plain C++ header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace strata::cuda {

// y[t, n] = sum_k W[n, k] . x[t, k] over one of three inputs and into one of two outputs:
//   kBf16:   x = x_bf16[t, k]
//   kNorm:   x = resid[t, k] . gamma[k] . inv(t), inv(t) = rsqrt(mean_k resid[t, k]^2 + eps):
//            the RMSNorm of the fp32 residual row, inv(t) factored out of the sum (every block
//            sums the row's squares itself, in one fixed order: the same inv in every block)
//            and x not rounded to bf16 (the unfused path rounds the normed row)
//   kSwiglu: x = bf16(silu(g) . u), g = gu[t, k], u = gu[t, K + k] (the expression and the
//            rounding of launch_swiglu's 16-byte kernel: the same x as the unfused path)
// and y bf16 [T, N], or resid_out[t, n] += y (fp32, in place, one thread per element: no
// atomics, deterministic; the product not rounded to bf16 before the add).
enum class SkinnyIn { kBf16, kNorm, kSwiglu };
struct SkinnyFusedParams {
  const __nv_bfloat16* w;  // [N, K]
  int T, N, K;             // 1 <= T <= kSkinnyMaxRows, K % 8 == 0
  SkinnyIn in = SkinnyIn::kBf16;
  const __nv_bfloat16* x = nullptr;      // kBf16: [T, K]
  const float* resid_in = nullptr;       // kNorm: [T, K]
  const __nv_bfloat16* gamma = nullptr;  // kNorm: [K]
  float eps = 0.0f;                      // kNorm
  const __nv_bfloat16* gu = nullptr;     // kSwiglu: [T, 2K]
  __nv_bfloat16* y = nullptr;            // [T, N], or null with resid_out
  float* resid_out = nullptr;            // [T, N] (+=), or null with y
  // Programmatic dependent launch (sm_90): the launch may begin while the previous kernel on the
  // stream finishes; each block issues its first weight loads (which no kernel writes), then
  // waits (griddepcontrol.wait) before it reads x / resid / gu or writes an output, and lets
  // the next kernel launch early (griddepcontrol.launch_dependents). Capturable in graphs.
  bool pdl = false;
};
// Whether the fused kernel takes p (row count, K % 8, 16-byte aligned pointers, exactly one
// output, the input of p.in given).
bool skinny_fused_applies(const SkinnyFusedParams& p);
// Throws InternalError when !skinny_fused_applies(p).
void launch_skinny_fused(const SkinnyFusedParams& p, cudaStream_t s);

// STRATA_DECODE_FUSION: 0 or unset (the default until measured on the H200): decode steps of
// 1..kSkinnyMaxRows rows run the unfused kernels; 1: the fused skinny kernels above (3 launches
// fewer per layer). 2 (that with programmatic dependent launch) throws ConfigError: on the
// H200 its results differed from mode 1's (a race; see the .cu). Another value throws ConfigError.
int decode_fusion_from_env();

}  // namespace strata::cuda

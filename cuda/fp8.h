// The CUDA FP8 (W8A8, e4m3) path of `model.quantization: fp8` (issue 20; docs/cuda-backend.md
// "FP8"): weights per output channel and activations per token, each row with one fp32 scale,
// exactly the CPU oracle's arithmetic (runtime/cpu/fp8_matmul.h) up to the order of the fp32
// sums. Activations are quantized by the kernel that produces them (RMSNorm, SwiGLU:
// cuda/kernels.h) or, for the attention output, by launch_quantize_rows. The GEMMs are
// Gemm::linear_fp8 (cuda/gemm.h). Plain C++ header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace strata::cuda {

// e4m3 rows with one fp32 scale per row: value ≈ e4m3(codes[r][c]) * scale[r].
struct Fp8Rows {
  std::uint8_t* codes = nullptr;  // [rows][cols]
  float* scale = nullptr;         // [rows]
};

// Per-row quantization of bf16 rows (row r at x + r * ld): weights at load, the attention output
// before o_proj. One block per row. static_scale > 0: every row with that scale (static
// activations of a pre-quantized checkpoint) instead of its own amax / 448.
void launch_quantize_rows(const __nv_bfloat16* x, long long ld, int rows, int cols, Fp8Rows out,
                          cudaStream_t s, float static_scale = 0.0f);

// Skinny FP8 GEMMs (cuda/gemm_fp8.cu): y[T, N] = bf16((x̂[T, K] · Ŵ[N, K]^T) * xs[t] * ws[n]) for
// T <= kSkinnyFp8MaxRows, a kernel of Strata's own that streams the e4m3 weights with 16-byte
// loads (half the bytes of bf16: single-stream decode). Applies when K % 16 == 0 and x, w are
// 16-byte aligned.
inline constexpr int kSkinnyFp8MaxRows = 4;
bool skinny_fp8_applies(const void* x, const void* w, int T, int N, int K);
void launch_skinny_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                            const float* ws, __nv_bfloat16* y, int T, int N, int K, cudaStream_t s);

// Small-row FP8 GEMMs on tensor cores (cuda/gemm_fp8.cu): the same y for T <= kSmallFp8MaxRows
// (batched decode), m16n8k32 e4m3 mma.sync fed straight from 16-byte weight loads, the tokens'
// codes staged per block in shared memory, K split `splits` ways (small_fp8_splits: enough
// blocks for every SM) with fp32 partials in `partial` ([splits][T][N], needed when splits > 1)
// summed in split order. `wide`: 32 weight rows per warp instead of 16 (each staged token byte
// serves twice the weights) with 128-byte stages instead of 256. Applies when K is a multiple of
// the stage (256 / 128 bytes) and x, w are 16-byte aligned.
inline constexpr int kSmallFp8MaxRows = 64;
bool small_fp8_applies(const void* x, const void* w, int T, int N, int K, bool wide);
int small_fp8_splits(int T, int N, int K, int num_sms, std::size_t partial_floats, bool wide);
void launch_small_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                           const float* ws, __nv_bfloat16* y, int T, int N, int K, float* partial,
                           int splits, bool wide, cudaStream_t s);

// FP8 GEMMs with K split across the 8 warps of a block (cuda/gemm_fp8.cu, Gemm's kWarpK path):
// the same y for T <= kWarpKFp8MaxRows, 16 output channels per block, the small-row kernel's
// m16n8k32 fragments fed from 16-byte weight loads, each warp's fp32 sum over its share of K
// added in warp order in shared memory (one kernel, no partials, deterministic). `pdl`: launched
// with programmatic stream serialization, the weight loads issued before the dependency wait
// (capturable in graphs). Applies when K is a multiple of 256 and x, w are 16-byte aligned.
inline constexpr int kWarpKFp8MaxRows = 32;
bool warpk_fp8_applies(const void* x, const void* w, int T, int N, int K);
void launch_warpk_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                           const float* ws, __nv_bfloat16* y, int T, int N, int K, bool pdl,
                           cudaStream_t s);

// y[t][n] = bf16(acc[t][n] * xs[t] * ws[n]) (acc fp32 [T][N]): the outer scaling where cuBLASLt
// cannot apply per-row scales itself (Gemm::linear_fp8's fallback).
void launch_scale_outer(const float* acc, const float* xs, const float* ws, __nv_bfloat16* y, int T,
                        int N, cudaStream_t s);

}  // namespace strata::cuda

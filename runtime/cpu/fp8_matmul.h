// The CPU FP8 (W8A8) oracle: e4m3 operands with one fp32 scale per row, products exact in
// fp32, sums exact, one rounding to fp32, then the two scales. The CUDA FP8 GEMMs are checked
// against it; the arithmetic is written down in docs/cpu-backend.md "FP8".
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cpu/thread_pool.h"

namespace strata::cpu {

// rows × cols e4m3 codes (runtime/fp8.h), row-major, and each row's scale: value ≈
// e4m3_to_float(codes[r][c]) · scale[r].
struct Fp8Rows {
  int rows = 0, cols = 0;
  std::vector<std::uint8_t> codes;  // [rows][cols]
  std::vector<float> scale;         // [rows]
};

// Per-row quantization: s = amax/448 (fp32 division; s = 1 for an all-zero row), code =
// float_to_e4m3(x / s) (fp32 division, then RNE with saturation). Weights [out][in] get one
// scale per output channel, activations [tokens][in] one per token. Rows are independent
// (parallel over rows when `pool` is given).
Fp8Rows quantize_rows_e4m3(const float* x, int rows, int cols, ThreadPool* pool = nullptr);

// Static per-tensor quantization with a given scale s (a pre-quantized checkpoint's
// input_scale, finite and > 0): code = float_to_e4m3(x / s) (fp32 division, then RNE with
// saturation: |x| beyond 448·s clips to ±448), every row's scale = s. Needs no amax, so a
// fused kernel can quantize without a pass over the row first.
Fp8Rows quantize_rows_e4m3_static(const float* x, int rows, int cols, float scale,
                                  ThreadPool* pool = nullptr);

// y[t][o] = fl(fl(fl(S[t][o]) · x.scale[t]) · w.scale[o]), S[t][o] = Σ_k x̂[t][k]·ŵ[o][k]
// over the e4m3 values (x̂, ŵ the decoded codes, unscaled). Each product is exact in fp32
// (4 × 4 significant bits) and the sum is exact (fp64; see the .cpp for why no rounding
// happens), so S is rounded once and the result does not depend on the summation order.
// Needs x.cols == w.cols ≤ 131072. Parallel over output columns.
void matmul_e4m3(ThreadPool& pool, const Fp8Rows& x, const Fp8Rows& w, float* y);

}  // namespace strata::cpu

// The decode GEMM of Strata's own for Hopper (cuda/gemm_decode.cu, sm_90a): y[T, N] = x[T, K] .
// W[N, K]^T for 1..kDecodeGemmMaxRows rows, bf16 in, fp32 accumulation, bf16 or fp32 out. "Swap
// AB": the weight rows are wgmma's M operand (64 per instruction) and the T activation rows its N
// operand (T rounded up to 8, 16, 32, 64, 128 or 256; rows past T are TMA's zero fill and never
// written). One lane of a producer warpgroup streams W and x tiles by TMA through a deep mbarrier
// ring; two consumer warpgroups issue wgmma. The (tile, k-tile) work is split evenly over `grid`
// persistent blocks (stream-K: a tile's k range may span several blocks), and a split tile's fp32
// partials are summed in block order by the block that arrives last (an integer counter per tile,
// no float atomics): for a fixed grid the result is bitwise the same run to run, in a graph or not.
// Design and count: docs/cuda-backend.md "GEMMs"; measured: docs/benchmarks.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::cuda {

inline constexpr int kDecodeGemmMaxRows = 256;
// Output tiles per call the counters cover (N / 128 or N / 256 tiles: lm_head's 128256 rows are
// 501 to 1002).
inline constexpr int kDecodeGemmMaxTiles = 4096;

// Device scratch of one caller (one stream: calls must not overlap). partial: the split tiles'
// fp32 partials, decode_gemm_partial_floats(grid) floats. counters: kDecodeGemmMaxTiles
// unsigned, zero before the first call; every call leaves them zero again. partial_floats: the
// size of `partial` (0 = not stated, unchecked); a call whose grid needs more slots throws.
struct DecodeGemmWorkspace {
  float* partial = nullptr;
  unsigned* counters = nullptr;
  std::size_t partial_floats = 0;
};
std::size_t decode_gemm_partial_floats(int grid);

// Whether the kernel can run this call: a compute capability 9.0 device, the driver's tensor-map
// encoder, 1 <= T <= kDecodeGemmMaxRows, K % 64 == 0, x and w 16-byte aligned, at most
// kDecodeGemmMaxTiles output tiles. `why` (optional) says what failed.
bool decode_gemm_applies(const void* x, const void* w, int T, int N, int K,
                         std::string* why = nullptr);

// Launches on `s` with `grid` blocks (<= 0: one per SM of the current device). No allocation,
// no synchronisation: capturable in a CUDA graph (the tensor maps are encoded on the host per
// call, W's cached per pointer, and passed by value as kernel parameters). pdl: launched with
// programmatic dependent launch - the first ring of W tiles is requested while the previous
// kernel on the stream drains; x is read and anything written only after that kernel has
// completed (griddepcontrol.wait), so back-to-back calls on one workspace stay ordered.
void launch_decode_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool f32out, int T,
                        int N, int K, const DecodeGemmWorkspace& ws, int grid, cudaStream_t s,
                        bool pdl = false);

// The FP8 (W8A8) variant, the same kernel over e4m3 codes (issue 20 item 2; not yet run on a GPU):
// y[t][n] = bf16(acc[t][n] * xs[t] * ws[n]) with acc = sum_k x8[t][k] w8[n][k] in fp32 (wgmma
// m64nNk32 e4m3: the products are exact, the sums fp32), the scales applied in the order of the
// other FP8 paths (cuda/fp8.h) after the whole K range is summed. x8 [T][K] and w8 [N][K] e4m3
// codes, xs [T] and ws [N] fp32 scales, y [T][N] bf16. A k-tile is 128 codes (128 bytes, the
// bf16 kernel's byte layout), so K % 128 == 0; the workspace is the bf16 kernel's (one caller's
// calls never overlap, whichever type they are).
bool decode_gemm_fp8_applies(const void* x, const void* w, int T, int N, int K,
                             std::string* why = nullptr);
void launch_decode_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                            const float* ws, __nv_bfloat16* y, int T, int N, int K,
                            const DecodeGemmWorkspace& scratch, int grid, cudaStream_t s,
                            bool pdl = false);

}  // namespace strata::cuda

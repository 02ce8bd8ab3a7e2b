// Device helpers of the FP8 (e4m3) path (issue 20): the encoding the CPU oracle defines
// (runtime/fp8.h: round to nearest even, saturating to ±448, NaN kept) and the per-row
// quantization of runtime/cpu/fp8_matmul.cpp done by one thread block: s = amax / 448 (IEEE
// division; s = 1 for an all-zero row), code = e4m3(x / s). Same fp32 inputs give the same codes
// and scale as the CPU, bit for bit. CUDA-only header (included by .cu files).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace strata::cuda::fp8 {

inline constexpr float kE4m3Max = 448.0f;

__device__ __forceinline__ std::uint8_t encode(float x) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// Two codes (lo = first element) to two floats (exact).
__device__ __forceinline__ float2 decode2(std::uint16_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Block-wide max of non-negative values (blockDim.x a multiple of 32, <= 1024). NaN inputs are
// ignored as std::max(amax, NaN) ignores them on the CPU.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? part[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The whole block quantizes one row of `cols` values, value(i) computing element i in fp32 (it
// is called twice per element: once for the amax, once for the code). codes[i], and *scale by
// thread 0. static_scale > 0: that scale instead of the row's amax / 448 (a pre-quantized
// checkpoint's per-tensor input_scale; saturating, as quantize_rows_e4m3_static), no amax pass.
template <typename F>
__device__ __forceinline__ void quantize_row(F value, int cols, std::uint8_t* codes, float* scale,
                                             float static_scale = 0.0f) {
  float s = static_scale;
  if (!(s > 0.0f)) {
    float amax = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) amax = fmaxf(amax, fabsf(value(i)));
    amax = block_max(amax);
    s = amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  }
  for (int i = threadIdx.x; i < cols; i += blockDim.x) codes[i] = encode(__fdiv_rn(value(i), s));
  if (threadIdx.x == 0) *scale = s;
}

}  // namespace strata::cuda::fp8

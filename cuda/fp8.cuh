// Device helpers of the FP8 (e4m3) path (issue 20): the encoding the CPU oracle defines
// (runtime/fp8.h: round to nearest even, saturating to ±448, NaN kept) and the per-row
// quantization of runtime/cpu/fp8_matmul.cpp done by one thread block: s = amax / 448 (IEEE
// division; s = 1 for an all-zero row), code = e4m3(x / s). Same fp32 inputs give the same codes
// and scale as the CPU, bit for bit. CUDA-only header (included by .cu files).
#pragma once

#include <cuda_bf16.h>
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

// The same quantization with each thread's values held in registers: one pass over memory
// (value8(i, out) computes the 8 fp32 values of vector i, i < nvec, in element order) instead of
// two, 8-byte code stores. VPT vectors per thread: nvec <= VPT * blockDim.x. Bit-identical to
// quantize_row over the same values (same amax, same division, same encoding).
template <int VPT, typename F>
__device__ __forceinline__ void quantize_row_vec(F value8, int nvec, std::uint8_t* codes,
                                                 float* scale, float static_scale = 0.0f) {
  float v[VPT][8];
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x);
    if (i < nvec) {
      value8(i, v[k]);
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[k][e]));
    }
  }
  float s = static_scale;
  if (!(s > 0.0f)) {
    amax = block_max(amax);
    s = amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x);
    if (i < nvec) {
      std::uint32_t w[2] = {0, 0};
#pragma unroll
      for (int e = 0; e < 8; ++e)
        w[e / 4] |= static_cast<std::uint32_t>(encode(__fdiv_rn(v[k][e], s))) << (8 * (e % 4));
      *reinterpret_cast<uint2*>(codes + 8 * static_cast<long long>(i)) = make_uint2(w[0], w[1]);
    }
  }
  if (threadIdx.x == 0) *scale = s;
}

// 8 bf16 values (one 16-byte load) to fp32.
__device__ __forceinline__ void load8_bf16(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x, f[2 * i + 1] = x.y;
  }
}

}  // namespace strata::cuda::fp8

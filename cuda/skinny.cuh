// What the skinny GEMM kernels (bf16 in cuda/gemm_skinny.cu, e4m3 in cuda/gemm_fp8.cu) share: the
// streaming weight load. Each keeps its own body: through one shared template both compiled to
// fewer registers and the e4m3 one ran slower on the H200 (cuda/gemm_fp8.cu says by how much).
// CUDA-only header.
#pragma once

#include <cuda_bf16.h>

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

// Eight bf16 (one 16-byte load) to fp32.
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x, f[2 * i + 1] = v.y;
  }
}

}  // namespace strata::cuda::skinny

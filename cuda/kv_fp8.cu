#include "cuda/cuda_check.h"
#include "cuda/fp8.cuh"
#include "cuda/kv_fp8.h"
#include "cuda/rope_kv.cuh"

namespace strata::cuda {

namespace {

__global__ void rope_kv_fp8_kernel(const RopeKvParams p, std::uint8_t* pool8, const float* scales) {
  // rope_kv_kernel's rotation and slot (cuda/rope_kv.cuh); K and V stored as e4m3 codes.
  rope_kv_row(
      p, blockIdx.x, [=](long long page, long long off, long long part, int g, bf16 k, bf16 v) {
        pool8[page + off] = fp8::encode(__fdiv_rn(__bfloat162float(k), scales[g * 2]));
        pool8[page + part + off] = fp8::encode(__fdiv_rn(__bfloat162float(v), scales[g * 2 + 1]));
      });
}

}  // namespace

void launch_rope_kv_write_fp8(const RopeKvParams& p, std::uint8_t* pool8, const float* scales,
                              cudaStream_t s) {
  if (p.num_tokens == 0) return;
  rope_kv_fp8_kernel<<<p.num_tokens, 256, 0, s>>>(p, pool8, scales);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda

// The GEMM autotuner's helpers (cuda/gemm.h): the output comparison (squared difference and
// squared reference norms, fp64 accumulation) and the L2 eviction before each timed call.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/gemm.h"

namespace strata::cuda {
namespace {

__global__ void diff_norms_kernel(const void* a, const void* ref, bool f32, long long n,
                                  double* sums) {
  double d2 = 0.0, r2 = 0.0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    double x, r;
    if (f32) {
      x = static_cast<const float*>(a)[i];
      r = static_cast<const float*>(ref)[i];
    } else {
      x = __bfloat162float(static_cast<const __nv_bfloat16*>(a)[i]);
      r = __bfloat162float(static_cast<const __nv_bfloat16*>(ref)[i]);
    }
    d2 += (x - r) * (x - r);
    r2 += r * r;
  }
  for (int o = 16; o > 0; o >>= 1) {
    d2 += __shfl_xor_sync(0xffffffffu, d2, o);
    r2 += __shfl_xor_sync(0xffffffffu, r2, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], d2);
    atomicAdd(&sums[1], r2);
  }
}

// Reads n 16-byte words through the L2 (ld.global.cg) and writes nothing unless their xor is a
// value the zeroed buffer never gives: the loads stay, the cache ends up holding only this buffer.
__global__ void l2_evict_kernel(const uint4* p, long long n, unsigned* sink) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

void launch_l2_evict(const void* buf, std::size_t bytes, unsigned* sink, cudaStream_t s) {
  const long long n = static_cast<long long>(bytes / 16);
  if (n <= 0) return;
  const long long blocks = std::min<long long>((n + 255) / 256, 2048);
  l2_evict_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(static_cast<const uint4*>(buf), n,
                                                                sink);
  CUDA_CHECK_LAUNCH();
}

void launch_diff_norms(const void* a, const void* ref, bool f32, long long n, double* sums,
                       cudaStream_t s) {
  if (n <= 0) return;
  const long long blocks = std::min<long long>((n + 255) / 256, 1024);
  diff_norms_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(a, ref, f32, n, sums);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda

// Weight-streaming probes (cuda/testing/stream_probe.h). Built in the sm_90a object library
// (cuda/CMakeLists.txt) beside the decode GEMM whose W stream the TMA probe copies.
#include <cuda.h>

#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/hopper_sm90.cuh"
#include "cuda/skinny.cuh"
#include "cuda/testing/stream_probe.h"

namespace strata::cuda::testing {
namespace {

using namespace sm90;

constexpr std::uint32_t kRowBytes = 128;
constexpr std::uint32_t kSmemMax = 232448;

template <int R, int B, int S>
struct ProbeCfg {
  static constexpr std::uint32_t kStage = R * kRowBytes * B;
  static constexpr std::uint32_t kBar = S * kStage;
  static constexpr std::uint32_t kAlloc = kBar + 2 * S * 8 + 1024;
  static_assert(kAlloc <= kSmemMax);
  static_assert(R <= 256, "TMA box rows <= 256");
};

struct ProbeParams {
  CUtensorMap w_map;  // [N][K] uint8, boxes of R rows x 128 bytes
  unsigned* sink;
  int ksteps;  // K / (128 B)
  long long units;
  int grid;
};

// Block = warp 0 (lane 0: the producer) + warp 1 (lane 0: the consumer).
template <int R, int B, int S>
__global__ void __launch_bounds__(64, 1) tma_probe_kernel(const __grid_constant__ ProbeParams p) {
  using C = ProbeCfg<R, B, S>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t raw = smem_u32(smem_raw);
  const std::uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const base_ptr = smem_raw + (base - raw);
  const auto full = [&](int s) { return base + C::kBar + 8u * static_cast<std::uint32_t>(s); };
  const auto empty = [&](int s) { return base + C::kBar + 8u * static_cast<std::uint32_t>(S + s); };
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), 1);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  const long long b = blockIdx.x;
  const long long u_begin = b * p.units / p.grid, u_end = (b + 1) * p.units / p.grid;
  if (tid == 0) {
    int stage = 0;
    std::uint32_t round = 0;
    for (long long u = u_begin; u < u_end; ++u) {
      const int tile = static_cast<int>(u / p.ksteps);
      const int k0 = static_cast<int>(u % p.ksteps) * static_cast<int>(kRowBytes) * B;
      if (round > 0) mbar_wait_or_trap(empty(stage), (round - 1) & 1);
      mbar_arrive_expect_tx(full(stage), C::kStage);
      const std::uint32_t dst = base + static_cast<std::uint32_t>(stage) * C::kStage;
#pragma unroll
      for (int j = 0; j < B; ++j)
        tma_load_2d(dst + static_cast<std::uint32_t>(j) * R * kRowBytes, &p.w_map,
                    k0 + j * static_cast<int>(kRowBytes), tile * R, full(stage));
      if (++stage == S) stage = 0, ++round;
    }
  } else if (tid == 32) {
    unsigned sum = 0;
    int stage = 0;
    std::uint32_t round = 0;
    for (long long u = u_begin; u < u_end; ++u) {
      mbar_wait_or_trap(full(stage), round & 1);
      sum ^= *reinterpret_cast<volatile const unsigned*>(
          base_ptr + static_cast<std::uint32_t>(stage) * C::kStage +
          static_cast<std::uint32_t>(u & 31) * 4u);
      mbar_arrive(empty(stage));
      if (++stage == S) stage = 0, ++round;
    }
    p.sink[blockIdx.x] = sum;
  }
}

template <int F>
__global__ void __launch_bounds__(256)
    ldg_probe_kernel(const std::uint8_t* __restrict__ w, unsigned* __restrict__ sink, int K) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = static_cast<int>(blockIdx.x) * 16;
  const int chunks = K / 64;
  const int c_begin = warp * chunks / 8, c_end = (warp + 1) * chunks / 8;
  const std::uint8_t* const w0 = w + static_cast<long long>(row0 + g) * K + 16 * t;
  const std::uint8_t* const w1 = w + static_cast<long long>(row0 + 8 + g) * K + 16 * t;
  unsigned sum = 0;
  for (int c = c_begin; c < c_end; c += F) {
    uint4 r0[F], r1[F];
#pragma unroll
    for (int i = 0; i < F; ++i) {
      const int cc = c + i < c_end ? c + i : c_end - 1;
      r0[i] = skinny::load_stream(w0 + 64LL * cc);
      r1[i] = skinny::load_stream(w1 + 64LL * cc);
    }
#pragma unroll
    for (int i = 0; i < F; ++i) sum ^= r0[i].x ^ r0[i].w ^ r1[i].y ^ r1[i].z;
  }
  __shared__ unsigned red[8];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum ^= __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  if (tid == 0) {
    unsigned v = 0;
    for (int i = 0; i < 8; ++i) v ^= red[i];
    sink[blockIdx.x] = v;
  }
}

template <int R, int B, int S>
void launch_shape(const ProbeParams& p, cudaStream_t s) {
  using C = ProbeCfg<R, B, S>;
  CUDA_CHECK(cudaFuncSetAttribute(tma_probe_kernel<R, B, S>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(C::kAlloc)));
  tma_probe_kernel<R, B, S><<<p.grid, 64, C::kAlloc, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

// The instantiated shapes: (box rows, boxes per stage, stages).
#define STRATA_TMA_PROBE_SHAPES(X) \
  X(128, 1, 8)                     \
  X(128, 1, 12)                    \
  X(128, 1, 4)                     \
  X(128, 2, 4)                     \
  X(128, 2, 6)                     \
  X(64, 4, 4)                      \
  X(64, 2, 8)                      \
  X(256, 1, 6)

}  // namespace

bool tma_probe_supported(const TmaProbeShape& sh) {
#define X(r, b, st) \
  if (sh.box_rows == r && sh.boxes == b && sh.stages == st) return true;
  STRATA_TMA_PROBE_SHAPES(X)
#undef X
  return false;
}

std::string tma_probe_name(const TmaProbeShape& sh) {
  return "tma r" + std::to_string(sh.box_rows) + " b" + std::to_string(sh.boxes) + " s" +
         std::to_string(sh.stages);
}

int tma_probe_blocks_per_sm(const TmaProbeShape& sh) {
  const std::uint32_t alloc =
      static_cast<std::uint32_t>(sh.stages) * sh.box_rows * kRowBytes * sh.boxes +
      2u * sh.stages * 8u + 1024u;
  return 2 * alloc <= kSmemMax ? 2 : 1;
}

void launch_tma_probe(const std::uint8_t* w, int N, int K, const TmaProbeShape& sh, int grid,
                      unsigned* sink, cudaStream_t s) {
  if (!tma_probe_supported(sh) || N % sh.box_rows != 0 ||
      K % (static_cast<int>(kRowBytes) * sh.boxes) != 0 ||
      reinterpret_cast<std::uintptr_t>(w) % 16 != 0)
    throw InternalError("launch_tma_probe: unsupported " + tma_probe_name(sh) +
                        " N=" + std::to_string(N) + " K=" + std::to_string(K));
  ProbeParams p{};
  const CUresult r = encode_tensor_map_2d(&p.w_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, w, K, N, K,
                                          kRowBytes, static_cast<std::uint32_t>(sh.box_rows));
  if (r != CUDA_SUCCESS)
    throw InternalError("launch_tma_probe: cuTensorMapEncodeTiled failed (" +
                        std::to_string(static_cast<int>(r)) + ")");
  if (grid <= 0) {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    grid = sms * tma_probe_blocks_per_sm(sh);
  }
  p.sink = sink;
  p.ksteps = K / static_cast<int>(kRowBytes) / sh.boxes;
  p.units = static_cast<long long>(N / sh.box_rows) * p.ksteps;
  p.grid = static_cast<int>(grid < p.units ? grid : p.units);
#define X(rr, bb, st)                                           \
  if (sh.box_rows == rr && sh.boxes == bb && sh.stages == st) { \
    launch_shape<rr, bb, st>(p, s);                             \
    return;                                                     \
  }
  STRATA_TMA_PROBE_SHAPES(X)
#undef X
}

void launch_ldg_probe(const std::uint8_t* w, int N, int K, int inflight, unsigned* sink,
                      cudaStream_t s) {
  if (N % 16 != 0 || K % 512 != 0 || reinterpret_cast<std::uintptr_t>(w) % 16 != 0)
    throw InternalError("launch_ldg_probe: N=" + std::to_string(N) + " K=" + std::to_string(K));
  const unsigned blocks = static_cast<unsigned>(N / 16);
  if (inflight == 2)
    ldg_probe_kernel<2><<<blocks, 256, 0, s>>>(w, sink, K);
  else if (inflight == 4)
    ldg_probe_kernel<4><<<blocks, 256, 0, s>>>(w, sink, K);
  else if (inflight == 8)
    ldg_probe_kernel<8><<<blocks, 256, 0, s>>>(w, sink, K);
  else
    throw InternalError("launch_ldg_probe: inflight " + std::to_string(inflight));
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::testing

// The Hopper decode GEMM (cuda/gemm_decode.h; sm_90a only, built in the strata_cuda_sm90a object
// library, cuda/CMakeLists.txt): y[T, N] = x[T, K] . W[N, K]^T for T <= 256, bf16, and its FP8
// (W8A8, e4m3) variant (kF8: the same pipeline and stream-K fixup over 1-byte codes; a k-tile is
// then 128 codes in the same 128-byte swizzled rows, wgmma m64nNk32 e4m3 instead of m64nNk16
// bf16, each k-tile's products summed into a fresh fp32 accumulator and added into the running
// one on the CUDA cores, the per-token and per-channel scales applied when y is written; at TN
// 256 the tokens in two n128 halves so that one promotion accumulator serves both; not yet run on
// a GPU).
//
// Stream-K determinism (the H200's GridsAgreeAndGraphReplayEqualsEager failure of 2026-12-02):
// the failure was the test's cross-stream race (inputs filled on the legacy stream, the first
// call on a non-blocking stream: tests/gpu/gemm_decode_test.cpp says how), not this fixup; the
// fixup's publication is now formally release / acquire (the fences around thread 0's counter
// atomic below).
//
// Why this shape (docs/benchmarks.md "A decode GEMM of our own, first attempt"): an mma.sync
// kernel with 8 warps per SM each waiting on ldmatrix -> mma chains read the weights at 46 % of
// the copy ceiling. Here the loads are TMA (no thread issues a load), the ring is deep enough to
// keep >= 130 KB per SM in flight, and the tensor-core work is a few asynchronous wgmma per 32 KB
// of weights.
//
// D[n][t] = sum_k W[n][k] x[t][k] is computed as wgmma's D = A B with A = a 64-row W tile and B =
// the x tile (TN rows, TN = T rounded up to a wgmma N), both K-major in shared memory with the
// 128-byte swizzle (desc_sw128, LBO 16, SBO 1024: the layout TMA's SWIZZLE_128B writes).
//
// Block = 2 consumer warpgroups (warps 0-7) + 1 producer warpgroup (warps 8-11, only lane 0 of
// warp 8 works), 384 threads, one block per SM (the ring takes the shared memory). Tile = BM weight
// rows x all TN columns; consumer warpgroup c owns rows [c * MW * 64, (c + 1) * MW * 64) as MW m64
// sub-tiles. MW = 1 (BM = 128) but for TN 64 on wide shapes (mw_for: gate_up), where MW = 2 lets
// each staged x byte serve a 32 KB W tile, halving x's L2 reads per weight byte. Registers: 384
// threads enter with a cap of 168 and setmaxnreg moves them to the consumers (40 / 232); ptxas
// then reports no spill but at TN 256 (128 accumulators: 316 B stored, 148 B loaded per thread;
// with one producer warp, 288 threads and no setmaxnreg: 968 / 556 B, and 20 / 44 B for TN 64 with
// MW 2). TN 128 with MW 2 (128 accumulators too) spilled 1.4 KB and is not used.
// Stage = one k-tile of 64: W box [BM][64] + x box [TN][64], kStages of them (4 to 8 stages,
// 136-216 KB).
//
// Programmatic dependent launch (launch_decode_gemm*'s pdl; Gemm passes its fp8_pdl for the e4m3
// variant): the producer requests the first ring's W boxes before griddepcontrol.wait and x's
// after it; the consumers wait before anything else, so every global write (y, partials,
// counters) follows the previous grid's end. What it wins is the launch and the first ring's
// latency, paid while the previous kernel's last blocks drain (the split-K-in-block FP8 kernel
// gained 9 points of the copy ceiling from it at 1 row, docs/benchmarks.md "Tenth session").
//
// Cluster split-K (kCl; e4m3 at TN <= 64 with MW 1, when the tiles are no more than the grid and
// `split` >= 2 CTAs per tile fit the GPCs at once: launch()): grid = tiles x split, a cluster of
// `split` consecutive blocks per tile, rank r takes k-tiles [r kt / split, (r + 1) kt / split);
// ranks >= 1 store their accumulators into the leader's shared memory (mapa + st.shared::cluster)
// and arrive on its slot barrier with release; the leader sums them in rank order and writes y.
// It replaces stream-K's fixup (global partials, fences, counter atomic, a second round trip for
// the pieces) where the twelfth session's Nsight Compute run put 3-6 us per N = 4096 GEMM.
//
// Work: units = tiles x k-tiles in tile-major order, block b takes [b U / G, (b + 1) U / G)
// (stream-K). The producer and the consumers walk the same list; a tile's segment inside one
// block ends in an epilogue: the whole k range -> y written from the accumulators; a part -> the
// fp32 partial to slot 2b (the block's first segment) or 2b + 1 (its last), then thread 0 adds 1
// to the tile's counter; the block that sees the count of pieces reads every piece in block order
// (its own from registers), writes y and sets the counter back to 0.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/gemm_decode.h"
#include "cuda/hopper_sm90.cuh"

namespace strata::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace sm90;

constexpr int kConsumers = 2;                       // consumer warpgroups
constexpr int kConsumerThreads = kConsumers * 128;  // 256
constexpr int kThreads = kConsumerThreads + 128;    // + the producer warpgroup
constexpr std::uint32_t kRowBytes = 128;    // one k-tile of a row: 64 bf16 or 128 e4m3 elements
constexpr std::uint32_t kSmemMax = 232448;  // 227 KB per block on sm_90
constexpr int kMaxStages = 8;
constexpr int kPartialFloatsPerSlot = 128 * 256;  // BM * TN <= 32768 for every TN

// Elements per k-tile (one 128-byte swizzled row) and per wgmma k step (32 bytes either way).
template <bool kF8>
constexpr int kBK = kF8 ? 128 : 64;

// Cluster split-K (kCl): at most this many CTAs share one tile's k range.
constexpr int kMaxSplit = 4;

template <int TN, int kMW, bool kF8 = false, bool kCl = false>
struct Cfg {
  static constexpr int MW = kMW;                   // m64 sub-tiles per consumer warpgroup
  static constexpr int BM = 64 * MW * kConsumers;  // weight rows per tile
  // e4m3 at TN 256: the tokens in NS = 2 halves of TW = 128 columns (one wgmma n128 each), so
  // that one promotion accumulator of TW / 2 registers serves both (see the consumer loop).
  static constexpr int NS = kF8 && TN == 256 ? 2 : 1;
  static constexpr int TW = TN / NS;
  static constexpr int kAcc = TW / 2;   // fp32 accumulators per (sub-tile, half) per thread
  static constexpr int kSub = MW * NS;  // accumulator sets: j = m * NS + h
  // e4m3 with registers for two promotion accumulators (TN <= 64, one sub-tile): k-tile j's
  // group runs while k-tile j - 1's is added (wait_group 1), as the bf16 loop overlaps stages.
  static constexpr bool kOverlap = kF8 && NS == 1 && MW == 1 && TN <= 64;
  static constexpr std::uint32_t kW = BM * kRowBytes;
  static constexpr std::uint32_t kX = TN * kRowBytes;
  static constexpr std::uint32_t kStage = kW + kX;
  // kCl: the leader CTA's landing slots for the other CTAs' accumulators, one per rank 1..S-1,
  // each BM x TN fp32 in the partials' [reg / 4][consumer thread][4] order.
  static constexpr std::uint32_t kSlot = BM * TN * 4;
  static constexpr std::uint32_t kRed = kCl ? (kMaxSplit - 1) * kSlot : 0;
  static constexpr int kStages = std::min<int>(kMaxStages, (kSmemMax - 1024 - 256 - kRed) / kStage);
  static constexpr std::uint32_t kRedOff = kStages * kStage;
  static constexpr std::uint32_t kBar = kRedOff + kRed;  // full[kStages], empty[kStages]
  static constexpr std::uint32_t kFlag = kBar + 2 * kStages * 8;
  static constexpr std::uint32_t kRedBar = kFlag + 8;         // kCl: the slots' mbarrier
  static constexpr std::uint32_t kAlloc = kFlag + 16 + 1024;  // slack to align the base
  static_assert(!kCl || (MW == 1 && NS == 1 && kStages >= 4), "cluster split: TN <= 64, MW 1");
  static_assert(kAlloc <= kSmemMax);
  static_assert(kW % 1024 == 0 && kX % 1024 == 0, "1024-aligned swizzle atoms");
  static_assert(BM * TN <= kPartialFloatsPerSlot);
  static_assert((kSub * kAcc) % 4 == 0, "partials move as float4");
  static_assert(MW == 1 || TN <= 128, "at most 128 accumulators per thread");
};

struct DecodeParams {
  CUtensorMap w_map;   // W [N][K] bf16 / e4m3, boxes of BM rows x 128 bytes
  CUtensorMap x_map;   // x [T][K] bf16 / e4m3, boxes of TN rows x 128 bytes
  void* y;             // [T][N] bf16 or fp32 (e4m3: bf16)
  const float* xs;     // e4m3 only: per-token scales [T]
  const float* ws;     // e4m3 only: per-channel scales [N]
  float* partial;      // [2 * grid][BM * TN]
  unsigned* counters;  // [tiles]
  int T, N, K;
  int tiles, kt;    // output tiles (of BM rows), k-tiles (of kBK elements)
  long long units;  // tiles * kt
  int grid;
  int f32out;
  int split;  // kCl: CTAs per tile (the cluster size, 2..kMaxSplit); grid = tiles * split
};

__device__ __forceinline__ long long unit_begin(long long b, const DecodeParams& p) {
  return b * p.units / p.grid;
}
// The block whose range holds unit u: the largest b with floor(b U / G) <= u.
__device__ __forceinline__ int block_of(long long u, const DecodeParams& p) {
  return static_cast<int>(((u + 1) * p.grid - 1) / p.units);
}

// e4m3: y = bf16(acc * xs[t] * ws[n]), the multiplications in the order of the other FP8 paths
// (cuda/gemm_fp8.cu) and the CPU oracle, on the fp32 sum of the whole K range.
template <bool kF8>
__device__ __forceinline__ void store_y(const DecodeParams& p, int n, int t, float v) {
  if (n >= p.N || t >= p.T) return;
  const long long i = static_cast<long long>(t) * p.N + n;
  if constexpr (kF8)
    static_cast<bf16*>(p.y)[i] = __float2bfloat16_rn(v * __ldg(p.xs + t) * __ldg(p.ws + n));
  else if (p.f32out)
    static_cast<float*>(p.y)[i] = v;
  else
    static_cast<bf16*>(p.y)[i] = __float2bfloat16_rn(v);
}

template <int TN, int MW, bool kF8, bool kCl = false>
__global__ void __launch_bounds__(kThreads, 1)
    decode_gemm_kernel(const __grid_constant__ DecodeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using C = Cfg<TN, MW, kF8, kCl>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t raw = smem_u32(smem_raw);
  const std::uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const base_ptr = smem_raw + (base - raw);
  const auto full = [&](int s) { return base + C::kBar + 8u * static_cast<std::uint32_t>(s); };
  const auto empty = [&](int s) {
    return base + C::kBar + 8u * static_cast<std::uint32_t>(C::kStages + s);
  };
  volatile int* const flag = reinterpret_cast<volatile int*>(base_ptr + C::kFlag);

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  // kCl: this CTA's rank in its cluster = its part of the tile's k range (clusters are
  // consecutive blockIdx.x); rank 0 sums the others' accumulators.
  const int rank = kCl ? static_cast<int>(blockIdx.x) % p.split : 0;
  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), kConsumerThreads / 32);  // one arrival per consumer warp
    }
    if (kCl && rank == 0) mbar_init(base + C::kRedBar, (p.split - 1) * (kConsumerThreads / 32));
    fence_mbarrier_init();
  }
  __syncthreads();
  // kCl: every thread arrives here once (the leader's slot barrier initialised before any other
  // CTA's arrival on it: the other ranks' consumers wait for this before writing to the leader).
  if constexpr (kCl) cluster_arrive();

  long long u_begin, u_end;
  if constexpr (kCl) {
    const long long t0 = static_cast<long long>(blockIdx.x / p.split) * p.kt;
    u_begin = t0 + static_cast<long long>(rank) * p.kt / p.split;
    u_end = t0 + static_cast<long long>(rank + 1) * p.kt / p.split;
  } else {
    u_begin = unit_begin(blockIdx.x, p), u_end = unit_begin(blockIdx.x + 1LL, p);
  }

  if (warp >= kConsumers * 4) {  // ---- producer warpgroup: lane 0 of its first warp copies ----
    setmaxnreg_dec<40>();
    if (tid != kConsumerThreads) return;
    // Programmatic dependent launch (launched with it when DecodeParams::pdl is set; without
    // it griddepcontrol.wait returns at once): the first ring's W boxes are issued before the
    // wait - W is never written by a kernel - and x, which the previous kernel may still be
    // writing, after it.
    const long long first = std::min<long long>(u_end - u_begin, C::kStages);
    for (long long i = 0; i < first; ++i) {
      const long long u = u_begin + i;
      const int tile = static_cast<int>(u / p.kt), k0 = static_cast<int>(u % p.kt) * kBK<kF8>;
      mbar_arrive_expect_tx(full(static_cast<int>(i)), C::kStage);
      tma_load_2d(base + static_cast<std::uint32_t>(i) * C::kStage, &p.w_map, k0, tile * C::BM,
                  full(static_cast<int>(i)));
    }
    griddep_wait();
    griddep_launch_dependents();
    for (long long i = 0; i < first; ++i) {
      const int k0 = static_cast<int>((u_begin + i) % p.kt) * kBK<kF8>;
      tma_load_2d(base + static_cast<std::uint32_t>(i) * C::kStage + C::kW, &p.x_map, k0, 0,
                  full(static_cast<int>(i)));
    }
    int stage = static_cast<int>(first % C::kStages);
    std::uint32_t round = first == C::kStages ? 1u : 0u;
    for (long long u = u_begin + first; u < u_end; ++u) {
      const int tile = static_cast<int>(u / p.kt), k0 = static_cast<int>(u % p.kt) * kBK<kF8>;
      if (round > 0) mbar_wait_or_trap(empty(stage), (round - 1) & 1);
      mbar_arrive_expect_tx(full(stage), C::kStage);
      const std::uint32_t dst = base + static_cast<std::uint32_t>(stage) * C::kStage;
      tma_load_2d(dst, &p.w_map, k0, tile * C::BM, full(stage));
      tma_load_2d(dst + C::kW, &p.x_map, k0, 0, full(stage));
      if (++stage == C::kStages) stage = 0, ++round;
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<232>();  // 128 x 40 + 256 x 232 = 64,512 of the SM's 65,536 registers
  // Every global write below (y, the partials, the counters: the previous kernel may be another
  // decode GEMM on the same workspace) comes after the previous grid has completed.
  griddep_wait();
  griddep_launch_dependents();
  const int wg = warp / 4, wq = warp % 4, lane = tid % 32, g = lane / 4, c4 = lane % 4;
  // A stage goes back to the producer once every consumer warp has waited for the wgmma groups
  // that read it (wgmma.wait_group is warp-collective, and wgmma reads shared memory through the
  // async proxy only: no thread's own loads touch a stage). One arrival per warp (CUTLASS's
  // count), not per thread: the H200 timed both the same (docs/benchmarks.md "Thirteenth
  // session"), so the 256 arrivals were not what held the consumers back.
  const auto release = [&](int st) {
    if (lane == 0) mbar_arrive(empty(st));
  };
  float acc[C::kSub][C::kAcc];
#pragma unroll
  for (int j = 0; j < C::kSub; ++j)
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc[j][i] = 0.0f;

  int stage = 0;
  std::uint32_t round = 0;
  long long u = u_begin;
  while (u < u_end) {
    const int tile = static_cast<int>(u / p.kt);
    const long long seg_begin = u;
    const long long seg_end = std::min<long long>(u_end, static_cast<long long>(tile + 1) * p.kt);
    if constexpr (C::kOverlap) {
      // The promotion below (kF8) with two accumulators in turn, the loop unrolled by two so
      // that every wgmma's accumulator is fixed in the code: k-tiles 0, 2, ... go to pa, 1, 3,
      // ... to pb; after a commit, wait_group 1 means the previous k-tile's group is done, which
      // is then added into acc (the same additions in the same order as the one-accumulator
      // loop) and its stage released.
      float pa[C::kAcc], pb[C::kAcc];
#pragma unroll
      for (int i = 0; i < C::kAcc; ++i) pa[i] = pb[i] = 0.0f;  // never read (scale_d = 0)
      const auto issue = [&](float(&d)[C::kAcc]) {
        mbar_wait(full(stage), round & 1);
        const std::uint32_t sw = base + static_cast<std::uint32_t>(stage) * C::kStage +
                                 static_cast<std::uint32_t>(wg * 64) * kRowBytes;
        const std::uint32_t sx = base + static_cast<std::uint32_t>(stage) * C::kStage + C::kW;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_m64k32_ss_e4m3(d, desc_sw128(sw + 32u * kk, 16, 1024),
                               desc_sw128(sx + 32u * kk, 16, 1024), kk > 0 ? 1 : 0);
        wgmma_commit();
        const int issued = stage;
        if (++stage == C::kStages) stage = 0, ++round;
        ++u;
        return issued;
      };
      const auto add = [&](float(&d)[C::kAcc], bool first, int st) {
        fence_operands(d);
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i) acc[0][i] = first ? d[i] : acc[0][i] + d[i];
        release(st);
      };
      int st_a = issue(pa), st_b = 0;
      bool first = true;
      while (true) {
        if (u == seg_end) {
          wgmma_wait<0>();
          add(pa, first, st_a);
          break;
        }
        st_b = issue(pb);
        wgmma_wait<1>();
        add(pa, first, st_a);
        first = false;
        if (u == seg_end) {
          wgmma_wait<0>();
          add(pb, false, st_b);
          break;
        }
        st_a = issue(pa);
        wgmma_wait<1>();
        add(pb, false, st_b);
      }
    } else if constexpr (kF8) {
      // e4m3: Hopper's tensor cores keep only about 14 bits of the running sum inside an FP8
      // wgmma chain (DeepSeek-V3 report 3.3.2; cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM off
      // promotes for the same reason), so every k-tile (128 codes, 4 wgmma k32) goes to a fresh
      // fp32 accumulator `part` (scale_d = 0 on its first step) and is added into `acc` on the
      // CUDA cores: the sum over k-tiles is an fp32 sum. The group is awaited before the add
      // (wait_group 0), so the tensor cores do not overlap the next stage; the TMA ring keeps the
      // weight stream in flight meanwhile (no registers for a second `part` here: kOverlap above).
      float part[C::MW][C::kAcc];
#pragma unroll
      for (int m = 0; m < C::MW; ++m)
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i) part[m][i] = 0.0f;  // never read (scale_d = 0), defined
      for (; u < seg_end; ++u) {
        mbar_wait(full(stage), round & 1);
        const std::uint32_t sw = base + static_cast<std::uint32_t>(stage) * C::kStage +
                                 static_cast<std::uint32_t>(wg * C::MW * 64) * kRowBytes;
        const std::uint32_t sx = base + static_cast<std::uint32_t>(stage) * C::kStage + C::kW;
        // Token half h (NS = 2 at TN 256 only): B rows [h TW, (h + 1) TW) of the x tile.
#pragma unroll
        for (int h = 0; h < C::NS; ++h) {
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const std::uint64_t db = desc_sw128(
                sx + static_cast<std::uint32_t>(h * C::TW) * kRowBytes + 32u * kk, 16, 1024);
#pragma unroll
            for (int m = 0; m < C::MW; ++m) {
              const std::uint64_t da = desc_sw128(sw + 64u * kRowBytes * m + 32u * kk, 16, 1024);
              wgmma_m64k32_ss_e4m3(part[m], da, db, kk > 0 ? 1 : 0);
            }
          }
          wgmma_commit();
          wgmma_wait<0>();
#pragma unroll
          for (int m = 0; m < C::MW; ++m) fence_operands(part[m]);
#pragma unroll
          for (int m = 0; m < C::MW; ++m)
#pragma unroll
            for (int i = 0; i < C::kAcc; ++i)
              acc[m * C::NS + h][i] =
                  u == seg_begin ? part[m][i] : acc[m * C::NS + h][i] + part[m][i];
        }
        release(stage);
        if (++stage == C::kStages) stage = 0, ++round;
      }
    } else {
      int pending = -1;  // stage of the last committed wgmma group, not yet released
      for (; u < seg_end; ++u) {
        mbar_wait(full(stage), round & 1);
        const std::uint32_t sw = base + static_cast<std::uint32_t>(stage) * C::kStage +
                                 static_cast<std::uint32_t>(wg * C::MW * 64) * kRowBytes;
        const std::uint32_t sx = base + static_cast<std::uint32_t>(stage) * C::kStage + C::kW;
        wgmma_fence();
        // 4 wgmma k16 steps of 32 bytes each.
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const std::uint64_t db = desc_sw128(sx + 32u * kk, 16, 1024);
#pragma unroll
          for (int m = 0; m < C::MW; ++m) {
            const std::uint64_t da = desc_sw128(sw + 64u * kRowBytes * m + 32u * kk, 16, 1024);
            wgmma_m64k16_ss(acc[m], da, db, (u != seg_begin || kk > 0) ? 1 : 0);
          }
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous stage's group is done: hand its stage back
        if (pending >= 0) release(pending);
        pending = stage;
        if (++stage == C::kStages) stage = 0, ++round;
      }
      wgmma_wait<0>();
#pragma unroll
      for (int j = 0; j < C::kSub; ++j) fence_operands(acc[j]);
      release(pending);
    }

    // ---- epilogue of this segment ----
    // Accumulator d[i] of sub-tile m: weight row n = tile * BM + (wg * MW + m) * 64 + 16 wq + g +
    // 8 ((i >> 1) & 1), token t = 8 (i >> 2) + 2 c4 + (i & 1) (hopper_sm90.cuh's D layout).
    const int n_base = tile * C::BM + wg * C::MW * 64 + 16 * wq + g;
    const auto write_y = [&] {
#pragma unroll
      for (int j = 0; j < C::kSub; ++j)
#pragma unroll
        for (int i = 0; i < C::kAcc; ++i)
          store_y<kF8>(p, n_base + 64 * (j / C::NS) + 8 * ((i >> 1) & 1),
                       C::TW * (j % C::NS) + 8 * (i >> 2) + 2 * c4 + (i & 1), acc[j][i]);
    };
    const long long tile_u0 = static_cast<long long>(tile) * p.kt;
    if (seg_begin == tile_u0 && seg_end == tile_u0 + p.kt) {
      write_y();
      continue;
    }
    if constexpr (kCl) {
      // Cluster split: ranks 1..S-1 store their accumulators into the leader's slot rank - 1
      // (distributed shared memory, the partials' layout), each thread fences at cluster scope,
      // and one lane per warp arrives on the leader's slot barrier with release; the leader waits
      // (acquire), sums its own accumulators and the slots in rank order, and writes y. No
      // global partials, counters or atomics; the order is fixed, so the bits are.
      constexpr int kV = C::kSub * C::kAcc / 4;  // float4 per thread
      if (rank != 0) {
        cluster_wait();
        const std::uint32_t dst =
            mapa_shared(base + C::kRedOff + static_cast<std::uint32_t>(rank - 1) * C::kSlot, 0);
#pragma unroll
        for (int j = 0; j < C::kSub; ++j)
#pragma unroll
          for (int i = 0; i < C::kAcc; i += 4) {
            const int v = (j * C::kAcc + i) / 4;
            st_cluster_v4(dst + static_cast<std::uint32_t>(v * kConsumerThreads + tid) * 16u,
                          make_float4(acc[j][i], acc[j][i + 1], acc[j][i + 2], acc[j][i + 3]));
          }
        fence_acq_rel_cluster();
        __syncwarp();
        if (lane == 0) mbar_arrive_remote(mapa_shared(base + C::kRedBar, 0));
        continue;
      }
      static_assert(kV >= 1);
      mbar_wait_cluster(base + C::kRedBar, 0);
      const float4* const slots = reinterpret_cast<const float4*>(base_ptr + C::kRedOff);
      for (int r = 1; r < p.split; ++r) {
        const float4* src = slots + static_cast<std::size_t>(r - 1) * (C::kSlot / 16);
#pragma unroll
        for (int j = 0; j < C::kSub; ++j)
#pragma unroll
          for (int i = 0; i < C::kAcc; i += 4) {
            const float4 v = src[((j * C::kAcc + i) / 4) * kConsumerThreads + tid];
            acc[j][i] += v.x, acc[j][i + 1] += v.y, acc[j][i + 2] += v.z, acc[j][i + 3] += v.w;
          }
      }
      write_y();
      continue;
    }
    // Partial: slot 2b (first segment of the block) or 2b + 1 (its last), float4 per thread in
    // [reg / 4][consumer thread][4] order (coalesced; every piece has the same layout).
    const int b = static_cast<int>(blockIdx.x);
    const auto slot_of = [&](int blk) { return 2 * blk + (unit_begin(blk, p) >= tile_u0 ? 0 : 1); };
    const auto piece = [&](int blk) {
      return reinterpret_cast<float4*>(p.partial + static_cast<long long>(slot_of(blk)) *
                                                       kPartialFloatsPerSlot);
    };
    {
      float4* dst = piece(b);
#pragma unroll
      for (int j = 0; j < C::kSub; ++j)
#pragma unroll
        for (int i = 0; i < C::kAcc; i += 4)
          dst[((j * C::kAcc + i) / 4) * kConsumerThreads + tid] =
              make_float4(acc[j][i], acc[j][i + 1], acc[j][i + 2], acc[j][i + 3]);
    }
    // Publication (PTX memory model): each thread's partial stores, its fence.gpu, the CTA
    // barrier, then thread 0's fence.gpu + counter atomic: a release pattern whose
    // cumulativity covers every consumer thread's stores (they precede thread 0's fence in
    // causality order through the barrier). The per-thread fence alone (the CUDA sample's
    // threadFenceReduction idiom, all that stood here before) relies on the barrier being
    // cumulative at gpu scope, which the model does not promise; the second fence costs one
    // instruction per split segment.
    __threadfence();
    named_bar_sync(1, kConsumerThreads);
    const int b_first = block_of(tile_u0, p), b_last = block_of(tile_u0 + p.kt - 1, p);
    if (tid == 0) {
      __threadfence();
      const unsigned done = atomicAdd(&p.counters[tile], 1u);
      const int last = done == static_cast<unsigned>(b_last - b_first) ? 1 : 0;
      // Acquire: the fence after the atomic that observed every other piece's release orders
      // the reads below (other threads: through the barrier that follows) after those stores.
      if (last) __threadfence(), p.counters[tile] = 0;  // nobody else touches it this launch
      *flag = last;
    }
    named_bar_sync(1, kConsumerThreads);
    const int last = *flag;
    named_bar_sync(1, kConsumerThreads);  // flag read before the next segment may rewrite it
    if (!last) continue;
    __threadfence();
    // Every piece from memory (this block's too: one order whichever block finishes), summed in
    // block order into the accumulators: ((p_first + p_first+1) + ...) + p_last.
    for (int blk = b_first; blk <= b_last; ++blk) {
      const float4* src = piece(blk);
#pragma unroll
      for (int j = 0; j < C::kSub; ++j)
#pragma unroll
        for (int i = 0; i < C::kAcc; i += 4) {
          const float4 v = __ldcg(src + ((j * C::kAcc + i) / 4) * kConsumerThreads + tid);
          if (blk == b_first)
            acc[j][i] = v.x, acc[j][i + 1] = v.y, acc[j][i + 2] = v.z, acc[j][i + 3] = v.w;
          else
            acc[j][i] += v.x, acc[j][i + 1] += v.y, acc[j][i + 2] += v.z, acc[j][i + 3] += v.w;
        }
    }
    write_y();
  }
#else
  __trap();  // built for sm_90a only (cuda/CMakeLists.txt)
#endif
}

// ---- host ---------------------------------------------------------------------------------

int tn_for(int T) {
  for (int tn : {8, 16, 32, 64, 128, 256})
    if (T <= tn) return tn;
  return 0;
}
// Two m64 sub-tiles per warpgroup (BM = 256) halve x's L2 reads per weight byte, but a split
// tile's finisher reads (pieces - 1) x BM x TN x 4 bytes alone, ~ grid BM^2 TN 4 / N: so BM = 256
// only where the x reads matter (TN 64; TN 128 with MW 2 spilled) and the tiles alone nearly fill
// the grid (gate_up).
int mw_for(int tn, int N, int grid) {
  return tn == 64 && 2 * ((N + 255) / 256) >= grid ? 2 : 1;
}

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

bool device_is_cc90(int device) {
  static std::mutex mu;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return known[device] = major == 9 && minor == 0;
}

int device_sms(int device) {
  static std::mutex mu;
  static std::map<int, int> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return known[device] = n;
}

// W's map depends only on (device, pointer, element size, N, K, box rows): weights keep their
// addresses, so it is encoded once. A pointer reused for another matrix of the same shape gets the
// same map.
CUtensorMap weight_map(int device, const void* w, bool f8, int N, int K, int bm) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, bool, int, int, int>, CUtensorMap> cache;
  const auto key = std::make_tuple(device, w, f8, N, K, bm);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  CUtensorMap m;
  const CUresult r = encode_tensor_map_2d(
      &m, f8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, w, K, N,
      (f8 ? 1ull : 2ull) * K, f8 ? kBK<true> : kBK<false>, static_cast<std::uint32_t>(bm));
  if (r != CUDA_SUCCESS)
    throw InternalError("decode GEMM: cuTensorMapEncodeTiled (W) failed (" +
                        std::to_string(static_cast<int>(r)) + ")");
  if (cache.size() >= 4096) cache.clear();  // tests allocate and free many matrices
  return cache[key] = m;
}

// The kernel's dynamic shared memory attribute, set once per device.
template <int TN, int MW, bool kF8, bool kCl>
void prepare(int device) {
  using C = Cfg<TN, MW, kF8, kCl>;
  static std::mutex mu;
  static std::vector<int> ready;  // devices whose attribute is set
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(ready.begin(), ready.end(), device) == ready.end()) {
    CUDA_CHECK(cudaFuncSetAttribute(decode_gemm_kernel<TN, MW, kF8, kCl>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(C::kAlloc)));
    ready.push_back(device);
  }
}

template <int TN, int MW, bool kF8, bool kCl = false>
void launch_tn(const DecodeParams& p, int device, bool pdl, cudaStream_t s) {
  using C = Cfg<TN, MW, kF8, kCl>;
  prepare<TN, MW, kF8, kCl>(device);
  launch_kernel(decode_gemm_kernel<TN, MW, kF8, kCl>, dim3(static_cast<unsigned>(p.grid)),
                dim3(kThreads), C::kAlloc, s, pdl, kCl ? static_cast<unsigned>(p.split) : 1u, p);
}

// How many clusters of `split` CTAs of the e4m3 cluster kernel at TN can be resident at once
// (cudaOccupancyMaxActiveClusters: one CTA per SM, the GPCs' SM counts decide), per device.
template <int TN>
int max_clusters(int device, int split) {
  using C = Cfg<TN, 1, true, true>;
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> known;
  prepare<TN, 1, true, true>(device);
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(device, split);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(split));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = C::kAlloc;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim = {static_cast<unsigned>(split), 1, 1};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, decode_gemm_kernel<TN, 1, true, true>, &cfg));
  return known[key] = n;
}

// Whether `clusters` clusters of `split` CTAs fit the device at once (else the launch would run
// in waves and lose to stream-K).
bool cluster_fits(int device, int tn, int split, int clusters) {
  const int n = tn == 8    ? max_clusters<8>(device, split)
                : tn == 16 ? max_clusters<16>(device, split)
                : tn == 32 ? max_clusters<32>(device, split)
                           : max_clusters<64>(device, split);
  return clusters <= n;
}

void launch_cluster(const DecodeParams& p, int tn, int device, bool pdl, cudaStream_t s) {
  if (tn == 8)
    launch_tn<8, 1, true, true>(p, device, pdl, s);
  else if (tn == 16)
    launch_tn<16, 1, true, true>(p, device, pdl, s);
  else if (tn == 32)
    launch_tn<32, 1, true, true>(p, device, pdl, s);
  else
    launch_tn<64, 1, true, true>(p, device, pdl, s);
}

template <bool kF8>
void launch_any(const DecodeParams& p, int tn, int mw, int device, bool pdl, cudaStream_t s) {
  if (mw == 2)
    launch_tn<64, 2, kF8>(p, device, pdl, s);
  else if (tn == 8)
    launch_tn<8, 1, kF8>(p, device, pdl, s);
  else if (tn == 16)
    launch_tn<16, 1, kF8>(p, device, pdl, s);
  else if (tn == 32)
    launch_tn<32, 1, kF8>(p, device, pdl, s);
  else if (tn == 64)
    launch_tn<64, 1, kF8>(p, device, pdl, s);
  else if (tn == 128)
    launch_tn<128, 1, kF8>(p, device, pdl, s);
  else
    launch_tn<256, 1, kF8>(p, device, pdl, s);
}

bool applies(bool f8, const void* x, const void* w, int T, int N, int K, std::string* why) {
  const auto fail = [&](const char* m) {
    if (why) *why = m;
    return false;
  };
  const int bk = f8 ? kBK<true> : kBK<false>;
  if (T < 1 || T > kDecodeGemmMaxRows) return fail("rows outside 1..256");
  if (N < 1 || K < bk || K % bk != 0)
    return fail(f8 ? "K is not a positive multiple of 128" : "K is not a positive multiple of 64");
  if ((reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(w)) % 16 != 0)
    return fail("x or w is not 16-byte aligned (TMA)");
  if ((N + 127) / 128 > kDecodeGemmMaxTiles) return fail("more output tiles than the counters");
  if (!device_is_cc90(current_device()))
    return fail("the device is not compute capability 9.0 (the kernel is sm_90a code)");
  if (!tensor_map_encoder()) return fail("cuTensorMapEncodeTiled not available from the driver");
  return true;
}

// The host side of both element types: maps, split, checks of the workspace.
void launch(bool f8, const void* x, const void* w, const float* xs, const float* ws, void* y,
            bool f32out, int T, int N, int K, const DecodeGemmWorkspace& wsp, int grid, bool pdl,
            cudaStream_t s) {
  std::string why;
  if (!applies(f8, x, w, T, N, K, &why))
    throw InternalError(std::string(f8 ? "launch_decode_gemm_fp8: " : "launch_decode_gemm: ") +
                        why);
  const int device = current_device();
  if (grid <= 0) grid = device_sms(device);
  const int tn = tn_for(T), mw = mw_for(tn, N, grid), bm = 64 * mw * kConsumers;
  const int bk = f8 ? kBK<true> : kBK<false>;
  DecodeParams p{};
  p.kt = K / bk;
  p.tiles = (N + bm - 1) / bm;
  p.units = static_cast<long long>(p.tiles) * p.kt;
  p.grid = static_cast<int>(std::min<long long>(grid, p.units));
  // Every block may write two partial slots: a workspace sized for fewer blocks would be
  // overrun (grid > the SMs the caller sized it for).
  if (wsp.partial_floats != 0 && decode_gemm_partial_floats(p.grid) > wsp.partial_floats)
    throw InternalError("decode GEMM: grid " + std::to_string(p.grid) +
                        " needs more partial slots than the workspace holds");
  p.w_map = weight_map(device, w, f8, N, K, bm);
  const CUresult r = encode_tensor_map_2d(
      &p.x_map, f8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, x, K, T,
      (f8 ? 1ull : 2ull) * K, bk, static_cast<std::uint32_t>(tn));
  if (r != CUDA_SUCCESS)
    throw InternalError("decode GEMM: cuTensorMapEncodeTiled (x) failed (" +
                        std::to_string(static_cast<int>(r)) + ")");
  p.y = y, p.xs = xs, p.ws = ws, p.partial = wsp.partial, p.counters = wsp.counters;
  p.T = T, p.N = N, p.K = K;
  p.f32out = f32out ? 1 : 0;
  // The split (docs/cuda-backend.md "The decode GEMM's split"): with no more tiles than
  // blocks, e4m3 at TN <= 64 (MW 1) gives each tile `split` CTAs of one cluster and reduces in
  // distributed shared memory; a grid (nearly) covered by its tiles takes one block per tile
  // and no partials; everything else is stream-K over the grid. STRATA_DECODE_GEMM_SPLIT=streamk
  // keeps stream-K everywhere (the A/B of the benchmark).
  static const bool streamk_only = [] {
    const char* e = std::getenv("STRATA_DECODE_GEMM_SPLIT");
    return e != nullptr && std::string(e) == "streamk";
  }();
  if (!streamk_only && p.tiles <= p.grid) {
    int split = std::min({kMaxSplit, p.grid / p.tiles, p.kt});
    if (!f8 || mw != 1 || tn > 64) split = 1;
    if (split >= 2 && cluster_fits(device, tn, split, p.tiles)) {
      p.split = split;
      p.grid = p.tiles * split;
      launch_cluster(p, tn, device, pdl, s);
      return;
    }
    if (4 * p.tiles >= 3 * p.grid) p.grid = p.tiles;
  }
  if (f8)
    launch_any<true>(p, tn, mw, device, pdl, s);
  else
    launch_any<false>(p, tn, mw, device, pdl, s);
}

}  // namespace

std::size_t decode_gemm_partial_floats(int grid) {
  return 2ull * static_cast<std::size_t>(std::max(grid, 1)) * kPartialFloatsPerSlot;
}

bool decode_gemm_applies(const void* x, const void* w, int T, int N, int K, std::string* why) {
  return applies(false, x, w, T, N, K, why);
}

bool decode_gemm_fp8_applies(const void* x, const void* w, int T, int N, int K, std::string* why) {
  return applies(true, x, w, T, N, K, why);
}

void launch_decode_gemm(const bf16* x, const bf16* w, void* y, bool f32out, int T, int N, int K,
                        const DecodeGemmWorkspace& ws, int grid, cudaStream_t s, bool pdl) {
  launch(false, x, w, nullptr, nullptr, y, f32out, T, N, K, ws, grid, pdl, s);
}

void launch_decode_gemm_fp8(const std::uint8_t* x, const float* xs, const std::uint8_t* w,
                            const float* ws, bf16* y, int T, int N, int K,
                            const DecodeGemmWorkspace& wsp, int grid, cudaStream_t s, bool pdl) {
  if (xs == nullptr || ws == nullptr) throw InternalError("launch_decode_gemm_fp8: missing scales");
  launch(true, x, w, xs, ws, y, false, T, N, K, wsp, grid, pdl, s);
}

}  // namespace strata::cuda

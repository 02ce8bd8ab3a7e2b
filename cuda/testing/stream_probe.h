// Weight-streaming probes (gpu_bench stream-probe; issue 20 item 2, issue 18): how fast a
// [N][K]-byte weight matrix can be read once by the access patterns Strata's small-row GEMMs use,
// with no arithmetic, so that a GEMM's shortfall from the copy ceiling can be split into what the
// pattern costs and what the GEMM adds (its tensor-core work, its fixup, its launch).
//   TMA: a persistent grid, one producer thread per block filling a ring of `stages` stages by
//        cp.async.bulk.tensor (boxes of box_rows rows x 128 bytes, 128-byte swizzle: the decode
//        GEMM's W boxes, cuda/gemm_decode.cu); a stage is `boxes` boxes at adjacent k, so a row
//        gets boxes x 128 contiguous bytes per stage. One consumer warp releases each stage after
//        reading a word of it. Work is (row tile, k step) units split evenly over the blocks in
//        tile-major order (the decode GEMM's stream-K order).
//   LDG: the split-K-in-block FP8 kernel's loads (cuda/gemm_fp8.cu, kWarpK): 16 rows per block
//        of 256 threads, warp w a contiguous eighth of K, lane (g, t) 16 bytes at 16 t of each
//        64-byte chunk of rows g and g + 8 (ld.global.nc.L1::no_allocate), `inflight` chunks per
//        lane issued before the first is used.
// Each block writes one word of checksum to sink[block] (the loads cannot be dropped). Device
// code for sm_90 (TMA); no allocation; capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace strata::cuda::testing {

struct TmaProbeShape {
  int box_rows = 128;  // 64, 128 or 256
  int boxes = 1;       // 1, 2 or 4 boxes of 128 bytes per row per stage
  int stages = 8;
};
// Whether `shape` is one of the instantiated ones; the name says which ("tma r128 b1 s8").
bool tma_probe_supported(const TmaProbeShape& shape);
std::string tma_probe_name(const TmaProbeShape& shape);
// Blocks per SM the shape's shared memory allows (1 or 2).
int tma_probe_blocks_per_sm(const TmaProbeShape& shape);
// N % box_rows == 0, K % (128 * boxes) == 0, w 16-byte aligned. grid <= 0: blocks_per_sm x SMs.
void launch_tma_probe(const std::uint8_t* w, int N, int K, const TmaProbeShape& shape, int grid,
                      unsigned* sink, cudaStream_t s);
// N % 16 == 0, K % 512 == 0; inflight 2, 4 or 8.
void launch_ldg_probe(const std::uint8_t* w, int N, int K, int inflight, unsigned* sink,
                      cudaStream_t s);

}  // namespace strata::cuda::testing

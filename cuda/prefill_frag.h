// Lane -> element index mapping of the FA2 prefill kernel (cuda/attention_prefill_fa2.cu)
// for mma.sync.aligned.m16n8k16 (bf16 in, fp32 accumulate) and ldmatrix.x4. One place, plain
// constexpr functions usable on host and device, so that tests/cuda/prefill_frag_test.cpp
// can emulate a warp's tile computation on the CPU with exactly the kernel's indexing.
//
// PTX facts used (ISA "Matrix fragments for mma.m16n8k16"), g = lane / 4, c = lane % 4:
//   A (16x16, row major), 4 x .b32 regs of 2 bf16 (low half = lower column):
//     reg0 = (g, 2c..2c+1), reg1 = (g+8, 2c..), reg2 = (g, 2c+8..), reg3 = (g+8, 2c+8..)
//   B (16x8, "col"), 2 regs: reg0 = (k 2c..2c+1, n g), reg1 = (k 2c+8.., n g)
//   C/D (16x8 fp32), 4 floats: i -> (g + 8*(i/2), 2c + i%2)
//   ldmatrix.x4: lanes 8m..8m+7 give the row addresses of 8x8 matrix m; reg m of lane t is
//     (row t/4, cols 2(t%4)..+1) of matrix m, or with .trans (rows 2(t%4)..+1, col t/4).
#pragma once

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

namespace strata::cuda::frag {

// ldmatrix.x4 for an A operand (16x16 block of a row-major [row][k] array): matrices
// (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) -> reg0..3.
// The same addresses with .trans load V ([key][d], keys = the k dimension) as B operands of
// two n-tiles: regs (0,1) = d 0-7 (keys 0-7, 8-15), regs (2,3) = d 8-15.
STRATA_HD constexpr int a_row(int lane) {
  return (lane & 7) + ((lane >> 3) & 1) * 8;
}
STRATA_HD constexpr int a_col(int lane) {
  return (lane >> 4) * 8;
}

// ldmatrix.x4 (no .trans) of K ([key][d], the B operand of S = Q K^T, n = key, k = d) for
// two n-tiles: matrices (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7),
// (keys 8-15, d 8-15): regs (0,1) = B of keys 0-7, regs (2,3) = B of keys 8-15.
STRATA_HD constexpr int b_row(int lane) {
  return (lane & 7) + (lane >> 4) * 8;
}
STRATA_HD constexpr int b_col(int lane) {
  return ((lane >> 3) & 1) * 8;
}

// Accumulator element i (0..3) of a lane: row and column inside the 16x8 tile.
STRATA_HD constexpr int c_row(int lane, int i) {
  return (lane >> 2) + (i >> 1) * 8;
}
STRATA_HD constexpr int c_col(int lane, int i) {
  return (lane & 3) * 2 + (i & 1);
}

// P (the S accumulators, as bf16) reused as the A operand of O += P V for the 16 keys
// 16*kk..16*kk+15: A reg r packs S n-tile 2*kk + p_ntile(r), elements p_elem(r), p_elem(r)+1.
STRATA_HD constexpr int p_ntile(int r) {
  return r >> 1;
}
STRATA_HD constexpr int p_elem(int r) {
  return (r & 1) * 2;
}

}  // namespace strata::cuda::frag

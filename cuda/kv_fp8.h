// The FP8 KV cache's write kernel (cache.kv_dtype fp8, docs/kv-fp8.md): RoPE on q and k of the
// fused qkv rows exactly as launch_rope_kv_write (kernels.h; same rotation, q and k rotated in
// place in bf16), then K and V of every token written into its page as e4m3 codes with its KV
// head's fixed scales: code = e4m3(x / s) of the bf16 value (IEEE division, round to nearest even,
// saturating: the CPU's kv_quantize of the same value). Plain C++ header.
//
// Kept apart from kernels.cu while that file's vectorized RoPE work is in flight; the rotation is
// the scalar rope_kv_kernel's, and gpu_kv_fp8_test checks that both give the same q/k bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace strata::cuda {

// p as for launch_rope_kv_write (p.kv_pool and p.vec unused); pool8: page p at
// pool8 + p * p.page_elems (1 byte per element); scales: this layer's [kv_heads][2] (K, V).
void launch_rope_kv_write_fp8(const RopeKvParams& p, std::uint8_t* pool8, const float* scales,
                              cudaStream_t s);

// The staging of an FP8 prefill for the Hopper attention kernels (attention.h, fp8_stage):
// for each sequence s < num_seqs with nq[s] > 0, the pages of its slots 0 .. q_pos0[s] + nq[s] - 1
// (block_table row s) are dequantized into consecutive bf16 pages of out_pool: sequence s gets
// out pages base(s) .. base(s) + n(s) - 1 with base(s) the sum of n over the earlier sequences
// (in row order), and out_table[s * out_stride + j] = base(s) + j. Every value is
// bf16(e4m3_to_float(code) * scale) of its KV head (exact when the scale is a power of two, as
// calibrated scales are; a checkpoint's scale adds one bf16 rounding of each product); slots at
// or past a sequence's length are written as zeros. max_pages: the largest n(s) (the grid).
struct KvDequantParams {
  const std::uint8_t* pool8;
  const float* scales;  // this layer's [kv_heads][2] (K, V)
  long long page_elems;
  const int* block_table;
  int table_stride;
  const int* nq;
  const int* q_pos0;
  int num_seqs;
  int max_pages;
  int kv_heads;
  int head_dim;
  __nv_bfloat16* out_pool;
  int* out_table;
  int out_stride;
};
void launch_kv_dequant_pages(const KvDequantParams& p, cudaStream_t s);

}  // namespace strata::cuda

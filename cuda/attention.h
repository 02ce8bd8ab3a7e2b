// Attention kernels over the paged KV cache (runtime/kv_layout.h, bf16): FlashAttention-2
// style prefill on tensor cores (two kernels, chosen at run time: see PrefillKernel) and split-KV
// decode with a merge kernel. LSE contract: natural log, fp32, [tokens, q_heads] (prefill) /
// [batch, q_heads] (decode):
//   lse[q,h] = log sum_j exp(scale * q_h . k_j)   over the keys q attends to.
// Plain C++ header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sparse/sparse_meta.h"

namespace strata::cuda {

// Prefill / chunked prefill: sequence s has nq[s] query tokens at rows row_start[s].. of q
// and positions q_pos0[s] .. q_pos0[s]+nq[s]-1; its keys are slots 0 .. q_pos0[s]+nq[s]-1
// of its pages (the chunk's own K/V already written there, prior context before it);
// causal: query at position p sees keys 0..p. The grid walks `num_tiles` tiles of 64 query
// rows, tile i = (tile_seq[i], tile_q0[i]) with tile_q0 the first query index in the seq.
struct PrefillAttentionParams {
  const __nv_bfloat16* q;  // [T, q_stride], head h at q + row*q_stride + h*head_dim
  int q_stride;
  const __nv_bfloat16* kv_pool;  // pages of page_elems elements
  long long page_elems;
  const int* block_table;  // [num_seqs, table_stride]
  int table_stride;
  const int* row_start;  // [num_seqs]
  const int* nq;         // [num_seqs]
  const int* q_pos0;     // [num_seqs]
  const int* tile_seq;   // [num_tiles]
  const int* tile_q0;    // [num_tiles]
  int num_tiles;
  __nv_bfloat16* out;  // [T, out_stride], head h at out + row*out_stride + h*head_dim
  int out_stride;
  float* lse;  // [T, heads] or nullptr
  int heads;
  int kv_heads;
  int head_dim;  // 64 or 128 (dispatch.h)
  float scale;
  // An FP8 KV cache (docs/kv-fp8.md): the pages are e4m3 codes here (kv_pool unused) and
  // kv_scales holds this layer's [kv_heads][2] (K, V) scales. The FA2 kernel reads e4m3 tiles
  // itself; the Hopper kernels read bf16 pages through a tensor map, so for them the K/V slots
  // this launch reads are first dequantized into a bf16 staging pool (fp8_stage below,
  // launch_kv_dequant_pages in cuda/kv_fp8.h) and the Hopper kernel runs over its pages. Without
  // a stage, or when the step's context does not fit it, every PrefillKernel runs FA2 on the codes.
  const std::uint8_t* kv_pool8 = nullptr;
  const float* kv_scales = nullptr;
  struct Fp8Stage {
    __nv_bfloat16* pool = nullptr;  // `pages` bf16 pages of page_elems
    long long pages = 0;
    int* table = nullptr;  // [num_seqs, stride] written by the dequantization
    int stride = 0;
    // Host-side counts of this launch: sequences (rows of block_table, nq, q_pos0), and over
    // those with nq > 0 the pages of slots 0 .. q_pos0 + nq - 1 (summed, and the largest).
    int num_seqs = 0;
    long long ctx_pages = 0;
    int ctx_max_pages = 0;
    bool fits() const {
      return pool && table && num_seqs > 0 && ctx_pages <= pages && ctx_max_pages <= stride;
    }
  } fp8_stage;
};
// Kernels implementing it (docs/cuda-backend.md): kFa2, FlashAttention-2 style with the
// fragments in registers (mma.sync m16n8k16, ldmatrix, cp.async double buffering; blocks of
// 2 query heads x 64 rows when the GQA group size is even), and kWmma, the earlier WMMA
// kernel (S/P/O through shared memory), kept as a fallback. kFa2Single is the FA2 kernel
// with one query head per block always (for comparison). kHopper is the sm_90a kernel
// (FlashAttention-3 style: a TMA producer warp, wgmma consumer warpgroups; head_dim 64 and
// 128); where it cannot run (another head_dim, a device that is not compute capability 9.0,
// no tensor map for the pool) the launch runs kFa2 instead and says so once on stderr.
// kHopperV5 (the default) and kHopperV6 are schedules of the same Hopper kernel (same results
// bit for bit as v1 up to fp32 summation order; attention_prefill_hopper.cu): v5 pipelines the
// next tile's S = Q K^T against this tile's softmax, ping-pongs the two consumer warpgroups,
// splits the K / V ring and orders blocks heaviest tile first; v6 is v5 made persistent (one
// block per SM running a static list of work items, the next item's Q and K/V loaded under this
// item's work; not yet run on a GPU). The two-argument launch uses the environment variable
// STRATA_PREFILL_ATTN=hopper|hopper_v5|hopper_v6|fa2|fa2_single|wmma (default hopper_v5 since the
// H200 load test of 2026-12-02; read once; anything else throws ConfigError).
enum class PrefillKernel { kFa2, kWmma, kFa2Single, kHopper, kHopperV5, kHopperV6 };
PrefillKernel prefill_kernel_from_env();
const char* prefill_kernel_name(PrefillKernel k);
void launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t s);
void launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t s, PrefillKernel k);

// Decode: one query token per batch entry b at row q_row[b]; it attends to slots
// 0 .. seq_len[b]-1 of its pages (valid-slot count: sparse layers use the same kernel).
// The keys are split into `num_splits` ranges per sequence (each block loads a K/V tile once
// for the whole GQA group), then merged. seq_len[b] <= 0 marks padding (output zeros).
struct DecodeAttentionParams {
  const __nv_bfloat16* q;  // [rows, q_stride]
  int q_stride;
  const int* q_row;  // [batch]
  const __nv_bfloat16* kv_pool;
  long long page_elems;
  const int* block_table;  // [batch, table_stride]
  int table_stride;
  const int* seq_len;  // [batch] valid slots
  int batch;
  int num_splits;      // <= kMaxDecodeSplits
  float* part_o;       // workspace [batch, heads, num_splits, head_dim]
  float* part_ml;      // workspace [batch, heads, num_splits, 2] (max, sum)
  __nv_bfloat16* out;  // [rows, out_stride] at row q_row[b]
  int out_stride;
  float* lse;  // [batch, heads] or nullptr
  // [batch, heads, logits_stride] scaled logits (scale * q.k, the values the softmax uses), or
  // nullptr. Slots at or past logits_stride are not written: a row longer than the stride
  // (e.g. a full-cache row in a step whose sparse rows want logits) gets only its first
  // logits_stride columns.
  float* logits;
  int logits_stride;
  int heads;
  int kv_heads;
  int head_dim;
  float scale;
  int unroll = 0;  // two-pass kernel: keys in flight per thread: 0 (default, 4) or 8
  // Which kernel (DecodeKernel); the default is kDefaultDecodeKernel.
  int kernel = 0;
  // Tensor-core kernel only, a tuning knob for benchmarks: (warps per block, cp.async stages
  // per warp) = 0: (4, 3) the default, 1: (2, 3), 2: (4, 2), 3: (2, 4), 4: (4, 4); on e4m3
  // pages (kv_pool8; stages of half the bytes) 0: (4, 5) the default, 1: (2, 5), 2: (4, 3),
  // 3: (4, 4), 4: (8, 3).
  int mma_shape = 0;
  // An FP8 KV cache (cache.kv_dtype fp8, docs/kv-fp8.md): set, the pages are e4m3 codes here
  // (same layout and page_elems, 1 byte each; kv_pool unused) and kv_scales holds this layer's
  // scales [kv_heads][2] (K, V): logits = scale * s_k * q.code_k, output = s_v * sum_j p_j code_v
  // (the scales folded out of the sums; exact for power-of-two scales). Read by the tensor-core
  // kernel (whatever `kernel` says, except kDecodeTwoPass, which runs the two-pass kernel on
  // e4m3 for A/B runs; the pipelined kernel reads bf16 only). Not yet run on a GPU.
  const std::uint8_t* kv_pool8 = nullptr;
  const float* kv_scales = nullptr;
  // Issue 18 item 1: the sparse layers' score update inside the tensor-core kernel. Set (with
  // `logits` null) only where decode_attention_updates_scores(p) holds: each block keeps its
  // rows' scaled logits in shared memory (upd_cols columns, >= every updated row's attended
  // slots), and once it has the rows' LSE it applies sparse::launch_scored_update's arithmetic
  // to upd_seqs[b] (the layer's DecodeSeq of batch entry b, as DecodeParams::seqs) in the same
  // order, so the scores and positions get the same bits with no logits in global memory and no
  // update kernel. upd_pages / upd_scores / upd_positions: DecodeParams::pages / scores /
  // positions.
  const sparse::DecodeSeq* upd_seqs = nullptr;
  const std::int32_t* upd_pages = nullptr;
  float* upd_scores = nullptr;
  std::int32_t* upd_positions = nullptr;
  int upd_cols = 0;
};
// kTwoPass: per 256-key chunk a K pass (logits to shared memory), a softmax pass and a V pass,
// 4-8 loads in flight per thread. kPipelined: one pass, K and V tiles of 32 keys staged into
// shared memory by a 3-stage cp.async pipeline, each group of head_dim/8 lanes keeps its own
// online softmax over its keys, the groups merged in a fixed order at the end. Both write the
// same partial results (the merge kernel is shared) and are deterministic.
// kMma: the GQA group's heads as the rows of one m16 tile, S = Q K^T and O += P V on tensor
// cores (mma.sync), each warp streaming whole pages (K and V together) through its own cp.async
// ring, the warps merged in a fixed order. On e4m3 pages it stages the codes and converts them
// to fp16 fragments in registers (Q scaled by a power of two per head into fp16's range).
enum DecodeKernel : int {
  kDecodeDefault = 0,
  kDecodeTwoPass = 1,
  kDecodePipelined = 2,
  kDecodeMma = 3
};
// The kernel kDecodeDefault runs: kDefaultDecodeKernel, or the environment variable
// STRATA_DECODE_ATTN=two_pass|pipelined|mma (read once; anything else throws ConfigError).
inline constexpr int kDefaultDecodeKernel = kDecodeMma;
int decode_kernel_from_env();
inline constexpr int kMaxDecodeSplits = 64;
void launch_decode_attention(const DecodeAttentionParams& p, cudaStream_t s);
// Whether the launch of `p` (its upd_* fields aside) may carry the score update with upd_cols
// columns: the tensor-core kernel runs it with one split, head_dim 64 or 128, and the shared
// memory of the kept logits leaves it as many blocks per SM as it has without them.
bool decode_attention_updates_scores(const DecodeAttentionParams& p, int upd_cols);

}  // namespace strata::cuda

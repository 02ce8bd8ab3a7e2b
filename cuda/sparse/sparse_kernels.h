// CUDA kernels of layer-wise KV sparsity (DESIGN.md section 3, docs/cuda-sparsity.md):
// SnapKV scoring from the prefill kernel's LSE, pooling, exact top-k, compaction of the kept
// K/V into a sequence's pages, and the `scored` decode-side operations (ring resolve, score
// moving averages). Plain C++ header; the kernels live in cuda/sparse/*.cu.
//
// Every launcher takes one params struct, is batched over sequences through a device array
// of per-sequence metadata, and sizes its grid from host-planned maxima only (padding
// entries exit early), so a CUDA graph captured once serves every mix of sequences.
// Launchers return the launch error (cudaGetLastError) and never synchronise.
//
// Paged K/V: `pool + page_id * page_elems` is one page laid out per runtime/kv_layout.h
// (K part [kv_head][slot][head_dim], then V). A contiguous per-step scratch is addressed the
// same way: lay it out as pages 0..n-1 and give the sequence an identity page table
// (cuda/sparse/sparse_plan.h builds these). Scores of sparse layers live in a separate
// fp32 pool, `score_pool + page_id * kv_heads * kBlockSize`, `[kv_head][slot]`, and beside
// them the original token position of each slot in an int32 pool of the same shape (the admin
// console's census of kept positions, SeqStep::report_kept). Every kernel that moves or writes
// a sparse slot's K/V writes its position too; a null positions pointer skips those writes.
//
// An FP8 KV cache (cache.kv_dtype fp8, docs/kv-fp8.md "Sparse layers"): the `*pool8` fields
// point at e4m3 codes (same layout and page_elems, 1 byte per element, so the element offsets
// above are byte offsets) and the bf16 pool pointers are unused; kv_scales holds this layer's
// fixed scales [kv_heads][2] (K, V). Kernels that only move slots (compaction, shrink, the ring
// resolve) copy the codes as they are; kernels that compute q . k (SnapKV scoring, the score
// update without the attention's logits) read the codes exactly (e4m3 -> bf16 / fp32) and fold
// the K scale into the softmax scale: logit = (scale * s_k) * sum_d q_d code_d, the CPU
// oracle's scale * sum_d q_d (code_d * s_k) up to the sum's rounding (exact scales for a power
// of two s_k). Not yet run on a GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/sparse/sparse_meta.h"

namespace strata::cuda::sparse {

using bf16 = __nv_bfloat16;

// ---- prefill: scoring, pooling + selection, compaction ------------------------------------

struct PrefillParams {
  const PrefillSeq* seqs = nullptr;  // [num_seqs], device
  int num_seqs = 0;
  int max_len = 0;   // max prompt_len over seqs (grid size of the scoring kernel)
  int max_kept = 0;  // max kept over seqs (grid size of the compaction kernel)
  int q_heads = 0;
  int kv_heads = 0;                    // q_heads % kv_heads == 0, q_heads / kv_heads <= 16
  int head_dim = 0;                    // 64 or 128
  float scale = 0.0f;                  // softmax scale of the prefill kernel (1/sqrt(head_dim))
  const bf16* q = nullptr;             // [rows, q_stride]: head h at q + row * q_stride + h * hd
  int q_stride = 0;                    // 0: q_heads * head_dim
  const float* lse = nullptr;          // [rows, q_heads]: natural-log LSE from the prefill kernel
  const bf16* src_pool = nullptr;      // pool holding temporary pages (usually dst_pool)
  const bf16* scratch_pool = nullptr;  // per-step scratch laid out as pages 0..n-1
  const std::int32_t* src_pages = nullptr;
  bf16* dst_pool = nullptr;  // the KV pool (destination pages)
  const std::int32_t* dst_pages = nullptr;
  float* dst_scores = nullptr;            // score pool of dst pages: [page][kv_head][16]
  std::int32_t* dst_positions = nullptr;  // position pool of dst pages, same shape (or null)
  std::size_t page_elems = 0;             // KvLayout::page_elems() (same for src and dst)
  // Scratch (device, sized by sparse_plan.h).
  float* raw = nullptr;              // S     [score_off + kv_head * L + i]
  float* pooled = nullptr;           // S'    same indexing; only [sinks, L - alpha) used
  std::int32_t* kept_idx = nullptr;  // kept source positions, ascending per head
  float* kept_score = nullptr;       // initial score of each kept slot
  // FP8 KV (see the top): set dst_pool8 and the pools are these (src_pool8 / scratch_pool8 as
  // src_pool / scratch_pool); kv_scales is required by the scoring kernel then.
  const std::uint8_t* src_pool8 = nullptr;
  const std::uint8_t* scratch_pool8 = nullptr;
  std::uint8_t* dst_pool8 = nullptr;
  const float* kv_scales = nullptr;  // this layer's [kv_heads][2] (K, V)
};

// Select mode: S[g][i] = sum over window queries q >= i and heads h of group g of
// exp(q_h . k_i * scale - lse[q,h]) for every i in [0, L) into `raw` (snapkv::window_scores).
// Direct mode: the score pool of [0, L) after the chunk's score averages.
// Keys are the outer loop (one block per 64-key tile, kv head, sequence), queries the inner
// one, so each block sums its own keys with no cross-block reduction.
cudaError_t launch_sparse_score(const PrefillParams& p, cudaStream_t stream);
// Select mode only: pools S over [sinks, L - alpha), selects the top C - alpha - sinks (ties
// toward the lower position) and writes kept_idx/kept_score: sinks, selected (ascending),
// window; `window` policy: sinks + the last C - sinks positions. Initial scores: selected
// S'/alpha, every other kept position S/alpha (snapkv::select_prompt).
cudaError_t launch_sparse_select(const PrefillParams& p, cudaStream_t stream);
// Select mode only: gathers kept K/V of every head from the source pages into dst slots
// [0, kept) and writes their scores and positions. (Direct mode: the scoring kernel writes the
// chunk's positions, slot p = position p.)
cudaError_t launch_sparse_compact(const PrefillParams& p, cudaStream_t stream);
// The three above in order.
cudaError_t launch_sparse_prefill(const PrefillParams& p, cudaStream_t stream);

// ---- live shrink (LayerAction::kShrink) ----------------------------------------------------

struct ShrinkParams {
  const ShrinkSeq* seqs = nullptr;
  int num_seqs = 0;
  int kv_heads = 0;
  int head_dim = 0;
  bf16* pool = nullptr;
  float* scores = nullptr;
  std::int32_t* positions = nullptr;  // position pool (or null), shaped like the scores
  const std::int32_t* pages = nullptr;
  std::size_t page_elems = 0;
  std::int32_t* stage_idx = nullptr;  // [slots]: old slot of each new slot
  bf16* stage_kv = nullptr;           // [slots][2][head_dim]
  float* stage_score = nullptr;       // [slots]
  std::int32_t* stage_pos = nullptr;  // [slots] (with positions)
  // FP8 KV (see the top): set, the pool is these codes (pool unused) and the staging buffer of
  // K/V is stage_kv8 ([slots][2][head_dim] codes; stage_kv unused). Codes move as they are.
  std::uint8_t* pool8 = nullptr;
  std::uint8_t* stage_kv8 = nullptr;
};

// Per (sequence, KV head): the new slot order of snapkv::shrink_order (sinks, the
// highest-scored older slots in slot order, the most recent R tokens oldest first; ring_pos
// becomes 0), applied in place through the staging buffers: slots [0, min(valid, shrink_to))
// hold the kept K/V and scores afterwards.
cudaError_t launch_sparse_shrink(const ShrinkParams& p, cudaStream_t stream);

// ---- decode of `scored` layers --------------------------------------------------------------

struct DecodeParams {
  const DecodeSeq* seqs = nullptr;
  int num_seqs = 0;
  int max_slots = 0;  // max slots attended this step (C, or valid + 1): update grid size
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  bf16* pool = nullptr;
  float* scores = nullptr;
  std::int32_t* positions = nullptr;  // position pool (or null), shaped like the scores
  const std::int32_t* pages = nullptr;
  std::size_t page_elems = 0;
  const bf16* q = nullptr;     // [rows, q_stride], head h at q + q_row * q_stride + h * hd
  int q_stride = 0;            // 0: q_heads * head_dim
  const float* lse = nullptr;  // [num_seqs, q_heads] natural log, decode attention's lse in
                               // its batch order (= the order of seqs)
  // The decode attention's own scaled logits (DecodeAttentionParams::logits, same batch order):
  // [num_seqs, q_heads, logits_stride], slot j at column j. When set, the update reads them
  // instead of recomputing q . k (no pass over the kept K).
  const float* logits = nullptr;
  int logits_stride = 0;  // >= max_slots
  // FP8 KV (see the top): set, the pool is these codes (pool unused): the resolve moves codes,
  // the update without `logits` reads them with kv_scales (required then; with `logits` it
  // reads no K: the attention kernel's logits already carry the K scale).
  std::uint8_t* pool8 = nullptr;
  const float* kv_scales = nullptr;  // this layer's [kv_heads][2] (K, V)
};

// Before the new token's K/V is written: when the ring is full, the token in the ring's
// oldest slot (C - r + ring_pos) replaces, per KV head, the lowest-scored slot of
// [sinks, C - r) (lowest slot on ties) if its score is strictly higher (its position moves
// with it); else it is dropped.
cudaError_t launch_scored_resolve(const DecodeParams& p, cudaStream_t stream);
// After decode attention, every sparse policy (the CPU backend's rule): p_h(j) = exp(logit_h(j)
// - lse_h) for the slots attended this step, and s_j <- (1 - 1/alpha) s_j + (1/alpha)
// sum_{h in g} p_h(j) (heads summed in index order); the new token's slot starts at
// sum_{h in g} p_h(new), and its position is DecodeSeq::position. logit_h(j) = q_h . k_j * scale is
// read from p.logits when set (the attention kernel's own values: one coalesced fp32 read per head
// and slot), else recomputed from q and the kept K (one pass over K with 2-byte loads; 1-byte
// codes with pool8, logit = q_h . code_j * (scale * s_k)).
cudaError_t launch_scored_update(const DecodeParams& p, cudaStream_t stream);

// ---- census of kept positions (SeqStep::report_kept) -----------------------------------------

// out[i * per_page + e] = positions[pages[i] * per_page + e] for i < num_pages, e < per_page
// (per_page = kv_heads * kBlockSize): the position pool of `pages`, contiguous, for one
// device -> host copy.
cudaError_t launch_gather_positions(const std::int32_t* positions, const std::int32_t* pages,
                                    int num_pages, int per_page, std::int32_t* out,
                                    cudaStream_t stream);

}  // namespace strata::cuda::sparse

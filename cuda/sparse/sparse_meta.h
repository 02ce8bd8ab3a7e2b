// Per-sequence metadata of the sparsity kernels (cuda/sparse/sparse_kernels.h): the POD records
// the host plans (cuda/sparse/sparse_plan.h, cuda/step_layout.h) and the kernels read from
// device arrays. Plain C++ with no CUDA header, so host-only planning code and its CI tests
// (no GPU) use the same types as the kernels.
#pragma once

#include <cstdint>

namespace strata::cuda::sparse {

// One sequence of one sparse layer in a prefill step, in one of two modes:
//  - select (LayerAction::kSelect, prompt longer than C): the source pages hold positions
//    [0, L) at slots [0, L); score with the window queries, select, compact into dst pages.
//  - direct (a sparse layer whose prompt fits, any chunk): the chunk's queries at positions
//    [chunk_start, L) have attended slots [0, pos] of the layer's own pages; the per-slot
//    score averages advance exactly as if each prompt token were a decode step (the CPU
//    backend's order), written straight into the score pool. No selection, no copy.
struct PrefillSeq {
  std::int32_t policy = 0;      // runtime Policy value: 1 window, 2 snapkv, 3 scored
  std::int32_t prompt_len = 0;  // L: keys [0, L); select: the whole prompt, direct: chunk end
  std::int32_t capacity = 0;    // C_l
  std::int32_t sinks = 0;
  std::int32_t window = 0;       // alpha: observation window = positions [L - alpha, L)
  std::int32_t pool_kind = 0;    // runtime PoolKind value: 0 max, 1 avg
  std::int32_t pool_kernel = 1;  // odd
  std::int32_t direct = 0;       // 1: direct mode (see above)
  std::int32_t chunk_start = 0;  // direct: first position of this chunk
  std::int32_t src_scratch = 0;  // 1: source pages index scratch_pool, 0: src_pool
  std::int32_t q_row = 0;        // row in q/lse of the first query used: select: position
                                 // max(0, L - alpha), direct: position chunk_start
  std::int32_t src_table = 0;    // offset into PrefillParams::src_pages (>= ceil(L/16) ids)
  std::int32_t dst_table = 0;    // offset into PrefillParams::dst_pages (>= ceil(kept/16) ids)
  std::int32_t kept = 0;         // select: slots kept = C (= valid afterwards); direct: 0
  std::int64_t score_off = 0;    // offset into raw/pooled scratch: [kv_head][L] floats
  std::int64_t kept_off = 0;     // offset into kept_idx/kept_score scratch: [kv_head][C]
};

// One sequence of one sparse layer, in its state AFTER this step's own work (the CPU
// backend's state_after under the old rule), shrunk to `shrink_to` slots.
struct ShrinkSeq {
  std::int32_t policy = 0;    // 0 (padding) is skipped
  std::int32_t capacity = 0;  // old C
  std::int32_t ring = 0;      // old ring
  std::int32_t sinks = 0;
  std::int32_t window = 0;
  std::int32_t valid = 0;      // post-step
  std::int32_t ring_pos = 0;   // post-step
  std::int32_t shrink_to = 0;  // > sinks + window
  std::int32_t table = 0;      // offset into ShrinkParams::pages
  std::int64_t stage_off = 0;  // offset (slots) into the staging buffers: [kv_head][shrink_to]
};

// One sequence of one sparse layer in a decode step (resolve/update kernels).
struct DecodeSeq {
  std::int32_t policy = 0;  // entries whose policy is not `scored` are skipped
  std::int32_t capacity = 0;
  std::int32_t ring = 0;
  std::int32_t sinks = 0;
  std::int32_t window = 0;    // alpha: lambda = 1/alpha
  std::int32_t valid = 0;     // LayerSlots::valid BEFORE this step
  std::int32_t ring_pos = 0;  // LayerSlots::ring_pos BEFORE this step
  std::int32_t table = 0;     // offset into DecodeParams::pages
  std::int32_t q_row = 0;     // row of this sequence's decode query in q/lse
  std::int32_t position = 0;  // the decode token's position (its slot's census entry)
};

}  // namespace strata::cuda::sparse

// Host-side planning of the sparsity kernels (cuda/sparse/sparse_kernels.h): turns per-sequence
// LayerSlots-level facts into the kernels' metadata arrays, concatenated page tables and
// scratch sizes, and checks the preconditions the kernels rely on (InternalError otherwise).
// Plain C++ (no CUDA), so it is unit-tested on the CPU (tests/cuda/sparse_plan_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/sparse/sparse_meta.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata::cuda::sparse {

// One sequence of one sparse layer in a prefill step (PrefillSeq's two modes).
struct PrefillInput {
  LayerRule rule;  // sparse policy (and pool kind/kernel) of this sequence's layer
  // Select mode: L = prompt_len (the chunk holds positions [L - alpha, L) at least).
  // Direct mode: L = end of this chunk (start + n), the chunk holds [chunk_start, L).
  int prompt_len = 0;
  bool direct = false;
  int chunk_start = 0;  // direct only
  int last_row = 0;     // row of position L - 1 in this step's q/lse
  // Select mode: source of the prompt's K/V (position p at slot p): the temp pages
  // (LayerSlots::temp_pages) or, when empty, pages of the backend's scratch (identity table).
  std::vector<std::int32_t> src_pages;
  std::vector<std::int32_t> dst_pages;  // LayerSlots::pages
};

struct PrefillPlan {
  std::vector<PrefillSeq> seqs;
  std::vector<std::int32_t> src_pages;  // concatenated tables (scratch ids are scratch-local)
  std::vector<std::int32_t> dst_pages;
  int max_len = 0;
  int max_kept = 0;
  int scratch_pages = 0;         // scratch pages the sources of this step need
  std::size_t score_floats = 0;  // size of PrefillParams::raw and ::pooled (each)
  std::size_t kept_elems = 0;    // size of kept_idx and kept_score (each)
};

// kv_heads: local KV heads. Throws InternalError on a full layer, a table that does not
// cover the prompt (source) or the kept slots (destination), a select with L <= C or a
// direct chunk with L > C (snapkv: C + generated tokens is checked by the caller).
PrefillPlan plan_sparse_prefill(const std::vector<PrefillInput>& inputs, int kv_heads);

// One sequence of one sparse layer in a decode step.
DecodeSeq make_decode_seq(const LayerRule& rule, int valid, int ring_pos, int table, int q_row);

// Everything the decode kernels read for one sequence in one layer (full or sparse), from its
// LayerSlots before the step: the slots decode attention attends ([0, seq_len)), the slot
// the new token's K/V goes to, and the DecodeSeq of the resolve/update kernels (policy 0 for
// a full layer). position: the decode token's position (= slots held by a full layer).
struct DecodeLayerMeta {
  int seq_len = 0;
  int slot = 0;
  DecodeSeq seq;
};
DecodeLayerMeta decode_layer_meta(const LayerSlots& ls, int position, int table, int q_row);

// Issue 9 guard, shared by eager steps and graph replays (the backend calls it for every
// decode row and layer before uploading): every slot the decode kernels touch for this
// sequence and layer is one the layer holds before the step ([0, valid), or [0, position) on
// a full layer) or the one slot this step writes, and lies in the first `table_pages` entries
// of the page table the backend uploaded (entries past those are not this sequence's pages):
//  - the K/V write at m.slot (a held ring slot, or the next free slot);
//  - decode attention and the score update over [0, m.seq_len), which include m.slot;
//  - the update/resolve kernels' own recomputation from m.seq (attended slots, new slot,
//    ring fullness) agrees with m.seq_len / m.slot; the resolve's [sinks, C) with a full ring.
// Throws InternalError naming the read otherwise.
void check_decode_reads(const LayerSlots& ls, int position, const DecodeLayerMeta& m,
                        int table_pages);

// One sequence of one sparse layer to shrink, from its state after this step's own work.
// stage_off: offset (slots) of its kv_heads * shrink_to staging slots.
ShrinkSeq make_shrink_seq(const LayerRule& rule, int valid, int ring_pos, int shrink_to, int table,
                          std::int64_t stage_off);

}  // namespace strata::cuda::sparse

// Host-side planning of the sparsity kernels (cuda/sparse/sparse_kernels.h): turns per-sequence
// LayerSlots-level facts into the kernels' metadata arrays, concatenated page tables and
// scratch sizes, and checks the preconditions the kernels rely on (InternalError otherwise).
// Plain C++ (no CUDA), so it is unit-tested on the CPU (tests/cuda/sparse_plan_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/sparse/sparse_kernels.h"
#include "runtime/sparsity_profile.h"

namespace strata::cuda::sparse {

// One sequence of one sparse layer whose prompt ends in this step.
struct PrefillInput {
  LayerRule rule;                  // sparse policy of this sequence's layer
  PoolKind pool = PoolKind::kMax;  // from the sequence's profile
  int pool_kernel = 7;
  int prompt_len = 0;  // L
  int last_row = 0;    // row of position L - 1 in this step's q/lse
  // Source of the prompt's K/V (position p at slot p): the temp pages (LayerSlots::temp_pages)
  // or, when empty, `scratch_pages` pages of the backend's scratch (identity table).
  std::vector<std::int32_t> src_pages;
  std::vector<std::int32_t> dst_pages;  // LayerSlots::pages
  bool scores_only = false;             // direct prefill of a `scored` layer (L <= C): scores only
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
// cover the prompt (source) or the kept slots (destination), or scores_only with L > C.
PrefillPlan plan_sparse_prefill(const std::vector<PrefillInput>& inputs, int kv_heads);

// One sequence of one sparse layer in a decode step.
DecodeSeq make_decode_seq(const LayerRule& rule, int valid, int ring_pos, int table, int q_row);

}  // namespace strata::cuda::sparse

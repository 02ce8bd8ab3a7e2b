// Host-side planning of the sparsity kernels (cuda/sparse/sparse_plan.h): offsets, scratch
// tables and the preconditions the kernels rely on. Runs without a GPU.
#include "cuda/sparse/sparse_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/kv_layout.h"
#include "tests/cuda/layer_rules.h"

namespace strata::cuda::sparse {
namespace {

using testutil::scored;

TEST(SparsePlan, SelectOffsetsScratchAndTables) {
  PrefillInput a;  // from scratch
  a.rule = scored(100);
  a.prompt_len = 150;
  a.last_row = 149;
  a.dst_pages = {7, 3, 9, 11, 2, 5, 8};
  PrefillInput b;  // from temp pages
  b.rule = scored(64);
  b.rule.pool = PoolKind::kAvg;
  b.rule.pool_kernel = 5;
  b.prompt_len = 40 + 64;
  b.last_row = 300;
  b.src_pages = {20, 21, 22, 23, 24, 25, 26};
  b.dst_pages = {30, 31, 32, 33};
  PrefillInput c = a;  // second scratch user
  c.prompt_len = 33;   // fits: not a select
  c.rule = scored(100);
  const auto plan = plan_sparse_prefill({a, b}, 8);
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(plan.seqs[0].src_scratch, 1);
  EXPECT_EQ(plan.seqs[0].q_row, 149 - 31);
  EXPECT_EQ(plan.seqs[0].kept, 100);
  EXPECT_EQ(plan.seqs[1].src_scratch, 0);
  EXPECT_EQ(plan.seqs[1].pool_kind, 1);
  EXPECT_EQ(plan.seqs[1].pool_kernel, 5);
  EXPECT_EQ(plan.scratch_pages, 10);  // ceil(150 / 16)
  // Scratch table is the identity over the scratch pages; temp pages follow it.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(plan.src_pages[i], i);
  EXPECT_EQ(plan.seqs[1].src_table, 10);
  EXPECT_EQ(plan.src_pages[10], 20);
  EXPECT_EQ(plan.seqs[1].dst_table, 7);
  EXPECT_EQ(plan.seqs[1].score_off, 8 * 150);
  EXPECT_EQ(plan.seqs[1].kept_off, 8 * 100);
  EXPECT_EQ(plan.score_floats, 8u * (150 + 104));
  EXPECT_EQ(plan.kept_elems, 8u * (100 + 64));
  EXPECT_EQ(plan.max_len, 150);
  EXPECT_EQ(plan.max_kept, 100);
  EXPECT_THROW(plan_sparse_prefill({a, c}, 8), InternalError);  // select with L <= C
}

TEST(SparsePlan, DirectChunkRowsAndChecks) {
  PrefillInput d;
  d.rule = scored(512);
  d.direct = true;
  d.prompt_len = 300;  // chunk [200, 300)
  d.chunk_start = 200;
  d.last_row = 99;
  d.dst_pages = std::vector<std::int32_t>(19, 1);
  auto plan = plan_sparse_prefill({d}, 8);
  EXPECT_EQ(plan.seqs[0].direct, 1);
  EXPECT_EQ(plan.seqs[0].q_row, 0);
  EXPECT_EQ(plan.score_floats, 0u);
  EXPECT_EQ(plan.max_kept, 0);
  d.dst_pages.resize(18);  // 300 slots need 19 pages
  EXPECT_THROW(plan_sparse_prefill({d}, 8), InternalError);
  d.dst_pages.resize(19);
  d.prompt_len = 600;  // beyond capacity: not a direct layer
  EXPECT_THROW(plan_sparse_prefill({d}, 8), InternalError);
  PrefillInput full = d;
  full.rule = LayerRule{};
  EXPECT_THROW(plan_sparse_prefill({full}, 8), InternalError);
}

TEST(SparsePlan, SelectNeedsCoveringTables) {
  PrefillInput a;
  a.rule = scored(100);
  a.prompt_len = 150;
  a.last_row = 40;
  a.src_pages = {1, 2, 3};  // 150 tokens need 10 pages
  a.dst_pages = std::vector<std::int32_t>(7, 0);
  EXPECT_THROW(plan_sparse_prefill({a}, 8), InternalError);
  a.src_pages.clear();
  a.dst_pages.resize(6);  // 100 slots need 7
  EXPECT_THROW(plan_sparse_prefill({a}, 8), InternalError);
  a.dst_pages.resize(7);
  a.last_row = 10;  // fewer rows than the window
  EXPECT_THROW(plan_sparse_prefill({a}, 8), InternalError);
}

TEST(SparsePlan, DecodeSeqMirrorsLayerSlots) {
  const auto s = make_decode_seq(scored(512), 512, 17, 64, 3);
  EXPECT_EQ(s.policy, 3);
  EXPECT_EQ(s.ring, 32);
  EXPECT_EQ(s.ring_pos, 17);
  EXPECT_EQ(s.table, 64);
  EXPECT_EQ(s.q_row, 3);
  EXPECT_THROW(make_decode_seq(scored(512), 513, 0, 0, 0), InternalError);
  EXPECT_THROW(make_decode_seq(scored(512), 512, 32, 0, 0), InternalError);
}

LayerRule rule_of(Policy p, int capacity, int sinks, int window) {
  LayerRule r;
  r.policy = p;
  r.capacity = capacity;
  r.sinks = sinks;
  r.window = window;
  r.ring = p == Policy::kScored ? window : p == Policy::kWindow ? capacity - sinks : 0;
  return r;
}

// What the update/resolve kernels derive from a DecodeSeq (cuda/sparse/sparse_decode.cu).
int kernel_attended(const DecodeSeq& s) {
  const bool full = s.ring > 0 && s.valid == s.capacity;
  return full ? s.capacity : s.valid + 1;
}
int kernel_new_slot(const DecodeSeq& s) {
  const bool full = s.ring > 0 && s.valid == s.capacity;
  return full ? s.capacity - s.ring + s.ring_pos : s.valid;
}

// Decode metadata along a whole decode run (direct fill from a short prompt, then the ring /
// appends): attention length, K/V slot and the kernels' own view agree with LayerSlots at
// every step, the ring writes every ring slot once per cycle and nothing else.
TEST(SparsePlan, DecodeLayerMetaFollowsLayerSlots) {
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored}) {
    LayerSlots ls;
    ls.rule = rule_of(p, 48, 4, 8);
    ls.valid = 30;  // a 30-token prompt that fits
    std::vector<int> writes(200, 0);
    for (int step = 0; step < 150; ++step) {
      const int pos = 30 + step;
      const DecodeLayerMeta m = decode_layer_meta(ls, pos, 96, 5);
      SCOPED_TRACE(std::string(to_string(p)) + " step " + std::to_string(step));
      EXPECT_EQ(m.slot, ls.decode_slot());
      EXPECT_EQ(m.seq_len, ls.ring_full() ? 48 : ls.valid + 1);
      EXPECT_LT(m.slot, m.seq_len);  // the new token is attended
      EXPECT_EQ(kernel_attended(m.seq), m.seq_len);
      EXPECT_EQ(kernel_new_slot(m.seq), m.slot);
      EXPECT_EQ(m.seq.table, 96);
      EXPECT_EQ(m.seq.q_row, 5);
      EXPECT_EQ(m.seq.policy, static_cast<int>(p));
      if (p != Policy::kSnapKv) {
        EXPECT_LE(m.seq_len, 48);
      } else {
        EXPECT_EQ(m.slot, pos);  // 30 prompt slots + appends: slot = position
      }
      ++writes[static_cast<std::size_t>(m.slot)];
      ls.advance_decode();
    }
    // Slots [30, 48) filled once; then the ring: window over [4, 48), scored over [40, 48).
    if (p == Policy::kWindow) {
      for (int j = 0; j < 4; ++j) EXPECT_EQ(writes[j], 0) << "sink " << j;
      // 150 writes: 18 fill [30, 48), then 132 = 3 cycles of the 44-slot ring.
      for (int j = 4; j < 48; ++j) EXPECT_EQ(writes[j], 3 + (j >= 30 ? 1 : 0)) << j;
    } else if (p == Policy::kScored) {
      for (int j = 0; j < 40; ++j) EXPECT_EQ(writes[j], j >= 30 ? 1 : 0) << j;
      // 132 ring writes over 8 slots: 16 full cycles + 4.
      for (int j = 40; j < 48; ++j) EXPECT_EQ(writes[j], 1 + 16 + (j - 40 < 4 ? 1 : 0)) << j;
    }
  }
  // A full layer attends every position and writes the token at its position.
  LayerSlots full;
  full.valid = 77;
  const DecodeLayerMeta f = decode_layer_meta(full, 77, 0, 2);
  EXPECT_EQ(f.seq_len, 78);
  EXPECT_EQ(f.slot, 77);
  EXPECT_EQ(f.seq.policy, 0);
}

// After a kSelect (valid = C, ring_pos 0), the first decode step of a ring policy writes the
// oldest ring slot: scored C - alpha, window the first non-sink slot.
TEST(SparsePlan, DecodeLayerMetaAfterSelection) {
  LayerSlots sc;
  sc.rule = rule_of(Policy::kScored, 512, 4, 32);
  sc.valid = 512;
  const auto m = decode_layer_meta(sc, 4000, 0, 0);
  EXPECT_EQ(m.slot, 480);
  EXPECT_EQ(m.seq_len, 512);
  EXPECT_EQ(m.seq.position, 4000);  // the update kernel records it at m.slot (the census)
  sc.ring_pos = 31;
  EXPECT_EQ(decode_layer_meta(sc, 4031, 0, 0).slot, 511);
  LayerSlots w;
  w.rule = rule_of(Policy::kWindow, 64, 4, 32);
  w.valid = 64;
  EXPECT_EQ(decode_layer_meta(w, 100, 0, 0).slot, 4);
  w.ring_pos = 59;
  EXPECT_EQ(decode_layer_meta(w, 159, 0, 0).slot, 63);
  w.ring_pos = 60;  // outside the ring
  EXPECT_THROW(decode_layer_meta(w, 160, 0, 0), InternalError);
}

// Issue 9 guard (check_decode_reads): along whole fill-then-ring runs every decode read of
// the metadata is a held slot or the slot written this step, inside the uploaded table; and
// each way the metadata could point at memory the step never wrote is refused.
TEST(SparsePlan, DecodeReadsStayInsideWrittenSlots) {
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored}) {
    LayerSlots ls;
    ls.rule = rule_of(p, 48, 4, 8);
    ls.valid = 30;
    for (int step = 0; step < 150; ++step) {
      const int pos = 30 + step;
      SCOPED_TRACE(std::string(to_string(p)) + " step " + std::to_string(step));
      const DecodeLayerMeta m = decode_layer_meta(ls, pos, 0, 0);
      const int pages = pages_for_slots(std::max(m.seq_len, m.slot + 1));
      EXPECT_NO_THROW(check_decode_reads(ls, pos, m, pages));
      EXPECT_NO_THROW(check_decode_reads(ls, pos, m, pages + 3));
      // A table uploaded one page short: the last page read would be a stale entry.
      EXPECT_THROW(check_decode_reads(ls, pos, m, pages - 1), InternalError);
      // Attention one slot past what is held/written (an unwritten slot, e.g. a page tail).
      DecodeLayerMeta longer = m;
      ++longer.seq_len;
      EXPECT_THROW(check_decode_reads(ls, pos, longer, pages + 1), InternalError);
      // A K/V write past the next free slot leaves a hole that later steps would read.
      DecodeLayerMeta skip = m;
      skip.slot = ls.valid + 1;
      skip.seq_len = std::max(m.seq_len, skip.slot + 1);
      EXPECT_THROW(check_decode_reads(ls, pos, skip, pages + 1), InternalError);
      // A DecodeSeq with a stale state (valid / ring position of another step): the score
      // update would recompute other slots than attention reads.
      DecodeLayerMeta stale = m;
      if (ls.ring_full()) {
        stale.seq.ring_pos = (ls.ring_pos + 1) % ls.rule.ring;
      } else {
        stale.seq.valid = ls.valid > 0 ? ls.valid - 1 : 1;
      }
      EXPECT_THROW(check_decode_reads(ls, pos, stale, pages), InternalError);
      ls.advance_decode();
    }
  }
  LayerSlots full;
  const DecodeLayerMeta f = decode_layer_meta(full, 77, 0, 2);
  EXPECT_NO_THROW(check_decode_reads(full, 77, f, pages_for_slots(78)));
  EXPECT_THROW(check_decode_reads(full, 77, f, pages_for_slots(78) - 1), InternalError);
  DecodeLayerMeta f2 = f;
  f2.seq_len = 79;  // one position past the token
  EXPECT_THROW(check_decode_reads(full, 77, f2, 10), InternalError);
  DecodeLayerMeta f3 = f;
  f3.seq.policy = 3;  // a full layer must not run the scored kernels
  EXPECT_THROW(check_decode_reads(full, 77, f3, 10), InternalError);
}

}  // namespace
}  // namespace strata::cuda::sparse

// Host-side planning of the sparsity kernels (cuda/sparse/sparse_plan.h): offsets, scratch
// tables and the preconditions the kernels rely on. Runs without a GPU.
#include "cuda/sparse/sparse_plan.h"

#include <gtest/gtest.h>

#include "runtime/error.h"

namespace strata::cuda::sparse {
namespace {

LayerRule scored(int capacity) {
  LayerRule r;
  r.policy = Policy::kScored;
  r.capacity = capacity;
  r.sinks = 4;
  r.window = 32;
  r.ring = 32;
  return r;
}

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

}  // namespace
}  // namespace strata::cuda::sparse

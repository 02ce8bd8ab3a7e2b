#include "cache/kv_planner.h"

#include <gtest/gtest.h>

#include "runtime/error.h"

namespace strata {
namespace {

std::vector<LayerRule> llama3_default() {
  SparsityProfile p;
  p.enabled = true;  // 3 full layers, scored, C = 512, window 32, sinks 4
  return p.resolve(32);
}

// DESIGN.md: 4000 + 500 tokens keep 3*4500 + 29*512 = 28,348 token-layers of 144,000.
TEST(KvPlanner, Llama3DefaultCompressionAt4000Plus500) {
  const auto rules = llama3_default();
  long kept = 0;
  for (const auto& r : rules) kept += kept_slots(r, 4000, 4500);
  EXPECT_EQ(kept, 28348);
  EXPECT_NEAR(compression_ratio(rules, 4000, 4500), 144000.0 / 28348.0, 1e-12);
  EXPECT_NEAR(compression_ratio(rules, 4000, 4500), 5.08, 0.005);
}

// docs/sparsity.md: the pyramid schedule keeps 13,500 + 13,803 + 29 * 36 = 28,347.
TEST(KvPlanner, PyramidCompressionAt4000Plus500) {
  SparsityProfile p;
  p.enabled = true;
  p.schedule = Schedule::kPyramid;
  const auto rules = p.resolve(32);
  long kept = 0;
  for (const auto& r : rules) kept += kept_slots(r, 4000, 4500);
  EXPECT_EQ(kept, 28347);
  EXPECT_NEAR(compression_ratio(rules, 4000, 4500), 144000.0 / 28347.0, 1e-12);
}

// 4000 prompt tokens + 501 generated = 4500 KV positions written (the last token is not fed back).
TEST(KvPlanner, Llama3DefaultPagesChunked) {
  const auto plan = pages_needed(4000, 501, llama3_default(), /*chunked=*/true);
  // full: 250 prompt pages reserved; scored: 250 temp + 32 fixed.
  EXPECT_EQ(plan.admission, 3 * 250 + 29 * (250 + 32));
  EXPECT_EQ(plan.prefill_peak, 3 * 250 + 29 * (250 + 32));
  EXPECT_EQ(plan.final, 3 * 282 + 29 * 32);  // ceil(4500/16) = 282
  EXPECT_EQ(plan.peak, plan.prefill_peak);
  ASSERT_EQ(plan.per_layer_final.size(), 32u);
  EXPECT_EQ(plan.per_layer_final[0], 282);
  EXPECT_EQ(plan.per_layer_final[31], 32);
}

TEST(KvPlanner, Llama3DefaultPagesUnchunkedHasNoTempPages) {
  const auto plan = pages_needed(4000, 501, llama3_default(), /*chunked=*/false);
  EXPECT_EQ(plan.admission, 3 * 250 + 29 * 32);
  EXPECT_EQ(plan.prefill_peak, 3 * 250 + 29 * 32);
  EXPECT_EQ(plan.final, 1774);
  EXPECT_EQ(plan.peak, 1774);
}

TEST(KvPlanner, PolicyArithmetic) {
  LayerRule full;
  LayerRule window{Policy::kWindow, 100, 96, 4, 16};
  LayerRule snap{Policy::kSnapKv, 100, 0, 4, 16};
  LayerRule scored{Policy::kScored, 100, 16, 4, 16};
  // Short prompt: everything kept, decode fills up to the capacity.
  EXPECT_EQ(plan_layer(window, 50, 11, true).final, pages_for_slots(60));
  EXPECT_EQ(plan_layer(window, 50, 200, true).final, pages_for_slots(100));
  EXPECT_EQ(plan_layer(window, 50, 200, true).temp, 0);
  // Long prompt, chunked: temp pages for the whole prompt.
  EXPECT_EQ(plan_layer(scored, 1000, 10, true).temp, pages_for_slots(1000));
  EXPECT_EQ(plan_layer(scored, 1000, 10, true).reserve, pages_for_slots(1000) + 7);
  // snapkv appends every generated token to C.
  EXPECT_EQ(plan_layer(snap, 1000, 51, false).final, pages_for_slots(150));
  EXPECT_EQ(plan_layer(snap, 1000, 51, false).reserve, pages_for_slots(150));
  EXPECT_EQ(kept_slots(snap, 1000, 1050), 150);
  EXPECT_EQ(kept_slots(snap, 40, 60), 60);
  // full layers reserve the prompt only.
  EXPECT_EQ(plan_layer(full, 100, 100, true).reserve, pages_for_slots(100));
  EXPECT_EQ(plan_layer(full, 100, 100, true).final, pages_for_slots(199));
  EXPECT_EQ(plan_layer(full, 16, 0, true).final, 1);
  EXPECT_THROW(plan_layer(full, 0, 1, true), InvalidRequest);
  EXPECT_THROW(plan_layer(full, 1, -1, true), InvalidRequest);
}

TEST(KvPlanner, MaxSequencesInABudget) {
  const std::size_t page = 65536;          // Llama-3-8B, bf16, 8 KV heads, head_dim 128
  const std::size_t budget = 40ull << 30;  // 655,360 pages
  // Sparse, whole-prompt prefill: 1774 pages each at the end.
  EXPECT_EQ(max_sequences(budget, page, 4000, 501, llama3_default(), false), 655360 / 1774);
  // Full cache: 32 * 282 = 9024 pages each.
  SparsityProfile off;
  const auto full = off.resolve(32);
  EXPECT_EQ(max_sequences(budget, page, 4000, 501, full, false), 655360 / 9024);
  EXPECT_EQ(max_sequences(page * 100, page, 4000, 501, full, false), 0);
}

}  // namespace
}  // namespace strata

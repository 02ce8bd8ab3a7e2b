// The FP8 KV cache's page accounting (cache.kv_dtype fp8, docs/kv-fp8.md): pages keep their 16
// slots and are half a bf16 page's bytes, so the same bytes hold twice the pages, the planner fits
// twice the sequences, and the manager's byte figures count e4m3 bytes.
#include <gtest/gtest.h>

#include "cache/kv_cache_manager.h"
#include "cache/kv_planner.h"
#include "cache/page_pool.h"

namespace strata {
namespace {

constexpr KvLayout kBf16{8, 128, 2};  // Llama-3-8B: 8 KV heads of 128
constexpr KvLayout kFp8{8, 128, 1};

TEST(KvFp8Accounting, PagesAreHalfTheBytesWithTheSameSlots) {
  EXPECT_EQ(kBf16.page_bytes(), 64u << 10);
  EXPECT_EQ(kFp8.page_bytes(), 32u << 10);
  EXPECT_TRUE(kFp8.fp8());
  EXPECT_FALSE(kBf16.fp8());
  // Same element offsets and score layout: only the element size differs.
  EXPECT_EQ(kFp8.v_offset(3, 5), kBf16.v_offset(3, 5));
  EXPECT_EQ(kFp8.score_elems(), kBf16.score_elems());
  const PagePool p8(100, kFp8), p16(100, kBf16);
  EXPECT_EQ(p8.slot_bytes() * 2, p16.slot_bytes());
  EXPECT_EQ(p8.total_bytes() * 2, p16.total_bytes());
  EXPECT_EQ(p8.score_bytes(), p16.score_bytes());  // scores stay fp32
}

// docs/sparsity.md: 369 default-profile sequences of 4000 + 500 fit a 40 GiB bf16 pool at their
// whole-prompt peak (1,774 pages); in fp8 the pool has 1,310,720 pages and fits 738.
TEST(KvFp8Accounting, TwiceThePagesAndSequencesForTheSameBytes) {
  const std::size_t budget = 40ull << 30;
  EXPECT_EQ(budget / kFp8.page_bytes(), 2 * (budget / kBf16.page_bytes()));
  EXPECT_EQ(budget / kFp8.page_bytes(), 1310720u);
  SparsityProfile p;
  p.enabled = true;
  const auto rules = p.resolve(32);
  const long s16 = max_sequences(budget, kBf16.page_bytes(), 4000, 500, rules, false);
  const long s8 = max_sequences(budget, kFp8.page_bytes(), 4000, 500, rules, false);
  EXPECT_EQ(s16, 369);
  EXPECT_EQ(s8, 738);
  // Full cache: 72 in bf16 (docs/sparsity.md), 145 in fp8 (floor of twice 72.6).
  const std::vector<LayerRule> full(32);
  EXPECT_EQ(max_sequences(budget, kBf16.page_bytes(), 4000, 500, full, false), 72);
  EXPECT_EQ(max_sequences(budget, kFp8.page_bytes(), 4000, 500, full, false), 145);
}

TEST(KvFp8Accounting, ManagerCountsFp8Bytes) {
  const KvCacheManager m8(32, kFp8, 1000, SparsityProfile{});
  const KvCacheManager m16(32, kBf16, 1000, SparsityProfile{});
  const auto s8 = m8.stats(), s16 = m16.stats();
  EXPECT_EQ(s8.page_bytes, kFp8.page_bytes());
  EXPECT_EQ(s8.bytes_total * 2, s16.bytes_total);
  EXPECT_EQ(s8.pages_total, s16.pages_total);
}

}  // namespace
}  // namespace strata

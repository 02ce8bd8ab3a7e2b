#include "cache/page_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "runtime/error.h"

namespace strata {
namespace {

KvLayout layout8b() {
  return KvLayout{8, 128, 2};
}

TEST(PagePool, CountsAndBytes) {
  PagePool pool(10, layout8b());
  EXPECT_EQ(pool.total(), 10);
  EXPECT_EQ(pool.free(), 10);
  EXPECT_EQ(pool.used(), 0);
  // 2 (K,V) * 8 heads * 16 slots * 128 dims * 2 bytes
  EXPECT_EQ(pool.page_bytes(), 65536u);
  EXPECT_EQ(pool.slot_bytes(), 4096u);
  EXPECT_EQ(pool.score_bytes(), 8u * 16u * 4u);
  const auto a = pool.alloc();
  const auto b = pool.alloc();
  EXPECT_EQ(a, 0);  // a fresh pool hands out the lowest ids first
  EXPECT_EQ(b, 1);
  EXPECT_EQ(pool.used(), 2);
  EXPECT_EQ(pool.used_bytes(), 2u * 65536u);
  EXPECT_EQ(pool.total_bytes(), 10u * 65536u);
  pool.check();
}

TEST(PagePool, AllocatesEveryPageOnceThenRunsOut) {
  PagePool pool(64, layout8b());
  std::set<std::int32_t> seen;
  for (int i = 0; i < 64; ++i) {
    const auto id = pool.alloc();
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 64);
    EXPECT_TRUE(seen.insert(id).second) << "page " << id << " handed out twice";
  }
  EXPECT_EQ(pool.alloc(), -1);
  EXPECT_EQ(pool.free(), 0);
  pool.check();
}

TEST(PagePool, BulkAllocIsAllOrNothing) {
  PagePool pool(5, layout8b());
  std::vector<std::int32_t> out{99};
  EXPECT_FALSE(pool.alloc(6, &out));
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(pool.free(), 5);
  EXPECT_TRUE(pool.alloc(5, &out));
  EXPECT_EQ(out.size(), 6u);
  EXPECT_EQ(pool.free(), 0);
  EXPECT_THROW(pool.alloc(-1, &out), InternalError);
}

TEST(PagePool, ReleaseReturnsPagesForReuse) {
  PagePool pool(3, layout8b());
  const auto a = pool.alloc();
  pool.alloc();
  pool.alloc();
  EXPECT_TRUE(pool.release(a));
  EXPECT_EQ(pool.free(), 1);
  EXPECT_TRUE(pool.is_free(a));
  EXPECT_EQ(pool.alloc(), a);  // LIFO: the page just freed comes back
  pool.check();
}

TEST(PagePool, RefCountsKeepSharedPagesAlive) {
  PagePool pool(4, layout8b());
  const auto a = pool.alloc();
  pool.retain(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  EXPECT_FALSE(pool.release(a));
  EXPECT_EQ(pool.used(), 1);
  EXPECT_TRUE(pool.release(a));
  EXPECT_EQ(pool.used(), 0);
  EXPECT_THROW(pool.retain(a), InternalError);  // retaining a free page
}

TEST(PagePool, DoubleFreeAndBadIdsThrow) {
  PagePool pool(4, layout8b());
  const auto a = pool.alloc();
  pool.release(a);
  EXPECT_THROW(pool.release(a), InternalError);
  EXPECT_THROW(pool.release(-1), InternalError);
  EXPECT_THROW(pool.release(4), InternalError);
  EXPECT_THROW(pool.ref_count(100), InternalError);
  EXPECT_EQ(pool.free(), 4);  // failed calls changed nothing
  pool.check();
}

TEST(PagePool, RejectsBadConstruction) {
  EXPECT_THROW(PagePool(-1, layout8b()), ConfigError);
  EXPECT_THROW(PagePool(4, KvLayout{0, 128, 2}), ConfigError);
  PagePool empty(0, layout8b());
  EXPECT_EQ(empty.alloc(), -1);
}

}  // namespace
}  // namespace strata

// The prefix cache in the KV cache manager: block names, hits that start the prefill at a
// block boundary before the observation window, sharing through reference counts, LRU
// eviction only under page pressure, the budget, and admission accounting with hits.
// (The randomized workload with sharing and a fake KV memory: kv_cache_random_test.cpp.)
#include <gtest/gtest.h>

#include <array>
#include <numeric>

#include "cache/block_hash.h"
#include "cache/kv_cache_manager.h"
#include "runtime/error.h"

namespace strata {
namespace {

const KvLayout kLayout{2, 16, 4};

SparsityProfile sparse(Policy policy, int capacity, int full = 1) {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = full;
  p.policy = policy;
  p.capacity = capacity;
  p.window = 8;
  p.sinks = 4;
  return p;
}
SparsityProfile dense() {
  SparsityProfile p;
  p.enabled = false;
  return p;
}

std::vector<std::int32_t> tokens(int n, int salt = 0) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (i * 7 + salt) % 50;
  return t;
}

SeqSpec spec_of(const std::vector<std::int32_t>& t, int max_tokens, std::string_view salt = "",
                bool chunked = true) {
  SeqSpec s{static_cast<int>(t.size()), max_tokens, chunked, std::nullopt};
  s.block_hashes = std::make_shared<const std::vector<BlockHash>>(
      block_hashes(prefix_root("tiny", salt), t.data(), t.size()));
  return s;
}

void prefill(KvCacheManager& m, std::uint64_t id, int budget = 1 << 20) {
  std::vector<LayerSlots> ls;
  while (!m.prefill_done(id)) {
    const int n = m.next_chunk_len(id, budget);
    ASSERT_GT(n, 0);
    ASSERT_TRUE(m.prepare_chunk(id, n, &ls));
    m.commit_step(id);
    m.check_invariants();
  }
}

TEST(BlockHash, ChainsOverThePrefixAndSeparatesModelsAndSalts) {
  const auto a = tokens(50), b = [] {
    auto t = tokens(50);
    t[3] = 49;  // differs in block 0 only
    return t;
  }();
  const auto root = prefix_root("m", "");
  const auto ha = block_hashes(root, a.data(), a.size());
  const auto hb = block_hashes(root, b.data(), b.size());
  ASSERT_EQ(ha.size(), 3u);  // 50 tokens: 3 full blocks, the partial one has no name
  for (int i = 0; i < 3; ++i) EXPECT_NE(ha[i], hb[i]) << i;  // every later block differs too
  EXPECT_EQ(block_hashes(root, a.data(), 48), ha);           // a name covers its prefix only
  EXPECT_NE(block_hashes(prefix_root("m", "tenant"), a.data(), 48)[0], ha[0]);
  EXPECT_NE(block_hashes(prefix_root("m2", ""), a.data(), 48)[0], ha[0]);
  EXPECT_NE(prefix_root("ab", "c"), prefix_root("a", "bc"));
}

TEST(PrefixCache, AHitStartsAtABlockBoundaryBeforeTheWindowAndSharesPages) {
  // 4 layers: 1 full, 3 scored with capacity 40 (< prompt: every sparse layer selects).
  KvCacheManager m(4, kLayout, 400, sparse(Policy::kScored, 40), PrefixCacheOptions{true, -1});
  const auto t = tokens(100);
  ASSERT_TRUE(m.admit(1, spec_of(t, 5)));
  EXPECT_EQ(m.cached_tokens(1), 0);
  prefill(m, 1, 32);
  // 6 full blocks of the prompt are cached (every layer: 6 x 4 pages).
  EXPECT_EQ(m.stats().blocks_cached, 6);
  EXPECT_EQ(m.stats().pages_cached, 24);

  // Same prompt: the hit stops at the last boundary <= 100 - window 8 = 92, i.e. 80.
  const auto ar = m.can_admit(spec_of(t, 5));
  EXPECT_TRUE(ar.ok);
  EXPECT_EQ(ar.cached_tokens, 80);
  ASSERT_TRUE(m.admit(2, spec_of(t, 5)));
  EXPECT_EQ(m.tokens(2), 80);
  EXPECT_EQ(m.usage(2).cached_tokens, 80);
  std::vector<LayerSlots> ls;
  EXPECT_EQ(m.next_chunk_len(2, 1 << 20), 20);
  ASSERT_TRUE(m.prepare_chunk(2, 20, &ls));
  const auto l1 = m.layers(1);
  // Full layer: the first 5 pages are seq 1's (cached); sparse layers: the temp pages.
  EXPECT_EQ(std::vector<std::int32_t>(ls[0].pages.begin(), ls[0].pages.begin() + 5),
            std::vector<std::int32_t>(l1[0].pages.begin(), l1[0].pages.begin() + 5));
  EXPECT_EQ(ls[0].valid, 80);
  for (int l = 1; l < 4; ++l) {
    EXPECT_EQ(ls[l].valid, 0);
    EXPECT_EQ(ls[l].action, LayerAction::kSelect);
    ASSERT_EQ(ls[l].temp_pages.size(), 7u);
    for (int b = 0; b < 5; ++b) EXPECT_EQ(m.pool().ref_count(ls[l].temp_pages[b]), 2);  // cache+2
  }
  EXPECT_EQ(m.pool().ref_count(ls[0].pages[0]), 3);  // cache + seq 1 + seq 2
  m.commit_step(2);
  m.check_invariants();
  // A different salt shares nothing.
  EXPECT_EQ(m.can_admit(spec_of(t, 5, "other tenant")).cached_tokens, 0);
  // A prompt whose sparse layers keep it whole (100 <= capacity) is not cacheable.
  KvCacheManager big(4, kLayout, 400, sparse(Policy::kScored, 200), PrefixCacheOptions{true, -1});
  ASSERT_TRUE(big.admit(1, spec_of(t, 5)));
  prefill(big, 1);
  EXPECT_EQ(big.stats().blocks_cached, 0);
  EXPECT_EQ(big.can_admit(spec_of(t, 5)).cached_tokens, 0);
}

TEST(PrefixCache, UnchunkedWholePromptsKeepSparseKvInPoolPagesAndHitTheRest) {
  KvCacheManager m(3, kLayout, 400, sparse(Policy::kSnapKv, 30), PrefixCacheOptions{true, -1});
  const auto t = tokens(70);
  ASSERT_TRUE(m.admit(1, spec_of(t, 3, "", /*chunked=*/false)));
  std::vector<LayerSlots> ls;
  ASSERT_TRUE(m.prepare_chunk(1, 70, &ls));
  EXPECT_EQ(ls[2].temp_pages.size(), 5u);  // not the backend's scratch: shareable
  m.commit_step(1);
  m.check_invariants();
  ASSERT_TRUE(m.admit(2, spec_of(t, 3, "", false)));
  EXPECT_EQ(m.tokens(2), 48);  // 70 - 8 = 62 -> 48
  EXPECT_EQ(m.min_final_chunk(2), 22);
  EXPECT_EQ(m.next_chunk_len(2, 100), 22);
  ASSERT_TRUE(m.prepare_chunk(2, 22, &ls));
  m.commit_step(2);
  m.check_invariants();
}

TEST(PrefixCache, UnusedBlocksAreEvictedLruOnlyWhenPagesAreNeeded) {
  // Dense model, 2 layers, 40 pages: a 64-token prompt holds 4 pages per layer.
  KvCacheManager m(2, kLayout, 40, dense(), PrefixCacheOptions{true, -1});
  for (std::uint64_t id = 1; id <= 4; ++id) {
    ASSERT_TRUE(m.admit(id, spec_of(tokens(64, static_cast<int>(id)), 1)));
    prefill(m, id);
    ASSERT_TRUE(m.free(id));
  }
  // 4 prompts x 4 blocks (the 4th block of each: 64 - 1 = 63 -> 48, still inserted when
  // computed) x 2 layers: 32 pages, all unused, all available.
  auto st = m.stats();
  EXPECT_EQ(st.pages_cached, 32);
  EXPECT_EQ(st.pages_evictable, 32);
  EXPECT_EQ(m.pages_available(), 40);
  EXPECT_EQ(st.blocks_evicted, 0u);
  // Prompt 1 again hits 3 blocks; its blocks move to the back of the LRU.
  ASSERT_TRUE(m.admit(11, spec_of(tokens(64, 1), 1)));
  EXPECT_EQ(m.tokens(11), 48);
  prefill(m, 11);
  ASSERT_TRUE(m.free(11));
  // A new 160-token prompt needs 2 x 10 = 20 pages: 8 free + 12 evicted, oldest first
  // (prompt 2's, then prompt 3's tail blocks first); prompt 1's survive.
  ASSERT_TRUE(m.admit(5, spec_of(tokens(160, 99), 1)));
  prefill(m, 5);
  m.check_invariants();
  st = m.stats();
  EXPECT_GT(st.blocks_evicted, 0u);
  EXPECT_EQ(m.can_admit(spec_of(tokens(64, 1), 1)).cached_tokens, 48);
  EXPECT_EQ(m.can_admit(spec_of(tokens(64, 2), 1)).cached_tokens, 0);
  ASSERT_TRUE(m.free(5));
  m.drop_unused_cache();
  EXPECT_EQ(m.pool().used(), 0);
}

TEST(PrefixCache, AdmissionCountsHitsThatStopBeingEvictableAndTheBudgetCaps) {
  KvCacheManager m(2, kLayout, 20, dense(), PrefixCacheOptions{true, 8});
  ASSERT_TRUE(m.admit(1, spec_of(tokens(80), 1)));
  prefill(m, 1);
  EXPECT_EQ(m.stats().pages_cached, 8);  // the budget: 4 blocks of 2 layers, not 5
  ASSERT_TRUE(m.free(1));
  EXPECT_EQ(m.pages_available(), 20);
  // The hit (4 blocks = 8 pages) comes from the cache and only the 5th block's 2 pages are
  // reserved, but the 8 cached pages stop being evictable: 2 + 8 = 10 of the 20 available.
  const auto ar = m.can_admit(spec_of(tokens(80), 1));
  EXPECT_EQ(ar.cached_tokens, 64);
  EXPECT_EQ(ar.need_pages, 10);
  ASSERT_TRUE(m.admit(2, spec_of(tokens(80), 1)));
  EXPECT_EQ(m.pages_available(), 20 - 10);
  EXPECT_EQ(m.pages_reserved(), 2);
  m.check_invariants();
  // Prefix cache off: nothing cached, nothing hit.
  KvCacheManager off(2, kLayout, 20, dense());
  ASSERT_TRUE(off.admit(1, spec_of(tokens(80), 1)));
  prefill(off, 1);
  ASSERT_TRUE(off.free(1));
  EXPECT_EQ(off.pool().used(), 0);
  EXPECT_EQ(off.can_admit(spec_of(tokens(80), 1)).cached_tokens, 0);
}

// With the cache on, a decoding sparse sequence's selecting layers have dropped the prompt's
// temp pages; the cached blocks' copies of them are the table's alone: they count as available,
// so the sequence pins no more than with the cache off (the repro: 4 layers, 1 full + 3 scored
// of capacity 64, a 1000-token prompt held the full cache of every layer, 267 pages, not 81).
TEST(PrefixCache, ADecodingSparseSequencePinsWhatItDoesWithTheCacheOff) {
  const auto t = tokens(1000);
  auto run = [&](bool cache) {
    KvCacheManager m(4, kLayout, 1000, sparse(Policy::kScored, 64), PrefixCacheOptions{cache, -1});
    EXPECT_TRUE(m.admit(1, spec_of(t, 200)));
    prefill(m, 1, 256);
    std::vector<LayerSlots> ls;
    for (int i = 0; i < 30; ++i) {
      EXPECT_TRUE(m.prepare_decode(1, &ls));
      m.commit_step(1);
    }
    m.check_invariants();
    const auto st = m.stats();
    return std::array<int, 5>{m.usage(1).pages, st.pages_used - st.pages_evictable,
                              m.pages_available(), m.can_admit(spec_of(tokens(1000, 3), 200)).ok,
                              st.pages_evictable};
  };
  const auto on = run(true), off = run(false);
  EXPECT_EQ(on[0], off[0]);      // the sequence's own pages
  EXPECT_EQ(on[0], 65 + 3 * 4);  // full layer: 1030 tokens; 3 x capacity 64
  EXPECT_EQ(on[1], off[1]);      // pages held by sequences
  EXPECT_EQ(on[2], off[2]);      // available
  EXPECT_EQ(on[3], off[3]);
  EXPECT_EQ(on[4], 3 * 62);  // the cached blocks' sparse-layer pages (62 blocks: 1000 -> 992)
  EXPECT_EQ(off[4], 0);
}

// Under page pressure a block in use gives up its table-only pages: it leaves the index, its
// users keep the pages they hold and release it later; no leak, and the prompt misses it.
TEST(PrefixCache, BlocksInUseGiveUpTheirTableOnlyPagesUnderPressure) {
  // 4 layers (1 full + 3 scored, capacity 40), 108 pages. A 200-token prompt: 13 full-layer
  // pages, 3 x 3 own sparse pages, 3 x 13 temp pages until its selection; 12 blocks cached.
  KvCacheManager m(4, kLayout, 108, sparse(Policy::kScored, 40), PrefixCacheOptions{true, -1});
  const auto a = tokens(200, 1), b = tokens(200, 2);
  ASSERT_TRUE(m.admit(1, spec_of(a, 20)));
  prefill(m, 1, 64);
  std::vector<LayerSlots> ls;
  ASSERT_TRUE(m.prepare_decode(1, &ls));
  m.commit_step(1);
  auto st = m.stats();
  EXPECT_EQ(st.blocks_cached, 12);
  EXPECT_EQ(st.pages_evictable, 3 * 12);  // sparse layers' copies: the table's alone
  EXPECT_EQ(m.usage(1).pages, 13 + 9);
  // Seq 2 (another prompt) needs 13 + 3 x (3 + 13) = 61 pages: more than the free ones.
  const int free_before = m.pool().free();
  const auto ar = m.can_admit(spec_of(b, 20));
  ASSERT_LT(free_before, ar.need_pages);
  ASSERT_TRUE(ar.ok);
  ASSERT_TRUE(m.admit(2, spec_of(b, 20)));
  prefill(m, 2, 64);  // 11 pages short: evicts 4 of seq 1's blocks, tail first
  st = m.stats();
  EXPECT_EQ(st.blocks_evicted_in_use, 4u);
  EXPECT_EQ(st.blocks_evicted, st.blocks_evicted_in_use);  // no unused block to go first
  EXPECT_EQ(st.husks, static_cast<int>(st.blocks_evicted_in_use));
  const int evicted = static_cast<int>(st.blocks_evicted_in_use);
  m.check_invariants();
  // Seq 1 goes on decoding over its own pages; its prompt now hits the head that is left.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(m.prepare_decode(1, &ls));
    m.commit_step(1);
  }
  EXPECT_EQ(m.can_admit(spec_of(a, 20)).cached_tokens, (12 - evicted) * 16);
  ASSERT_TRUE(m.free(1));
  m.check_invariants();
  EXPECT_EQ(m.stats().husks, 0);
  // A hit on a block in use whose sparse pages are table-only is charged those pages: seq 2
  // has selected, so its 12 blocks hold 3 table-only pages each.
  const int avail = m.pages_available();
  const auto hit = m.can_admit(spec_of(b, 20));
  EXPECT_EQ(hit.cached_tokens, 12 * 16);
  ASSERT_TRUE(m.admit(3, spec_of(b, 20)));
  EXPECT_EQ(avail - m.pages_available(), hit.need_pages);
  EXPECT_EQ(m.stats().pages_evictable, 4 * (12 - evicted));  // seq 1's surviving head, unused
  prefill(m, 3, 64);
  EXPECT_EQ(m.stats().pages_evictable, 4 * (12 - evicted) + 3 * 12);
  ASSERT_TRUE(m.free(2));
  ASSERT_TRUE(m.free(3));
  m.check_invariants();
  m.drop_unused_cache();
  EXPECT_EQ(m.pool().used(), 0);
  EXPECT_EQ(m.pages_reserved(), 0);
}

}  // namespace
}  // namespace strata

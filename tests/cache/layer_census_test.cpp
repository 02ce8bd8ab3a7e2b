// KvCacheManager::layer_census() and record_kept() (cache/layer_census.h): per layer the slots
// each sequence holds (distribution), pages and bytes, and the kept-position censuses of the
// sequences still in the cache.
#include "cache/layer_census.h"

#include <gtest/gtest.h>

#include "cache/kv_cache_manager.h"
#include "runtime/error.h"

namespace strata {
namespace {

const KvLayout kLayout{2, 16, 2};  // 2048-byte pages

SparsityProfile scored(int capacity) {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = 1;
  p.policy = Policy::kScored;
  p.capacity = capacity;
  p.window = 8;
  p.sinks = 4;
  return p;
}

SeqSpec spec(int prompt, int max_tokens) {
  SeqSpec s;
  s.prompt_len = prompt;
  s.max_tokens = max_tokens;
  return s;
}

void prefill(KvCacheManager& m, std::uint64_t id, int budget = 1000) {
  std::vector<LayerSlots> ls;
  while (!m.prefill_done(id)) {
    ASSERT_TRUE(m.prepare_chunk(id, m.next_chunk_len(id, budget), &ls));
    m.commit_step(id);
  }
}

void decode(KvCacheManager& m, std::uint64_t id, int n) {
  std::vector<LayerSlots> ls;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(m.prepare_decode(id, &ls));
    m.commit_step(id);
  }
}

KeptPositions census(std::int64_t sinks, std::int64_t middle, std::int64_t recent) {
  KeptPositions k;
  k.sinks = sinks;
  k.middle = middle;
  k.recent = recent;
  k.bins[0] = sinks;
  k.bins[5] = middle;
  k.bins[9] = recent;
  return k;
}

TEST(SlotDistribution, QuantilesAreSortedValuesAtFloorIndex) {
  std::vector<int> none;
  const auto e = slot_distribution(none);
  EXPECT_EQ(e.sequences, 0);
  EXPECT_EQ(e.max, 0);
  std::vector<int> v{50, 10, 25, 40, 5};
  const auto d = slot_distribution(v);  // sorted 5 10 25 40 50
  EXPECT_EQ(d.sequences, 5);
  EXPECT_EQ(d.total, 130);
  EXPECT_DOUBLE_EQ(d.mean, 26.0);
  EXPECT_EQ(d.min, 5);
  EXPECT_EQ(d.p25, 10);  // index floor(0.25 * 4) = 1
  EXPECT_EQ(d.p50, 25);
  EXPECT_EQ(d.p75, 40);
  EXPECT_EQ(d.max, 50);
  std::vector<int> one{7};
  const auto o = slot_distribution(one);
  EXPECT_EQ(o.min, 7);
  EXPECT_EQ(o.p50, 7);
  EXPECT_EQ(o.max, 7);
}

TEST(LayerCensus, SlotsPagesAndBytesPerLayer) {
  KvCacheManager m(3, kLayout, 256, scored(32));
  ASSERT_TRUE(m.admit(1, spec(10, 4)));   // fits: 10 slots in every layer
  ASSERT_TRUE(m.admit(2, spec(50, 4)));   // selects: 32 in the sparse layers, 50 in the full one
  ASSERT_TRUE(m.admit(3, spec(20, 10)));  // 20 + 5 decodes
  prefill(m, 1);
  prefill(m, 2);
  prefill(m, 3);
  decode(m, 3, 5);
  const auto c = m.layer_census();
  ASSERT_EQ(c.size(), 3u);
  const auto st = m.stats();
  for (std::size_t l = 0; l < c.size(); ++l) {
    EXPECT_EQ(c[l].rule.policy, m.rules()[l].policy);
    EXPECT_EQ(c[l].rule.capacity, m.rules()[l].capacity);
    EXPECT_EQ(c[l].pages, st.pages_per_layer[l]);
    EXPECT_EQ(c[l].bytes, static_cast<std::size_t>(c[l].pages) * 2048);
    EXPECT_EQ(c[l].slots.sequences, 3);
    EXPECT_EQ(c[l].kept_sequences, 0);
  }
  // Full layer: {10, 50, 25}; sparse layers: {10, 32, 25}.
  EXPECT_EQ(c[0].slots.min, 10);
  EXPECT_EQ(c[0].slots.p50, 25);
  EXPECT_EQ(c[0].slots.max, 50);
  EXPECT_EQ(c[0].slots.total, 85);
  EXPECT_EQ(c[0].pages, 1 + 4 + 2);
  EXPECT_EQ(c[1].slots.max, 32);
  EXPECT_EQ(c[1].slots.total, 67);
  EXPECT_DOUBLE_EQ(c[2].slots.mean, 67.0 / 3);
  EXPECT_EQ(c[2].pages, 1 + 2 + 2);
  long held = 0;
  for (const auto& l : c) held += l.slots.total;
  EXPECT_EQ(held, st.slots_held);  // the same count as the global accounting
}

TEST(LayerCensus, APromptInTempPagesCountsAsHeld) {
  KvCacheManager m(2, kLayout, 256, scored(32));
  ASSERT_TRUE(m.admit(1, spec(100, 4)));
  std::vector<LayerSlots> ls;
  ASSERT_TRUE(m.prepare_chunk(1, 40, &ls));
  m.commit_step(1);
  const auto c = m.layer_census();
  EXPECT_EQ(c[0].slots.total, 40);  // full layer: 40 positions
  EXPECT_EQ(c[1].slots.total, 40);  // sparse layer: 0 valid + the 40 prompt slots in temp pages
  EXPECT_EQ(c[1].pages, 3);         // temp pages for 40 slots
  EXPECT_EQ(m.stats().slots_held, 80);
}

TEST(LayerCensus, KeptCensusesOfTheSequencesInTheCache) {
  KvCacheManager m(3, kLayout, 256, scored(32));
  ASSERT_TRUE(m.admit(1, spec(50, 4)));
  ASSERT_TRUE(m.admit(2, spec(60, 4)));
  prefill(m, 1);
  prefill(m, 2);
  m.record_kept(1, {census(0, 50, 0), census(8, 40, 16), census(8, 40, 16)});
  m.record_kept(2, {census(0, 60, 0), census(8, 30, 26), census(8, 30, 26)});
  m.record_kept(9, {census(1, 1, 1), census(1, 1, 1), census(1, 1, 1)});  // unknown: ignored
  m.record_kept(1, {});  // empty (a backend without positions): the last census stays
  EXPECT_THROW(m.record_kept(1, {census(1, 1, 1)}), InternalError);  // wrong layer count
  auto c = m.layer_census();
  EXPECT_EQ(c[1].kept_sequences, 2);
  EXPECT_EQ(c[1].kept.sinks, 16);
  EXPECT_EQ(c[1].kept.middle, 70);
  EXPECT_EQ(c[1].kept.recent, 42);
  EXPECT_EQ(c[1].kept.bins[9], 42);
  EXPECT_EQ(c[0].kept.middle, 110);
  // A newer census replaces the old one; a freed sequence's census leaves with it.
  m.record_kept(1, {census(0, 51, 0), census(8, 39, 17), census(8, 39, 17)});
  m.free(2);
  c = m.layer_census();
  EXPECT_EQ(c[2].kept_sequences, 1);
  EXPECT_EQ(c[2].kept, census(8, 39, 17));
  m.free(1);
  c = m.layer_census();
  EXPECT_EQ(c[2].kept_sequences, 0);
  EXPECT_EQ(c[2].kept.total(), 0);
  EXPECT_EQ(c[2].slots.sequences, 0);
  m.check_invariants();
}

}  // namespace
}  // namespace strata

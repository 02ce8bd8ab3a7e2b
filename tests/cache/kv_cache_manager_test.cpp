#include "cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "runtime/error.h"

namespace strata {
namespace {

const KvLayout kLayout{8, 128, 2};

SparsityProfile llama3_default() {
  SparsityProfile p;
  p.enabled = true;
  return p;
}

// Small profile: `full` leading full layers, then `policy` with capacity c, window 8, sinks 4.
SparsityProfile small(Policy policy, int c, int full = 1) {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = full;
  p.policy = policy;
  p.capacity = c;
  p.window = 8;
  p.sinks = 4;
  return p;
}

void run_prefill(KvCacheManager& m, std::uint64_t id, int budget) {
  std::vector<LayerSlots> ls;
  while (!m.prefill_done(id)) {
    const int n = m.next_chunk_len(id, budget);
    ASSERT_GT(n, 0);
    ASSERT_TRUE(m.prepare_chunk(id, n, &ls));
    m.commit_step(id);
    m.check_invariants();
  }
}

void run_decodes(KvCacheManager& m, std::uint64_t id, int n) {
  std::vector<LayerSlots> ls;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(m.prepare_decode(id, &ls)) << "decode " << i;
    m.commit_step(id);
  }
  m.check_invariants();
}

// The DESIGN.md example end to end: Llama-3-8B default profile, 4000 + 500 tokens.
TEST(KvCacheManager, Llama3DefaultLifecycle) {
  KvCacheManager m(32, kLayout, 10000, llama3_default());
  const SeqSpec spec{4000, 501, true, std::nullopt};
  const auto ar = m.can_admit(spec);
  EXPECT_TRUE(ar.ok);
  EXPECT_EQ(ar.need_pages, 3 * 250 + 29 * (250 + 32));
  ASSERT_TRUE(m.admit(7, spec));
  EXPECT_EQ(m.pages_reserved(), 8928);
  EXPECT_EQ(m.pool().used(), 0);  // admission reserves, allocates nothing

  std::vector<LayerSlots> ls;
  // Non-final chunks: full layers get table pages, scored layers temp pages, no action.
  ASSERT_EQ(m.next_chunk_len(7, 512), 512);
  ASSERT_TRUE(m.prepare_chunk(7, 512, &ls));
  ASSERT_EQ(ls.size(), 32u);
  EXPECT_EQ(ls[0].pages.size(), 32u);
  EXPECT_TRUE(ls[0].temp_pages.empty());
  EXPECT_TRUE(ls[5].pages.empty());
  EXPECT_EQ(ls[5].temp_pages.size(), 32u);
  EXPECT_EQ(ls[5].action, LayerAction::kNone);
  m.commit_step(7);
  EXPECT_EQ(m.tokens(7), 512);
  EXPECT_EQ(m.pool().used() + m.pages_reserved(), 8928);  // drawn from the reservation
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(m.prepare_chunk(7, m.next_chunk_len(7, 512), &ls));
    m.commit_step(7);
  }
  EXPECT_EQ(m.tokens(7), 3584);
  // Final chunk: 416 tokens, kSelect on every scored layer, temp pages cover the prompt.
  ASSERT_EQ(m.next_chunk_len(7, 512), 416);
  ASSERT_TRUE(m.prepare_chunk(7, 416, &ls));
  for (int l = 0; l < 32; ++l) {
    if (l < 3) {
      EXPECT_EQ(ls[l].action, LayerAction::kNone);
      EXPECT_EQ(ls[l].pages.size(), 250u);
    } else {
      EXPECT_EQ(ls[l].action, LayerAction::kSelect) << l;
      EXPECT_EQ(ls[l].temp_pages.size(), 250u);
      EXPECT_EQ(ls[l].pages.size(), 32u);
      EXPECT_EQ(ls[l].valid, 0);
    }
  }
  EXPECT_EQ(m.pool().used(), 8928);  // the prefill peak
  EXPECT_EQ(m.pages_reserved(), 0);
  (void)m.take_released();
  m.commit_step(7);
  m.check_invariants();
  EXPECT_EQ(m.take_released().size(), 29u * 250u);  // temp pages returned
  auto st = m.layers(7);
  EXPECT_EQ(st[0].valid, 4000);
  EXPECT_EQ(st[3].valid, 512);
  EXPECT_EQ(st[3].ring_pos, 0);
  EXPECT_TRUE(st[3].temp_pages.empty());
  EXPECT_EQ(m.pool().used(), 3 * 250 + 29 * 32);

  run_decodes(m, 7, 500);
  st = m.layers(7);
  EXPECT_EQ(m.tokens(7), 4500);
  EXPECT_EQ(st[0].valid, 4500);
  EXPECT_EQ(st[0].pages.size(), 282u);
  EXPECT_EQ(st[31].valid, 512);
  EXPECT_EQ(st[31].ring_pos, 500 % 32);
  EXPECT_EQ(st[31].pages.size(), 32u);
  const auto u = m.usage(7);
  EXPECT_EQ(u.pages, 1774);
  EXPECT_EQ(u.slots_held, 28348);
  EXPECT_EQ(u.full_slots, 144000);
  EXPECT_NEAR(u.compression, 144000.0 / 28348.0, 1e-12);
  EXPECT_NEAR(u.page_compression, 9024.0 / 1774.0, 1e-12);
  const auto cs = m.stats();
  EXPECT_EQ(cs.pages_used, 1774);
  EXPECT_EQ(cs.bytes_used, 1774u * 65536u);
  EXPECT_EQ(cs.pages_per_layer[0], 282);
  EXPECT_EQ(cs.pages_per_layer[31], 32);
  EXPECT_NEAR(cs.compression, u.compression, 1e-12);

  EXPECT_TRUE(m.free(7));
  EXPECT_FALSE(m.free(7));
  EXPECT_EQ(m.pool().used(), 0);
  EXPECT_EQ(m.pages_reserved(), 0);
  m.check_invariants();
}

TEST(KvCacheManager, DecodeSlotsFollowThePolicies) {
  // scored C = 32 (ring 8), prompt 20 fits: decode fills to 32, then rings.
  KvCacheManager m(2, kLayout, 100, small(Policy::kScored, 32));
  ASSERT_TRUE(m.admit(1, SeqSpec{20, 40, true, std::nullopt}));
  run_prefill(m, 1, 64);
  auto st = m.layers(1);
  EXPECT_EQ(st[1].valid, 20);
  EXPECT_EQ(st[1].pages.size(), 2u);
  std::vector<LayerSlots> ls;
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(m.prepare_decode(1, &ls));
    EXPECT_EQ(ls[1].decode_slot(), 20 + i);
    m.commit_step(1);
  }
  ASSERT_TRUE(m.prepare_decode(1, &ls));
  EXPECT_TRUE(ls[1].ring_full());
  EXPECT_EQ(ls[1].decode_slot(), 32 - 8);  // oldest ring slot
  m.commit_step(1);
  ASSERT_TRUE(m.prepare_decode(1, &ls));
  EXPECT_EQ(ls[1].decode_slot(), 32 - 8 + 1);
  EXPECT_EQ(ls[1].pages.size(), 2u);  // fixed capacity: no growth
  m.commit_step(1);
  m.check_invariants();
}

TEST(KvCacheManager, WindowLayerRingsOverNonSinkSlotsAfterSelection) {
  KvCacheManager m(2, kLayout, 100, small(Policy::kWindow, 40));
  ASSERT_TRUE(m.admit(1, SeqSpec{100, 10, true, std::nullopt}));
  std::vector<LayerSlots> ls;
  ASSERT_EQ(m.next_chunk_len(1, 95), 92);  // leaves the final chunk its 8-token window
  ASSERT_TRUE(m.prepare_chunk(1, 92, &ls));
  m.commit_step(1);
  ASSERT_TRUE(m.prepare_chunk(1, 8, &ls));
  EXPECT_EQ(ls[1].action, LayerAction::kSelect);
  m.commit_step(1);
  ASSERT_TRUE(m.prepare_decode(1, &ls));
  EXPECT_EQ(ls[1].rule.ring, 36);
  EXPECT_EQ(ls[1].decode_slot(), 4);  // first non-sink slot
  m.commit_step(1);
  m.check_invariants();
}

TEST(KvCacheManager, ChunkRulesAreEnforced) {
  KvCacheManager m(2, kLayout, 100, small(Policy::kScored, 32));
  ASSERT_TRUE(m.admit(1, SeqSpec{100, 10, true, std::nullopt}));
  EXPECT_EQ(m.min_final_chunk(1), 8);
  EXPECT_EQ(m.next_chunk_len(1, 99), 92);
  EXPECT_EQ(m.next_chunk_len(1, 100), 100);
  std::vector<LayerSlots> ls;
  EXPECT_THROW(m.prepare_chunk(1, 95, &ls), InternalError);   // leaves 5 < window
  EXPECT_THROW(m.prepare_chunk(1, 101, &ls), InternalError);  // past the prompt
  EXPECT_THROW(m.prepare_decode(1, &ls), InternalError);      // prompt not done
  EXPECT_THROW(m.commit_step(1), InternalError);              // nothing prepared
  EXPECT_EQ(m.pool().used(), 0);                              // failed calls allocate nothing
  ASSERT_TRUE(m.prepare_chunk(1, 90, &ls));
  m.commit_step(1);
  EXPECT_EQ(m.next_chunk_len(1, 5), 2);  // 10 left: 2 now, the final 8 later
  ASSERT_TRUE(m.prepare_chunk(1, 2, &ls));
  m.commit_step(1);
  EXPECT_EQ(m.next_chunk_len(1, 5), 0);  // the final 8 cannot be split
  EXPECT_EQ(m.next_chunk_len(1, 10), 8);
  // A prompt shorter than every capacity has no final-chunk constraint.
  ASSERT_TRUE(m.admit(2, SeqSpec{20, 10, true, std::nullopt}));
  EXPECT_EQ(m.min_final_chunk(2), 1);
  EXPECT_EQ(m.next_chunk_len(2, 19), 19);
  EXPECT_THROW(m.prepare_chunk(99, 1, &ls), InternalError);  // unknown sequence
  m.check_invariants();
}

TEST(KvCacheManager, UnchunkedPromptUsesNoTempPages) {
  KvCacheManager m(2, kLayout, 100, small(Policy::kScored, 32));
  const SeqSpec spec{100, 1, false, std::nullopt};
  EXPECT_EQ(m.can_admit(spec).need_pages, 7 + 2);
  ASSERT_TRUE(m.admit(1, spec));
  EXPECT_EQ(m.min_final_chunk(1), 100);
  EXPECT_EQ(m.next_chunk_len(1, 99), 0);
  std::vector<LayerSlots> ls;
  EXPECT_THROW(m.prepare_chunk(1, 50, &ls), InternalError);
  ASSERT_TRUE(m.prepare_chunk(1, 100, &ls));
  EXPECT_EQ(ls[1].action, LayerAction::kSelect);
  EXPECT_TRUE(ls[1].temp_pages.empty());  // backend scratch
  EXPECT_EQ(ls[1].pages.size(), 2u);
  m.commit_step(1);
  EXPECT_EQ(m.layers(1)[1].valid, 32);
  m.check_invariants();
}

TEST(KvCacheManager, SnapKvReservesGrowthAtAdmission) {
  // No full layers: every page this sequence writes within max_tokens is reserved.
  auto p = small(Policy::kSnapKv, 64, 0);
  const SeqSpec spec{100, 40, true, std::nullopt};
  // Per layer: 7 temp pages + pages_for_slots(64 + 39) = 7.
  KvCacheManager m(2, kLayout, 28, p);
  EXPECT_EQ(m.can_admit(spec).need_pages, 28);
  ASSERT_TRUE(m.admit(1, spec));
  EXPECT_FALSE(m.can_admit(SeqSpec{1, 1, true, std::nullopt}).ok);  // all reserved
  EXPECT_FALSE(m.admit(2, SeqSpec{1, 1, true, std::nullopt}));
  run_prefill(m, 1, 50);
  EXPECT_EQ(m.pool().free(), 28 - 2 * 4);               // temp pages came back; 4 pages hold C = 64
  EXPECT_EQ(m.pages_reserved(), 2 * 3);                 // 3 more per layer for the 39 decode writes
  ASSERT_TRUE(m.admit(2, SeqSpec{100, 40, false, p}));  // 2 x 7 pages: takes every free page
  run_decodes(m, 1, 39);
  EXPECT_EQ(m.layers(1)[0].valid, 64 + 39);
  EXPECT_EQ(m.usage(1).reserved_pages, 0);
  // Decoding past max_tokens needs a page nobody reserved: none free.
  for (int i = 0; i < 9; ++i) {  // 103 -> 112 fits the 7th page
    std::vector<LayerSlots> ls;
    ASSERT_TRUE(m.prepare_decode(1, &ls));
    m.commit_step(1);
  }
  std::vector<LayerSlots> ls;
  const int used = m.pool().used();
  EXPECT_FALSE(m.prepare_decode(1, &ls));
  EXPECT_EQ(m.pool().used(), used);  // all or nothing
  m.check_invariants();
}

TEST(KvCacheManager, FullLayerGrowthFailsThenPreemptionFreesEverything) {
  SparsityProfile off;  // every layer full
  KvCacheManager m(2, kLayout, 10, off);
  ASSERT_TRUE(m.admit(1, SeqSpec{32, 100, true, std::nullopt}));  // 2 pages per layer
  ASSERT_TRUE(m.admit(2, SeqSpec{32, 100, true, std::nullopt}));
  EXPECT_TRUE(m.can_admit(SeqSpec{16, 1, true, std::nullopt}).ok);   // 2 pages left
  EXPECT_FALSE(m.can_admit(SeqSpec{17, 1, true, std::nullopt}).ok);  // needs 4
  EXPECT_TRUE(m.can_admit(SeqSpec{1000, 1, true, std::nullopt}).never_fits);
  run_prefill(m, 1, 32);
  run_prefill(m, 2, 32);
  std::vector<LayerSlots> ls;
  ASSERT_TRUE(m.prepare_decode(1, &ls));  // slot 32 starts page 3 of each layer: 2 free pages
  EXPECT_EQ(ls[0].pages.size(), 3u);
  m.commit_step(1);
  EXPECT_EQ(m.pool().free(), 0);
  EXPECT_FALSE(m.prepare_decode(2, &ls));  // out of pages: the batcher preempts
  m.check_invariants();
  EXPECT_TRUE(m.preempt(1));
  EXPECT_EQ(m.take_released().size(), 6u);
  ASSERT_TRUE(m.prepare_decode(2, &ls));
  m.commit_step(2);
  // Recompute: prompt + output so far comes back as a longer prompt.
  EXPECT_FALSE(m.admit(1, SeqSpec{34, 98, true, std::nullopt}));  // 2*3 pages, 2 available
  m.free(2);
  ASSERT_TRUE(m.admit(1, SeqSpec{34, 98, true, std::nullopt}));
  run_prefill(m, 1, 64);
  EXPECT_EQ(m.tokens(1), 34);
  m.check_invariants();
}

TEST(KvCacheManager, ReprepareWithoutCommitKeepsPagesOnce) {
  KvCacheManager m(2, kLayout, 50, small(Policy::kScored, 32));
  ASSERT_TRUE(m.admit(1, SeqSpec{100, 5, true, std::nullopt}));
  std::vector<LayerSlots> ls;
  ASSERT_TRUE(m.prepare_chunk(1, 92, &ls));
  const int used = m.pool().used();
  ASSERT_TRUE(m.prepare_chunk(1, 40, &ls));  // the step was dropped; a smaller chunk instead
  EXPECT_EQ(m.pool().used(), used);
  m.commit_step(1);
  EXPECT_EQ(m.tokens(1), 40);
  m.check_invariants();
  EXPECT_THROW(m.admit(1, SeqSpec{1, 1, true, std::nullopt}), InternalError);
}

TEST(KvCacheManager, ProfilesAreVersionedAndValidated) {
  KvCacheManager m(4, kLayout, 200, small(Policy::kScored, 32));
  EXPECT_EQ(m.profile_version(), 1u);
  ASSERT_TRUE(m.admit(1, SeqSpec{10, 5, true, std::nullopt}));
  auto bad = small(Policy::kScored, 12);  // < sinks + window + 1 = 13
  try {
    m.set_profile(bad);
    FAIL() << "bad profile accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "sparsity.capacity");
  }
  EXPECT_EQ(m.profile_version(), 1u);  // nothing changed
  EXPECT_EQ(m.rules()[1].capacity, 32);
  EXPECT_EQ(m.set_profile(small(Policy::kWindow, 48)), 2u);
  ASSERT_TRUE(m.admit(2, SeqSpec{10, 5, true, std::nullopt}));
  EXPECT_EQ(m.seq_profile_version(1), 1u);
  EXPECT_EQ(m.seq_profile_version(2), 2u);
  EXPECT_EQ(m.layers(1)[1].rule.policy, Policy::kScored);
  EXPECT_EQ(m.layers(2)[1].rule.policy, Policy::kWindow);
  EXPECT_EQ(m.layers(2)[1].rule.capacity, 48);
  // Per-request override.
  ASSERT_TRUE(m.admit(3, SeqSpec{10, 5, true, small(Policy::kSnapKv, 20, 2)}));
  EXPECT_EQ(m.seq_profile_version(3), 0u);
  EXPECT_EQ(m.layers(3)[1].rule.policy, Policy::kFull);
  EXPECT_EQ(m.layers(3)[2].rule.policy, Policy::kSnapKv);
  EXPECT_THROW(m.can_admit(SeqSpec{10, 5, true, bad}), ConfigError);
  EXPECT_THROW(m.can_admit(SeqSpec{0, 5, true, std::nullopt}), InvalidRequest);
  m.check_invariants();
}

TEST(KvCacheManager, LiveShrinkEvictsAtTheNextStep) {
  KvCacheManager m(2, kLayout, 200, small(Policy::kScored, 128));
  ASSERT_TRUE(m.admit(1, SeqSpec{300, 50, true, std::nullopt}));  // selects: valid 128
  ASSERT_TRUE(m.admit(2, SeqSpec{20, 50, true, std::nullopt}));   // short: valid 20
  ASSERT_TRUE(m.admit(3, SeqSpec{300, 50, true, small(Policy::kScored, 128)}));  // override
  ASSERT_TRUE(m.admit(4, SeqSpec{300, 50, true, std::nullopt}));                 // still in prefill
  run_prefill(m, 1, 512);
  run_prefill(m, 2, 512);
  run_prefill(m, 3, 512);
  run_decodes(m, 1, 3);
  EXPECT_EQ(m.layers(1)[1].pages.size(), 8u);
  const int reserved = m.pages_reserved();
  EXPECT_EQ(m.set_profile(small(Policy::kScored, 64), /*shrink_running=*/true), 2u);
  EXPECT_EQ(m.pages_reserved(), reserved);  // nothing happens before the next step
  (void)m.take_released();
  std::vector<LayerSlots> ls;
  ASSERT_TRUE(m.prepare_decode(1, &ls));
  EXPECT_EQ(ls[0].action, LayerAction::kNone);
  EXPECT_EQ(ls[1].action, LayerAction::kShrink);
  EXPECT_EQ(ls[1].shrink_to, 64);
  EXPECT_EQ(ls[1].rule.capacity, 128);  // the step itself still runs on the old layout
  m.commit_step(1);
  auto st = m.layers(1)[1];
  EXPECT_EQ(st.rule.capacity, 64);
  EXPECT_EQ(st.valid, 64);
  EXPECT_EQ(st.ring_pos, 0);
  EXPECT_EQ(st.pages.size(), 4u);
  EXPECT_EQ(m.take_released().size(), 4u);
  ASSERT_TRUE(m.prepare_decode(1, &ls));
  EXPECT_EQ(ls[1].action, LayerAction::kNone);  // applied once
  EXPECT_EQ(ls[1].decode_slot(), 64 - 8);
  m.commit_step(1);
  // Short sequence: the rule is switched without compaction.
  ASSERT_TRUE(m.prepare_decode(2, &ls));
  EXPECT_EQ(ls[1].action, LayerAction::kNone);
  EXPECT_EQ(ls[1].rule.capacity, 64);
  m.commit_step(2);
  // Override keeps its capacity.
  ASSERT_TRUE(m.prepare_decode(3, &ls));
  EXPECT_EQ(ls[1].action, LayerAction::kNone);
  EXPECT_EQ(ls[1].rule.capacity, 128);
  m.commit_step(3);
  // Prefilling sequence: selects at the old capacity, shrinks at its first decode.
  run_prefill(m, 4, 512);
  EXPECT_EQ(m.layers(4)[1].valid, 128);
  ASSERT_TRUE(m.prepare_decode(4, &ls));
  EXPECT_EQ(ls[1].action, LayerAction::kShrink);
  m.commit_step(4);
  EXPECT_EQ(m.layers(4)[1].valid, 64);
  m.check_invariants();
  // Without shrink_running, running sequences keep their capacity.
  m.set_profile(small(Policy::kScored, 32), false);
  ASSERT_TRUE(m.prepare_decode(1, &ls));
  EXPECT_EQ(ls[1].action, LayerAction::kNone);
  m.commit_step(1);
  EXPECT_EQ(m.layers(1)[1].rule.capacity, 64);
  m.check_invariants();
}

}  // namespace
}  // namespace strata

// The token position the CPU backend records next to every slot (runtime/cpu/kv_pool.h) and
// the census built from it (cpu::kept_positions, SeqStep::report_kept). The oracle is the
// slot's own K: every input row gets distinct random K, so the K a slot holds names the
// position it came from; after each selection, ring replacement and shrink the recorded
// position must name the same one.
#include "runtime/kept_positions.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "runtime/cpu/attention.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/step_plan_check.h"
#include "tests/runtime/cpu_test_util.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata {
namespace {

constexpr int kHd = 8, kGroup = 2, kHeads = 2;

// Random Q/K/V rows of every position, per KV head, and the attend() plumbing of one step.
struct Inputs {
  explicit Inputs(int positions, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int h = 0; h < kHeads; ++h) {
      q[h].resize(static_cast<std::size_t>(positions) * kGroup * kHd);
      k[h].resize(static_cast<std::size_t>(positions) * kHd);
      v[h].resize(static_cast<std::size_t>(positions) * kHd);
      for (auto* a : {&q[h], &k[h], &v[h]})
        for (auto& x : *a) x = n(rng);
    }
  }
  // Runs rows [start, start + n) of every head on `ls` (state before the step).
  void run(cpu::KvPool& pool, const LayerSlots& ls, int start, int n, int prompt_len,
           bool prefill) {
    std::vector<float> out(static_cast<std::size_t>(n) * kGroup * kHd);
    std::vector<double> lse(static_cast<std::size_t>(n) * kGroup);
    for (int h = 0; h < kHeads; ++h) {
      std::vector<float> sk(static_cast<std::size_t>(prompt_len) * kHd), sv(sk.size());
      cpu::AttnArgs a;
      a.slots = &ls;
      a.start = start;
      a.n = n;
      a.prompt_len = prompt_len;
      a.prefill = prefill;
      a.head_dim = kHd;
      a.group = kGroup;
      a.scale = 1.0f / std::sqrt(static_cast<float>(kHd));
      a.q = &q[h][static_cast<std::size_t>(start) * kGroup * kHd];
      a.k = &k[h][static_cast<std::size_t>(start) * kHd];
      a.v = &v[h][static_cast<std::size_t>(start) * kHd];
      a.q_stride = kGroup * kHd;
      a.kv_stride = kHd;
      a.out = out.data();
      a.out_stride = kGroup * kHd;
      a.lse = lse.data();
      a.lse_stride = kGroup;
      a.scratch_k = reinterpret_cast<std::byte*>(sk.data());  // an fp32 pool's scratch
      a.scratch_v = reinterpret_cast<std::byte*>(sv.data());
      cpu::attend(pool, h, a);
    }
  }
  std::vector<float> q[kHeads], k[kHeads], v[kHeads];
};

// Positions of the valid slots of head h, each checked against the K the slot holds.
std::vector<std::int32_t> positions(cpu::KvPool& pool, const Inputs& in, const LayerSlots& ls,
                                    int h, int tokens) {
  std::vector<std::int32_t> out;
  for (int j = 0; j < ls.valid; ++j) {
    const int page = ls.pages[static_cast<std::size_t>(j / kBlockSize)];
    const std::int32_t p = *pool.position(page, h, j % kBlockSize);
    EXPECT_TRUE(p >= 0 && p < tokens) << "slot " << j << " position " << p;
    if (p < 0 || p >= tokens) continue;
    EXPECT_EQ(std::memcmp(pool.k(page, h, j % kBlockSize),
                          &in.k[h][static_cast<std::size_t>(p) * kHd], sizeof(float) * kHd),
              0)
        << "slot " << j << " records position " << p << " but holds another token's K";
    out.push_back(p);
  }
  return out;
}

LayerRule rule(Policy p, int capacity, int window, int sinks) {
  auto r = test::sparse_profile(p, 0, capacity, window, sinks).resolve(1);
  return r[0];
}

TEST(KeptPositions, ScoredSelectionRingAndShrinkRecordTheTruePosition) {
  const int L = 40, C = 24, alpha = 4, sinks = 4, decodes = 80;
  cpu::KvPool pool(KvLayout{kHeads, kHd, 4}, 8);
  Inputs in(L + decodes, 11);
  LayerSlots ls{rule(Policy::kScored, C, alpha, sinks)};
  ls.pages = {3, 5};  // pages_for_slots(C); scratch holds the prompt (whole in one step)
  ls.action = LayerAction::kSelect;
  in.run(pool, ls, 0, L, L, true);
  advance_layer(ls, LayerStep{L, true, L, true, 0});
  ls.action = LayerAction::kNone;
  for (int h = 0; h < kHeads; ++h) {
    const auto pos = positions(pool, in, ls, h, L);
    ASSERT_EQ(pos.size(), static_cast<std::size_t>(C));
    for (int j = 0; j < sinks; ++j) EXPECT_EQ(pos[j], j);                          // sinks first
    for (int j = 0; j < alpha; ++j) EXPECT_EQ(pos[C - alpha + j], L - alpha + j);  // the window
    EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
    EXPECT_EQ(std::set<std::int32_t>(pos.begin(), pos.end()).size(), pos.size());
  }
  // Decode: new tokens enter the ring, leavers replace selected slots or are dropped.
  int replaced = 0;
  for (int t = L; t < L + decodes; ++t) {
    const bool shrink = t == L + decodes - 10;
    if (shrink) ls.action = LayerAction::kShrink, ls.shrink_to = 16;
    in.run(pool, ls, t, 1, L, false);
    advance_layer(ls, LayerStep{1, false, L, false, shrink ? 16 : 0});
    ls.action = LayerAction::kNone;
    const int tokens = t + 1;
    for (int h = 0; h < kHeads; ++h) {
      const auto pos = positions(pool, in, ls, h, tokens);
      ASSERT_EQ(pos.size(), static_cast<std::size_t>(ls.valid));
      EXPECT_EQ(std::set<std::int32_t>(pos.begin(), pos.end()).size(), pos.size());
      for (int j = 0; j < sinks; ++j) EXPECT_EQ(pos[j], j);
      // The ring holds the last α tokens, whatever its rotation.
      std::set<std::int32_t> ring(pos.end() - alpha, pos.end());
      for (int p = tokens - alpha; p < tokens; ++p) EXPECT_TRUE(ring.count(p)) << p;
      if (h == 0)
        for (int j = sinks; j < ls.valid - alpha; ++j) replaced += pos[j] >= L;
    }
    const KeptPositions c = cpu::kept_positions(pool, ls, tokens);
    EXPECT_EQ(c.sinks, kHeads * sinks);
    EXPECT_EQ(c.recent, kHeads * alpha);
    EXPECT_EQ(c.middle, kHeads * (ls.valid - sinks - alpha));
    std::int64_t binned = 0;
    for (auto b : c.bins) binned += b;
    EXPECT_EQ(binned, c.total());
    EXPECT_EQ(c.bins[kPositionBins - 1] >= kHeads * alpha, true);  // the ring: last tenth
  }
  EXPECT_EQ(ls.valid, 16);  // shrunk
  EXPECT_GT(replaced, 0) << "no leaver replaced a selected slot: the ring path is untested";
}

// The counting rule both backends share (runtime/kept_positions.h; the CUDA backend counts its
// position pool with it): classes by the layer's rule, bins by floor(10 p / tokens); a full
// layer is all middle.
TEST(KeptPositions, CounterClassesAndBins) {
  KeptCounter c(rule(Policy::kScored, 16, 4, 4), 100);  // recent: positions >= 96
  for (std::int32_t p : {0, 3, 4, 50, 95, 96, 99}) c.add(p);
  c.add(10, 3);  // three heads hold position 10
  const KeptPositions& k = c.result();
  EXPECT_EQ(k.sinks, 2);   // 0, 3
  EXPECT_EQ(k.recent, 2);  // 96, 99
  EXPECT_EQ(k.middle, 6);  // 4, 50, 95, 10 x 3
  const std::array<std::int64_t, kPositionBins> bins{3, 3, 0, 0, 0, 1, 0, 0, 0, 3};
  EXPECT_EQ(k.bins, bins);
  KeptCounter f(LayerRule{}, 20);
  f.add_full(20, 2);  // slot p = position p, two heads
  EXPECT_EQ(f.result().middle, 40);
  EXPECT_EQ(f.result().sinks + f.result().recent, 0);
  for (int b = 0; b < kPositionBins; ++b) EXPECT_EQ(f.result().bins[b], 4) << b;
}

TEST(KeptPositions, WindowKeepsSinksAndTheLatestTokens) {
  const int L = 50, C = 20, sinks = 4;
  cpu::KvPool pool(KvLayout{kHeads, kHd, 4}, 8);
  Inputs in(L + 30, 5);
  LayerSlots ls{rule(Policy::kWindow, C, 8, sinks)};
  ls.pages = {0, 1};
  ls.action = LayerAction::kSelect;
  in.run(pool, ls, 0, L, L, true);
  advance_layer(ls, LayerStep{L, true, L, true, 0});
  ls.action = LayerAction::kNone;
  for (int t = L; t <= L + 30; ++t) {
    if (t > L) {
      in.run(pool, ls, t - 1, 1, L, false);
      advance_layer(ls, LayerStep{1, false, L, false, 0});
    }
    const int tokens = t;
    for (int h = 0; h < kHeads; ++h) {
      const auto pos = positions(pool, in, ls, h, tokens);
      std::set<std::int32_t> got(pos.begin(), pos.end()), want;
      for (int p = 0; p < sinks; ++p) want.insert(p);
      for (int p = tokens - (C - sinks); p < tokens; ++p) want.insert(p);
      EXPECT_EQ(got, want) << "after " << tokens << " tokens";
    }
    const KeptPositions c = cpu::kept_positions(pool, ls, tokens);
    EXPECT_EQ(c.sinks, kHeads * sinks);
    EXPECT_EQ(c.recent, kHeads * 8);  // the last α = 8 of the C - sinks latest
    EXPECT_EQ(c.middle, kHeads * (C - sinks - 8));
  }
}

TEST(KeptPositions, DirectPrefillAndFullLayersBinByPosition) {
  cpu::KvPool pool(KvLayout{kHeads, kHd, 4}, 8);
  Inputs in(20, 3);
  LayerSlots ls{rule(Policy::kScored, 64, 4, 2)};  // the prompt fits: position p at slot p
  ls.pages = {6, 7};
  in.run(pool, ls, 0, 20, 20, true);
  advance_layer(ls, LayerStep{20, true, 20, false, 0});
  for (int h = 0; h < kHeads; ++h) {
    const auto pos = positions(pool, in, ls, h, 20);
    for (int j = 0; j < 20; ++j) EXPECT_EQ(pos[j], j);
  }
  const KeptPositions c = cpu::kept_positions(pool, ls, 20);
  EXPECT_EQ(c.sinks, 2 * kHeads);
  EXPECT_EQ(c.recent, 4 * kHeads);
  EXPECT_EQ(c.middle, 14 * kHeads);
  for (int b = 0; b < kPositionBins; ++b) EXPECT_EQ(c.bins[b], 2 * kHeads) << b;  // 2 per tenth
  // A full layer: counted without reading, every slot "middle", binned by slot.
  LayerSlots full{LayerRule{}};
  full.valid = 10;
  const KeptPositions f = cpu::kept_positions(pool, full, 10);
  EXPECT_EQ(f.sinks + f.recent, 0);
  EXPECT_EQ(f.middle, 10 * kHeads);
  for (int b = 0; b < kPositionBins; ++b) EXPECT_EQ(f.bins[b], kHeads);
  EXPECT_EQ(cpu::kept_positions(pool, full, 0).total(), 0);
}

// Through Backend::step: report_kept fills one census per layer, nothing without it.
TEST(KeptPositions, BackendReportsACensusPerLayerWhenAsked) {
  auto w = test::tiny();
  CpuBackendOptions o;
  o.threads = 2;
  o.kv_bytes = 16ull << 20;
  auto be = make_cpu_backend(w, o);
  const auto& c = w->config();
  const int kv = c.num_key_value_heads;
  const auto rules =
      test::sparse_profile(Policy::kScored, 1, 24, 4, 4).resolve(c.num_hidden_layers);
  test::PageAlloc pages(be->info().num_pages);
  test::Seq s(1, test::tokens(40, c.vocab_size, 9), rules);
  auto pre = s.prefill(40, pages);
  pre.report_kept = true;
  const auto r = be->step(test::plan_of({pre}));
  s.after(pre);
  ASSERT_EQ(r.seqs[0].kept.size(), rules.size());
  for (std::size_t l = 0; l < rules.size(); ++l) {
    const auto& k = r.seqs[0].kept[l];
    if (!rules[l].sparse()) {
      EXPECT_EQ(k.middle, 40 * kv) << l;
      EXPECT_EQ(k.sinks + k.recent, 0) << l;
    } else {
      EXPECT_EQ(k.total(), 24 * kv) << l;
      EXPECT_EQ(k.sinks, 4 * kv) << l;
      EXPECT_EQ(k.recent, 4 * kv) << l;
    }
  }
  auto dec =
      s.decode(test::argmax(r.seqs[0].logits.data() + 39 * c.vocab_size, c.vocab_size), pages);
  const auto r2 = be->step(test::plan_of({dec}));
  EXPECT_TRUE(r2.seqs[0].kept.empty());
}

}  // namespace
}  // namespace strata

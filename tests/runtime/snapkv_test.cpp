#include "runtime/snapkv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/cpu/attention.h"
#include "runtime/cpu/kv_pool.h"
#include "runtime/error.h"
#include "runtime/step_plan_check.h"

namespace strata {
namespace {

LayerRule rule(Policy p, int capacity, int window, int sinks, PoolKind pool = PoolKind::kMax,
               int kernel = 7) {
  LayerRule r;
  r.policy = p;
  r.capacity = capacity;
  r.window = window;
  r.sinks = sinks;
  r.ring = p == Policy::kScored ? window : p == Policy::kWindow ? capacity - sinks : 0;
  r.pool = pool;
  r.pool_kernel = kernel;
  return r;
}

std::vector<float> randn(std::size_t n, std::mt19937_64& g, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// ---- scores vs a brute-force fp64 softmax -------------------------------------------

TEST(SnapKv, ScoresMatchBruteForceSoftmax) {
  std::mt19937_64 g(1);
  const int hd = 16;
  const double scale = 1 / std::sqrt(16.0);
  for (int group : {1, 4, 8}) {
    for (int L : {20, 48, 97}) {  // shorter than, equal to, longer than a capacity of 48
      const int alpha = 8;
      const auto q = randn(static_cast<std::size_t>(alpha) * group * hd, g, 1.5f);
      const auto k = randn(static_cast<std::size_t>(L) * hd, g, 1.5f);
      // Brute force: full softmax of each window query over the keys it sees.
      std::vector<double> lse(static_cast<std::size_t>(alpha) * group), want(L, 0.0);
      for (int w = 0; w < alpha; ++w) {
        const int pos = L - alpha + w;
        for (int h = 0; h < group; ++h) {
          std::vector<double> l(pos + 1);
          double sum = 0;
          for (int j = 0; j <= pos; ++j) {
            for (int d = 0; d < hd; ++d)
              l[j] += static_cast<double>(q[(w * group + h) * hd + d]) * k[j * hd + d];
            l[j] *= scale;
            sum += std::exp(l[j]);
          }
          lse[w * group + h] = std::log(sum);
          for (int j = 0; j <= pos; ++j) want[j] += std::exp(l[j]) / sum;
        }
      }
      std::vector<double> S(L);
      snapkv::window_scores(q.data(), k.data(), lse.data(), L, alpha, group, hd, scale, S.data());
      double total = 0;
      for (int i = 0; i < L; ++i) {
        EXPECT_NEAR(S[i], want[i], 1e-9 * std::abs(want[i]))
            << "group " << group << " L " << L << " i " << i;
        total += S[i];
      }
      EXPECT_NEAR(total, alpha * group, 1e-9 * alpha * group);  // every query's mass is 1
      // The fp32 variant agrees to fp32 accuracy.
      std::vector<float> lse32(lse.begin(), lse.end()), S32(L);
      snapkv::window_scores_f32(q.data(), k.data(), lse32.data(), L, alpha, group, hd,
                                static_cast<float>(scale), S32.data());
      for (int i = 0; i < L; ++i) EXPECT_NEAR(S32[i], want[i], 1e-4 * want[i] + 1e-6);
    }
  }
}

// ---- pooling ---------------------------------------------------------------------------

TEST(SnapKv, PoolingEdgesCountOnlyRealPositions) {
  const std::vector<double> s = {1, 5, 2, 0, 3};
  EXPECT_EQ(snapkv::pool(s, PoolKind::kMax, 3), (std::vector<double>{5, 5, 5, 3, 3}));
  const auto avg = snapkv::pool(s, PoolKind::kAvg, 3);
  const std::vector<double> want = {3.0, 8.0 / 3, 7.0 / 3, 5.0 / 3, 1.5};
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(avg[i], want[i]);
  EXPECT_EQ(snapkv::pool(s, PoolKind::kMax, 1), s);
  // Kernel wider than the range: every output pools the whole range.
  EXPECT_EQ(snapkv::pool(s, PoolKind::kMax, 11), (std::vector<double>(5, 5.0)));
  EXPECT_DOUBLE_EQ(snapkv::pool(s, PoolKind::kAvg, 11)[0], 11.0 / 5);
  EXPECT_THROW(snapkv::pool(s, PoolKind::kMax, 4), InternalError);
}

// ---- selection -------------------------------------------------------------------------

std::vector<int> brute_top(const std::vector<double>& v, int k) {
  std::vector<int> out;
  std::vector<bool> used(v.size());
  for (int n = 0; n < k; ++n) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(v.size()); ++i)
      if (!used[i] && (best < 0 || v[i] > v[best])) best = i;  // first max = lowest index
    used[best] = true;
    out.push_back(best);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SnapKv, TopKMatchesBruteForceWithTies) {
  std::mt19937_64 g(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(g() % 60);
    std::vector<double> v(n);
    for (auto& x : v) x = static_cast<double>(g() % 6);  // many ties
    const int k = static_cast<int>(g() % (n + 1));
    ASSERT_EQ(snapkv::top_k(v, k), brute_top(v, k)) << "trial " << trial;
  }
  EXPECT_EQ(snapkv::top_k(std::vector<double>{1, 2, 2, 2, 1}, 2), (std::vector<int>{1, 2}));
}

TEST(SnapKv, SelectKeepsSinksTopAndWindow) {
  // L = 20, C = 10, sinks 2, window 3: select 5 of [2, 17).
  const auto r = rule(Policy::kSnapKv, 10, 3, 2, PoolKind::kMax, 1);
  std::vector<double> S(20, 1.0);
  S[0] = S[1] = 100;  // sinks: huge, but never pooled into their neighbours
  for (int i : {4, 9, 11, 12, 16}) S[i] = 2.0 + i;
  S[18] = 50;  // window: kept anyway
  auto sel = snapkv::select_prompt(S, 20, r);
  EXPECT_EQ(sel.positions, (std::vector<std::int32_t>{0, 1, 4, 9, 11, 12, 16, 17, 18, 19}));
  EXPECT_FLOAT_EQ(sel.scores[2], 6.0f / 3);    // selected: S'/α
  EXPECT_FLOAT_EQ(sel.scores[0], 100.0f / 3);  // sink: S/α
  EXPECT_FLOAT_EQ(sel.scores[8], 50.0f / 3);   // window: S/α
  // Ties: all equal selectable scores keep the lowest positions.
  std::vector<double> flat(20, 1.0);
  sel = snapkv::select_prompt(flat, 20, r);
  EXPECT_EQ(sel.positions, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 17, 18, 19}));
  // Max pooling (kernel 3) spreads a peak to both neighbours, masked at the sink edge.
  const auto r3 = rule(Policy::kSnapKv, 8, 3, 2, PoolKind::kMax, 3);
  std::vector<double> peak(20, 1.0);
  peak[1] = 1000;  // a sink next to the first selectable position: must not leak
  peak[10] = 9;
  sel = snapkv::select_prompt(peak, 20, r3);  // select 3 of [2, 17)
  EXPECT_EQ(sel.positions, (std::vector<std::int32_t>{0, 1, 9, 10, 11, 17, 18, 19}));
  // Avg pooling at the edge divides by the real count: S[16] alone in the last window of
  // [2,17) would be diluted by a padded zero otherwise.
  const auto ra = rule(Policy::kSnapKv, 6, 3, 2, PoolKind::kAvg, 3);
  std::vector<double> edge(20, 0.0);
  edge[15] = 3, edge[16] = 3;  // pooled: [15] = 2, [16] = 3 (two real positions), [14] = 1
  sel = snapkv::select_prompt(edge, 20, ra);  // select 1
  EXPECT_EQ(sel.positions, (std::vector<std::int32_t>{0, 1, 16, 17, 18, 19}));
  EXPECT_FLOAT_EQ(sel.scores[2], 3.0f / 3);
  EXPECT_THROW(snapkv::select_prompt(flat, 10, r), InternalError);  // L <= C: direct prefill
}

TEST(SnapKv, SelectMatchesBruteForceOnRandomScores) {
  std::mt19937_64 g(9);
  for (PoolKind pk : {PoolKind::kMax, PoolKind::kAvg}) {
    for (int trial = 0; trial < 50; ++trial) {
      const int L = 40 + static_cast<int>(g() % 60), C = 20 + static_cast<int>(g() % 15);
      const auto r = rule(Policy::kScored, C, 5, 3, pk, 5);
      std::vector<double> S(L);
      for (auto& x : S) x = static_cast<double>(g() % 8);
      // Brute force pooled scores and kept set.
      std::vector<double> pooled;
      for (int i = 3; i < L - 5; ++i) {
        double m = -1e300, sum = 0;
        int cnt = 0;
        for (int j = i - 2; j <= i + 2; ++j)
          if (j >= 3 && j < L - 5) m = std::max(m, S[j]), sum += S[j], ++cnt;
        pooled.push_back(pk == PoolKind::kMax ? m : sum / cnt);
      }
      std::vector<std::int32_t> want = {0, 1, 2};
      for (int j : brute_top(pooled, C - 5 - 3)) want.push_back(3 + j);
      for (int i = L - 5; i < L; ++i) want.push_back(i);
      ASSERT_EQ(snapkv::select_prompt(S, L, r).positions, want);
    }
  }
}

TEST(SnapKv, WindowPolicyIsStreamingLlm) {
  const auto r = rule(Policy::kWindow, 12, 4, 4);
  std::vector<double> S(30, 1.0);
  S[10] = 1e9;  // scores do not matter
  const auto sel = snapkv::select_prompt(S, 30, r);
  EXPECT_EQ(sel.positions, (std::vector<std::int32_t>{0, 1, 2, 3, 22, 23, 24, 25, 26, 27, 28, 29}));
}

// ---- decode rules ----------------------------------------------------------------------

TEST(SnapKv, LeaverReplacesOnlyWhenHigher) {
  const auto r = rule(Policy::kScored, 7, 2, 1);  // sinks [0,1), selected [1,5), ring [5,7)
  std::vector<float> s = {9, 0.4f, 0.2f, 0.2f, 0.5f, 0.3f, 0.1f};
  EXPECT_EQ(snapkv::resolve_leaver(s, r, 0), 2);   // 0.3 > 0.2 (slots 2 and 3 tie: lower)
  EXPECT_EQ(snapkv::resolve_leaver(s, r, 1), -1);  // 0.1 < 0.2: dropped
  s[6] = 0.2f;
  EXPECT_EQ(snapkv::resolve_leaver(s, r, 1), -1);  // equal is not higher
  EXPECT_FLOAT_EQ(snapkv::ema(0.5f, 0.1f, 2), 0.3f);
}

TEST(SnapKv, ShrinkLayouts) {
  // scored, C = 8, sinks 1, ring 2 (full, oldest ring token at slot 6 + 1 = 7).
  const auto r = rule(Policy::kScored, 8, 2, 1);
  const std::vector<float> s = {0, 0.5f, 0.1f, 0.7f, 0.3f, 0.6f, 0.0f, 0.0f};
  EXPECT_EQ(snapkv::shrink_order(s, 8, 1, r, 5), (std::vector<std::int32_t>{0, 3, 5, 7, 6}));
  // window: sinks + most recent, oldest first.
  const auto w = rule(Policy::kWindow, 8, 2, 2);  // ring of 6 over [2, 8), ring_pos 4
  EXPECT_EQ(snapkv::shrink_order({}, 8, 4, w, 5), (std::vector<std::int32_t>{0, 1, 3, 4, 5}));
  // snapkv (appending, 11 valid): protect the last α = 2 slots.
  const auto k = rule(Policy::kSnapKv, 8, 2, 1);
  const std::vector<float> ks = {0, 0.1f, 0.9f, 0.2f, 0.8f, 0.3f, 0.4f, 0.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(snapkv::shrink_order(ks, 11, 0, k, 6), (std::vector<std::int32_t>{0, 2, 4, 6, 9, 10}));
  // Nothing to evict: identity.
  EXPECT_EQ(snapkv::shrink_order(ks, 4, 0, k, 6), (std::vector<std::int32_t>{0, 1, 2, 3}));
}

// ---- the backend's attention on crafted K/V (cpu::attend) -------------------------------

// One KV head, one query head, head_dim 2. K = (ln(w)/scale, 0) and q = (1, 0) give the
// probabilities w / Σw by hand; V[0] carries the token's position.
// The state rule (runtime/step_plan_check.h) with the action the next plan no longer carries.
void advance(LayerSlots& ls, std::int32_t n, bool prefill, std::int32_t prompt_len) {
  advance_layer(ls, LayerStep{n, prefill, prompt_len, ls.action == LayerAction::kSelect,
                              ls.action == LayerAction::kShrink ? ls.shrink_to : 0});
  ls.action = LayerAction::kNone;
  ls.shrink_to = 0;
  ls.temp_pages.clear();
}

struct Crafted {
  cpu::KvPool pool{KvLayout{1, 2, 4}, 64};
  const float scale = 1.0f / std::sqrt(2.0f);
  LayerSlots ls;
  int next_page = 0;
  explicit Crafted(LayerRule r) {
    ls.rule = r;
    while (static_cast<int>(ls.pages.size()) * kBlockSize < r.capacity + 40)
      ls.pages.push_back(next_page++);
  }
  std::vector<float> key(double weight) const {
    return {static_cast<float>(std::log(weight) / scale), 0.0f};
  }
  void put(int slot, double weight, float pos, float score) {
    const auto k = key(weight);
    const int page = ls.pages[slot / kBlockSize];
    std::copy(k.begin(), k.end(), pool.k(page, 0, slot % kBlockSize));
    float* v = pool.v(page, 0, slot % kBlockSize);
    v[0] = pos, v[1] = 0;
    *pool.score(page, 0, slot % kBlockSize) = score;
  }
  float pos(int slot) { return pool.v(ls.pages[slot / kBlockSize], 0, slot % kBlockSize)[0]; }
  float score(int slot) { return *pool.score(ls.pages[slot / kBlockSize], 0, slot % kBlockSize); }
  // One decode token of weight `weight` at position `p`; returns the attention output.
  float decode(double weight, int p) {
    const auto k = key(weight);
    const float q[2] = {1, 0}, v[2] = {static_cast<float>(p), 0};
    float out[2];
    double lse;
    cpu::AttnArgs a;
    a.slots = &ls;
    a.start = p;
    a.n = 1;
    a.prompt_len = 1;
    a.prefill = false;
    a.head_dim = 2;
    a.group = 1;
    a.scale = scale;
    a.q = q, a.k = k.data(), a.v = v, a.out = out, a.lse = &lse;
    cpu::attend(pool, 0, a);
    advance(ls, 1, false, 1);
    return out[0];
  }
};

TEST(CpuAttention, ScoredRingReplacementByHand) {
  // C = 5: sink [0], selected [1, 3), ring [3, 5) of α = 2 (λ = 1/2); layer full.
  Crafted c(rule(Policy::kScored, 5, 2, 1));
  c.put(0, 1, 0, 0.5f);
  c.put(1, 1, 1, 0.1f);
  c.put(2, 1, 2, 0.3f);
  c.put(3, 1, 3, 0.2f);  // ring oldest (ring_pos 0)
  c.put(4, 1, 4, 0.5f);
  c.ls.valid = 5;
  // Step 1: leaver slot 3 (0.2) beats the lowest selected slot 1 (0.1) and moves there.
  // New token (position 5, weight 4) into slot 3. Weights now {1,1,1,4,1}: p = w / 8.
  const float out = c.decode(4, 5);
  EXPECT_FLOAT_EQ(c.pos(1), 3);
  EXPECT_FLOAT_EQ(c.pos(3), 5);
  EXPECT_NEAR(out, (0 + 3 + 2 + 5 * 4 + 4) / 8.0, 1e-5);
  EXPECT_NEAR(c.score(0), 0.5 * 0.5 + 0.5 * 0.125, 1e-6);
  EXPECT_NEAR(c.score(1), 0.5 * 0.2 + 0.5 * 0.125, 1e-6);  // moved with its score
  EXPECT_NEAR(c.score(2), 0.5 * 0.3 + 0.5 * 0.125, 1e-6);
  EXPECT_NEAR(c.score(3), 0.5, 1e-6);  // new token: its first probability
  EXPECT_NEAR(c.score(4), 0.5 * 0.5 + 0.5 * 0.125, 1e-6);
  EXPECT_EQ(c.ls.ring_pos, 1);
  // Step 2: leaver slot 4 (0.3125) vs lowest selected: slot 1 (0.1625) -> replaced again.
  // Weights {1,1,1,4,2}/9 after writing position 6 (weight 2) into slot 4.
  c.decode(2, 6);
  EXPECT_FLOAT_EQ(c.pos(1), 4);
  EXPECT_FLOAT_EQ(c.pos(4), 6);
  EXPECT_NEAR(c.score(1), 0.5 * 0.3125 + 0.5 / 9, 1e-6);
  EXPECT_NEAR(c.score(2), 0.5 * 0.2125 + 0.5 / 9, 1e-6);
  EXPECT_NEAR(c.score(3), 0.5 * 0.5 + 0.5 * 4 / 9, 1e-6);
  EXPECT_NEAR(c.score(4), 2.0 / 9, 1e-6);
  // Drop: a full layer whose ring leaver scores below every selected slot.
  Crafted d(rule(Policy::kScored, 5, 2, 1));
  d.put(0, 1, 0, 0.5f);
  d.put(1, 1, 1, 0.4f);
  d.put(2, 1, 2, 0.3f);
  d.put(3, 1, 3, 0.2f);  // leaver: 0.2 < 0.3
  d.put(4, 1, 4, 0.6f);
  d.ls.valid = 5;
  d.decode(1, 5);  // uniform p = 1/5
  const std::vector<float> want_pos = {0, 1, 2, 5, 4};
  for (int slot = 0; slot < 5; ++slot) EXPECT_EQ(d.pos(slot), want_pos[slot]) << "slot " << slot;
  EXPECT_NEAR(d.score(2), 0.5 * 0.3 + 0.5 * 0.2, 1e-6);
  EXPECT_NEAR(d.score(3), 0.2, 1e-6);
}

TEST(CpuAttention, SelectAndShrinkOnCraftedPrompt) {
  // Prefill a 30-token prompt of one head into C = 12 (sinks 2, α 4) through scratch.
  for (Policy p : {Policy::kWindow, Policy::kScored}) {
    Crafted c(rule(p, 12, 4, 2, PoolKind::kMax, 1));
    const int L = 30;
    std::vector<float> q(L * 2), k(L * 2), v(L * 2), out(L * 2), sk(L * 2), sv(L * 2);
    std::vector<double> lse(L);
    std::vector<double> weight(L, 1.0);
    for (int i : {5, 9, 13, 20, 21, 22}) weight[i] = 50.0 + i;  // attract the window queries
    for (int i = 0; i < L; ++i) {
      const auto kk = c.key(weight[i]);
      k[2 * i] = kk[0], k[2 * i + 1] = 0;
      q[2 * i] = 1, q[2 * i + 1] = 0;
      v[2 * i] = static_cast<float>(i), v[2 * i + 1] = 0;
    }
    c.ls.action = LayerAction::kSelect;
    cpu::AttnArgs a;
    a.slots = &c.ls;
    a.start = 0;
    a.n = L;
    a.prompt_len = L;
    a.head_dim = 2;
    a.scale = c.scale;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data(), a.lse = lse.data();
    a.q_stride = a.kv_stride = a.out_stride = 2;
    a.lse_stride = 1;
    a.scratch_k = reinterpret_cast<std::byte*>(sk.data());  // an fp32 pool's scratch
    a.scratch_v = reinterpret_cast<std::byte*>(sv.data());
    cpu::attend(c.pool, 0, a);
    advance(c.ls, L, true, L);
    EXPECT_EQ(c.ls.valid, 12);
    std::vector<float> kept;
    for (int s = 0; s < 12; ++s) kept.push_back(c.pos(s));
    if (p == Policy::kWindow) {
      EXPECT_EQ(kept, (std::vector<float>{0, 1, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29}));
    } else {
      // Top 6 of [2, 26) by attention: the six heavy keys.
      EXPECT_EQ(kept, (std::vector<float>{0, 1, 5, 9, 13, 20, 21, 22, 26, 27, 28, 29}));
      // Initial score of a selected key: mean probability over the window (S/α, kernel 1).
      double sum = 0;
      for (int w = 26; w < 30; ++w) {
        double z = 0;
        for (int j = 0; j <= w; ++j) z += weight[j];
        sum += weight[13] / z;
      }
      EXPECT_NEAR(c.score(4), sum / 4, 1e-6);
      // Shrink to 9: keep sinks, ring (26..29) and the 3 best selected (20, 21, 22).
      c.ls.action = LayerAction::kShrink;
      c.ls.shrink_to = 9;
      c.decode(1, 30);  // decode then shrink at the end of the step
      std::vector<float> after;
      for (int s = 0; s < 9; ++s) after.push_back(c.pos(s));
      EXPECT_EQ(c.ls.valid, 9);
      EXPECT_EQ(c.ls.ring_pos, 0);
      EXPECT_EQ(c.ls.rule.capacity, 9);
      // The decode's ring leaver (26, weight 1) scores below every selected slot and is
      // dropped; the ring holds 27, 28, 29, 30 oldest first, after the 3 best selected.
      EXPECT_EQ(std::vector<float>(after.begin() + 5, after.end()),
                (std::vector<float>{27, 28, 29, 30}));
      EXPECT_EQ(std::vector<float>(after.begin(), after.begin() + 5),
                (std::vector<float>{0, 1, 20, 21, 22}));
    }
  }
}

}  // namespace
}  // namespace strata

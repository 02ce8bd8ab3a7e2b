// The live quality guardrail end to end on the tiny CPU model (issue 22 item 1): sampled
// finished requests are replayed through the full cache and compared per generated position.
// With capacity >= context the sparse run is the full run (agreement exactly 1); a profile
// that drops needed context measurably disagrees; replays cause no refusal and no preemption
// of served requests (they are preempted instead); an alert can restore the previous profile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <thread>

#include "actors/engine.h"
#include "engine_fixture.h"
#include "runtime/error.h"

namespace strata {
namespace {

using test::decorated_cpu_factory;
using test::drain;
using test::ForwardingBackend;
using test::greedy_request;
using test::random_prompt;
using test::tiny_config;
using test::wait_stats;

SparsityProfile profile(int capacity, int window, int sinks, Policy policy = Policy::kScored) {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = 1;
  p.policy = policy;
  p.capacity = capacity;
  p.window = window;
  p.sinks = sinks;
  return p;
}

Config guarded(const SparsityProfile& p) {
  Config c = tiny_config();
  c.sparsity = p;
  c.quality_monitor.sample_rate = 1.0;  // every finished request
  c.quality_monitor.max_pending = 64;
  return c;
}

// Waits until `n` replays were scored (or dropped) and returns the snapshot.
// Waits until both views agree that n replays ended: the monitor's report (it counts a replay
// when its rows arrive) and the batcher's counters (published at its next scheduling call, which
// can come after the monitor has already counted the rows).
EngineStats wait_replays(const Engine& e, std::uint64_t n) {
  return wait_stats(e, [n](const EngineStats& s) {
    return s.replays.sampled >= n && s.quality &&
           s.quality->replays_completed + s.replays.dropped >= n &&
           s.replays.finished + s.replays.dropped >= n;
  });
}

std::vector<std::vector<std::int32_t>> prompts(int count, int len, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<std::int32_t>> v;
  for (int i = 0; i < count; ++i) v.push_back(random_prompt(rng, len, 200));
  return v;
}

TEST(QualityGuardrail, AgreementIsExactlyOneWhenCapacityCoversTheContext) {
  // Prompt 40 + 24 generated < C = 128: every sparse layer holds every token.
  auto e = Engine::create(guarded(profile(128, 8, 2)));
  const auto ps = prompts(4, 40, 7);
  for (const auto& p : ps) drain(*e->submit(greedy_request(p, 24)));
  const EngineStats s = wait_replays(*e, ps.size());
  ASSERT_TRUE(s.quality);
  EXPECT_EQ(s.replays.sampled, ps.size());
  EXPECT_EQ(s.replays.dropped, 0u);
  const QualityCell t = s.quality->version_total(s.profile_version);
  EXPECT_EQ(t.samples, ps.size());
  EXPECT_EQ(t.positions, ps.size() * 24);
  EXPECT_EQ(t.agree, t.positions);  // exactly 100 %
  EXPECT_EQ(t.agreement(), 1.0);
  EXPECT_LT(std::abs(t.delta_mean()), 1e-4) << t.delta_mean();
  std::printf("capacity >= context: agreement %.4f over %llu positions, delta loglik %.2e\n",
              t.agreement(), static_cast<unsigned long long>(t.positions), t.delta_mean());
}

TEST(QualityGuardrail, AgreementDropsWhenTheProfileDropsNeededContext) {
  // Prompt 160 tokens, C = 8 (2 sinks + a 4-token window + 2 selected): the two sparse layers
  // of three see almost nothing of the prompt.
  for (const Policy policy : {Policy::kWindow, Policy::kScored}) {
    SCOPED_TRACE(to_string(policy));
    auto e = Engine::create(guarded(profile(8, 4, 2, policy)));
    const auto ps = prompts(4, 160, 11);
    for (const auto& p : ps) drain(*e->submit(greedy_request(p, 24)));
    const EngineStats s = wait_replays(*e, ps.size());
    ASSERT_TRUE(s.quality);
    const QualityCell t = s.quality->version_total(s.profile_version);
    EXPECT_EQ(t.samples, ps.size());
    EXPECT_EQ(t.positions, ps.size() * 24);
    const Interval ci = t.agreement_interval();
    std::printf(
        "%s C = 8 at 160 + 24 tokens: agreement %.4f [%.4f, %.4f] over %llu positions, "
        "delta loglik %.4f\n",
        to_string(policy), t.agreement(), ci.lo, ci.hi,
        static_cast<unsigned long long>(t.positions), t.delta_mean());
    EXPECT_LT(ci.hi, 1.0);  // measurably below 100 %
    EXPECT_NE(t.delta_mean(), 0.0);
    // The first generated token comes from the (dense) prefill: it always agrees.
    EXPECT_GE(t.agree, t.samples);
    // One cell per (version, bucket): 160 tokens is in "0-255".
    ASSERT_EQ(s.quality->cells.size(), 1u);
    EXPECT_EQ(s.quality->cells[0].bucket, "0-255");
  }
}

// Holds the first step that runs a replay chunk, so the test can submit served work while a
// replay holds its pages.
class HoldReplay final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  StepResult step(const StepPlan& plan) override {
    bool replay = false;
    for (const auto& s : plan.seqs) replay = replay || (s.prefill && s.prompt_len == kReplayLen);
    {
      std::unique_lock<std::mutex> l(mu_);
      if (replay && !held_) {
        held_ = true;
        cv_.notify_all();
        cv_.wait(l, [&] { return released_; });
      }
    }
    return ForwardingBackend::step(plan);
  }
  static constexpr int kReplayLen = 100 + 16 - 1;  // prompt + the generated tokens but the last
  static std::mutex mu_;
  static std::condition_variable cv_;
  static bool held_, released_;
};
std::mutex HoldReplay::mu_;
std::condition_variable HoldReplay::cv_;
bool HoldReplay::held_ = false, HoldReplay::released_ = false;

TEST(QualityGuardrail, ReplaysCauseNo429AndNoServedPreemption) {
  // A full-capacity sparse profile (prompt 100 + 16 < C = 128, no temporary pages): a served
  // request reserves 7 + 8 + 8 pages, a replay (full cache, 115 tokens) 3 x 8 = 24. A pool of
  // 36 pages holds either, never both: the served request must take the replay's pages.
  Config c = guarded(profile(128, 8, 2));
  c.scheduler.max_waiting = 1;  // one waiting request at a time: a replay in the queue would 429
  c.scheduler.max_num_batched_tokens = 64;  // replay chunks of 64 tokens: 2 steps
  // Page bytes of this model: 16 slots x 2 KV heads x 16 dims x K and V x fp32.
  const std::uint64_t page_bytes = 16 * 2 * 16 * 2 * 4;
  c.cache.cpu_kv_bytes = 36 * page_bytes;
  auto e = Engine::create(c, decorated_cpu_factory<HoldReplay>());

  const auto ps = prompts(2, 100, 5);
  const auto first = drain(*e->submit(greedy_request(ps[0], 16)));
  ASSERT_EQ(first.tokens[0].size(), 16u);
  ASSERT_EQ(e->stats().pages_total, 36);
  {
    std::unique_lock<std::mutex> l(HoldReplay::mu_);  // the replay holds its pages
    ASSERT_TRUE(HoldReplay::cv_.wait_for(l, std::chrono::seconds(30), [] {
      return HoldReplay::held_;
    })) << "the first request's replay never ran";
  }
  // Served work arrives while the replay runs: accepted (the queue has room: the replay is in
  // no queue), admitted at the next step by preempting the replay.
  auto second = e->submit(greedy_request(ps[1], 16));
  {
    std::lock_guard<std::mutex> l(HoldReplay::mu_);
    HoldReplay::released_ = true;
    HoldReplay::cv_.notify_all();
  }
  const auto out = drain(*second);
  EXPECT_EQ(out.tokens[0].size(), 16u);
  EXPECT_TRUE(out.error.empty()) << out.error;

  const EngineStats s = wait_replays(*e, 2);
  std::printf(
      "replays: sampled %llu finished %llu preempted %llu steps %llu tokens %llu; served "
      "preemptions %llu, refused %llu\n",
      static_cast<unsigned long long>(s.replays.sampled),
      static_cast<unsigned long long>(s.replays.finished),
      static_cast<unsigned long long>(s.replays.preempted),
      static_cast<unsigned long long>(s.replays.steps),
      static_cast<unsigned long long>(s.replays.tokens),
      static_cast<unsigned long long>(s.preemptions),
      static_cast<unsigned long long>(s.requests_refused));
  EXPECT_EQ(s.requests_refused, 0u);
  EXPECT_EQ(s.preemptions, 0u);        // no served request was preempted
  EXPECT_GE(s.replays.preempted, 1u);  // the replay was, to admit the second request
  EXPECT_EQ(s.replays.sampled, 2u);
  EXPECT_EQ(s.replays.finished, 2u);  // and still finished afterwards (from its cursor)
  EXPECT_EQ(s.replays.dropped, 0u);
  EXPECT_EQ(s.requests_finished, 2u);
  ASSERT_TRUE(s.quality);
  const QualityCell t = s.quality->version_total(s.profile_version);
  EXPECT_EQ(t.positions, 32u);
  EXPECT_EQ(t.agree, 32u);  // capacity covers the context
  // Every page is back once the replays are done.
  const EngineStats idle = wait_stats(*e, [](const EngineStats& x) { return x.pages_used == 0; });
  EXPECT_EQ(idle.pages_used, 0);
}

TEST(QualityGuardrail, AnAlertRestoresThePreviousProfile) {
  Config c = guarded(profile(256, 8, 2));
  c.quality_monitor.alert_below = 0.99;
  c.quality_monitor.alert_min_samples = 4;
  c.quality_monitor.restore_on_alert = true;
  auto e = Engine::create(c);
  const auto v1 = e->stats().profile_version;
  const auto v2 = e->update_sparsity(profile(8, 4, 2, Policy::kWindow));
  ASSERT_GT(v2, v1);
  const auto ps = prompts(6, 160, 11);
  for (const auto& p : ps) drain(*e->submit(greedy_request(p, 24)));
  const EngineStats s = wait_stats(*e, [&](const EngineStats& x) {
    return x.quality && !x.quality->alerts.empty() && x.profile_version > v2;
  });
  ASSERT_TRUE(s.quality);
  ASSERT_EQ(s.quality->alerts.size(), 1u);
  const QualityAlert& a = s.quality->alerts[0];
  EXPECT_EQ(a.version, v2);
  EXPECT_GE(a.samples, 4u);
  EXPECT_LT(a.upper, 0.99);
  EXPECT_TRUE(a.restore_requested);
  // The previous version's profile, republished as a new version.
  EXPECT_GT(s.profile_version, v2);
  EXPECT_EQ(s.profile.capacity, 256);
  EXPECT_EQ(s.profile.policy, Policy::kScored);
  std::printf("alert on v%llu (agreement %.4f, upper %.4f, %llu samples): now v%llu, C = %d\n",
              static_cast<unsigned long long>(a.version), a.agreement, a.upper,
              static_cast<unsigned long long>(a.samples),
              static_cast<unsigned long long>(s.profile_version), s.profile.capacity);
}

TEST(QualityGuardrail, OffMeansNoReplaysAndFullProfilesAreNotReplayed) {
  Config off = guarded(profile(128, 8, 2));
  off.quality_monitor.sample_rate = 0;
  auto e = Engine::create(off);
  drain(*e->submit(greedy_request({1, 2, 3, 4}, 4)));
  EXPECT_FALSE(e->stats().quality);
  EXPECT_EQ(e->stats().replays.sampled, 0u);

  Config full = tiny_config();
  full.quality_monitor.sample_rate = 1;  // but sparsity off: nothing to compare
  auto f = Engine::create(full);
  drain(*f->submit(greedy_request({1, 2, 3, 4}, 4)));
  const EngineStats s = f->stats();
  ASSERT_TRUE(s.quality);
  EXPECT_EQ(s.replays.sampled, 0u);
}

}  // namespace
}  // namespace strata

// The step loop's timings and plan recycling (actors/batcher_actor.cpp): the stage timings
// partition each step's wall time, and a plan built in recycled buffers carries every
// sequence's own, current page tables.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>

#include "engine_fixture.h"

namespace strata::test {
namespace {

std::vector<std::int32_t> prompt_of(std::mt19937& rng, int len) {
  std::uniform_int_distribution<int> d(5, 200);
  std::vector<std::int32_t> p(static_cast<std::size_t>(len));
  for (auto& t : p) t = d(rng);
  return p;
}

EngineStats settled(Engine& e) {
  for (int i = 0; i < 20000; ++i) {
    const EngineStats s = e.stats();
    if (s.running == 0 && s.waiting == 0 && s.pages_used == 0 && s.steps > 0) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return e.stats();
}

// The synchronous loop's: in the pipelined one (the default) stages of consecutive steps overlap
// and do not partition wall time (docs/actors.md "Pipelined steps").
TEST(StepLoop, TimingsPartitionEachStepsWallTime) {
  Config cfg = tiny_config();
  cfg.scheduler.async_steps = false;
  auto e = Engine::create(cfg);
  std::mt19937 rng(3);
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (int i = 0; i < 6; ++i)
    ss.push_back(e->submit(greedy_request(prompt_of(rng, 10 + 7 * i), 12)));
  for (auto& s : ss) drain(*s);
  const EngineStats st = settled(*e);
  const StepTimings& t = st.timings;
  ASSERT_GT(t.steps, 0u);
  EXPECT_EQ(t.steps, st.steps);
  EXPECT_GT(t.backend_ms, 0.0);
  EXPECT_GE(t.schedule_ms, t.schedule_job_ms);
  EXPECT_LE(t.device_ms, t.backend_ms);
  for (double v :
       {t.schedule_ms, t.schedule_job_ms, t.plan_ms, t.dispatch_ms, t.return_ms, t.finish_ms})
    EXPECT_GE(v, 0.0);
  const double sum =
      t.schedule_ms + t.plan_ms + t.dispatch_ms + t.backend_ms + t.return_ms + t.finish_ms;
  EXPECT_NEAR(sum, t.wall_ms, 1e-6 * std::max(1.0, t.wall_ms));
}

TEST(StepLoop, RecycledPlansCarryEachSequencesOwnCurrentTables) {
  auto probe = std::make_shared<StepProbe>();
  auto e = Engine::create(tiny_config(), probe_factory(probe));
  std::mt19937 rng(9);
  std::vector<std::shared_ptr<TokenStream>> ss;
  // Different lengths: sequences join and leave, so buffers change hands between them.
  for (int i = 0; i < 10; ++i)
    ss.push_back(e->submit(greedy_request(prompt_of(rng, 5 + 13 * i), 20 + 9 * (i % 4))));
  for (auto& s : ss) drain(*s);
  settled(*e);
  std::lock_guard<std::mutex> l(probe->mu);
  ASSERT_GT(probe->plans.size(), 20u);
  std::map<std::uint64_t, std::vector<std::vector<std::int32_t>>> last;  // seq -> layer tables
  for (const StepPlan& plan : probe->plans) {
    std::set<std::int32_t> seen;
    for (const SeqStep& s : plan.seqs) {
      ASSERT_EQ(s.layers.size(), 3u);
      ASSERT_FALSE(s.tokens.empty());
      if (!s.prefill) {
        EXPECT_EQ(s.tokens.size(), 1u);
      }
      auto& prev = last[s.seq_id];
      for (std::size_t l = 0; l < s.layers.size(); ++l) {
        const auto& pages = s.layers[l].pages;
        // Full layers: the table covers the positions computed so far plus this step.
        EXPECT_EQ(static_cast<int>(pages.size()),
                  pages_for_slots(s.start + static_cast<int>(s.tokens.size())))
            << "sequence " << s.seq_id << " layer " << l << " step " << plan.step_id;
        EXPECT_EQ(s.layers[l].valid, s.start);
        for (auto p : pages)
          EXPECT_TRUE(seen.insert(p).second)
              << "page " << p << " in two tables, step " << plan.step_id;
        // Tables only grow while a sequence runs (no preemption with this pool).
        if (prev.size() == s.layers.size()) {
          const auto& before = prev[l];
          ASSERT_LE(before.size(), pages.size());
          EXPECT_TRUE(std::equal(before.begin(), before.end(), pages.begin()))
              << "sequence " << s.seq_id << " layer " << l << " lost its table prefix";
        }
      }
      prev.clear();
      for (const auto& ls : s.layers) prev.push_back(ls.pages);
    }
  }
}

}  // namespace
}  // namespace strata::test

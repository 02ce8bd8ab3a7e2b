// The engine with backend.tp_size = 2 on the CPU: two RankExecutors over the sharded CPU
// backend (runtime/cpu/cpu_backend.h make_cpu_tp_backends), one StepPlan to both ranks, rank 0's
// results. Greedy outputs equal tp_size 1's under batching, preemption and sparsity.
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "tests/actors/engine_fixture.h"

namespace strata {
namespace {

using namespace strata::test;

std::vector<std::vector<std::int32_t>> run_all(const Config& cfg, const std::vector<Request>& reqs,
                                               EngineStats* stats = nullptr) {
  auto e = Engine::create(cfg);
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& r : reqs) ss.push_back(e->submit(r));
  std::vector<std::vector<std::int32_t>> out;
  for (auto& s : ss) {
    auto c = drain(*s);
    EXPECT_EQ(c.finish[0], FinishReason::kLength) << c.error;
    out.push_back(c.tokens[0]);
  }
  if (stats)
    *stats = wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0 && s.steps > 0; });
  return out;
}

TEST(TpEngine, Tp2GreedyOutputsEqualTp1) {
  std::mt19937 rng(9);
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i)
    reqs.push_back(greedy_request(random_prompt(rng, 12 + 5 * i, 200), 30));
  Config one = tiny_config();
  Config two = one;
  two.backend.tp_size = 2;
  const auto ref = run_all(one, reqs);
  EngineStats st;
  const auto got = run_all(two, reqs, &st);
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(got[i], ref[i]) << "request " << i;
  EXPECT_EQ(st.pages_used, 0);

  // Sparsity on (every policy's selection runs on each rank's own KV heads) and a pool small
  // enough to preempt: still the tp_size 1 outputs.
  for (Policy p : {Policy::kSnapKv, Policy::kScored}) {
    Config s1 = one;
    s1.sparsity.enabled = true;
    s1.sparsity.full_layers = 1;
    s1.sparsity.policy = p;
    s1.sparsity.capacity = 24;
    s1.sparsity.window = 8;
    s1.sparsity.sinks = 2;
    Config s2 = s1;
    s2.backend.tp_size = 2;
    const auto sref = run_all(s1, reqs);
    const auto sgot = run_all(s2, reqs);
    for (std::size_t i = 0; i < ref.size(); ++i)
      EXPECT_EQ(sgot[i], sref[i]) << to_string(p) << " request " << i;
  }
}

TEST(TpEngine, Tp2PreemptionKeepsOutputs) {
  std::mt19937 rng(5);
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) reqs.push_back(greedy_request(random_prompt(rng, 20, 200), 40));
  Config cfg = tiny_config();
  const auto ref = run_all(cfg, reqs);
  cfg.backend.tp_size = 2;
  // Same page count as the engine test's preemption case: kv_bytes is the total over ranks.
  cfg.cache.cpu_kv_bytes = 60 * (2 * 2 * 16 * 16 * 4);
  EngineStats st;
  const auto got = run_all(cfg, reqs, &st);
  for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(got[i], ref[i]) << "request " << i;
  EXPECT_GT(st.preemptions, 0u);
  EXPECT_EQ(st.pages_total, 60);
  EXPECT_EQ(st.pages_used, 0);
}

TEST(TpEngine, TpSizeThatDoesNotDivideTheKvHeadsIsAConfigError) {
  Config cfg = tiny_config();
  cfg.backend.tp_size = 3;
  try {
    Engine::create(cfg);
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "backend.tp_size");
    EXPECT_NE(std::string(e.what()).find("KV heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata

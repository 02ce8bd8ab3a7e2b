// The per-layer census through the engine (EngineStats::layers, docs/api.md "Per-layer
// statistics"): the batcher asks the CPU backend for kept positions, the cache manager keeps
// them, the census sums them while sequences run and empties when the last one leaves.
#include <gtest/gtest.h>

#include <algorithm>

#include "actors/census_turns.h"
#include "engine_fixture.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata {
namespace {
using namespace strata::test;

TEST(LayerCensusEngine, KeptPositionsOfRunningSequencesThenEmpty) {
  Config cfg = tiny_config();
  cfg.sparsity = test::sparse_profile(Policy::kScored, 1, 40, 8, 2);
  auto e = Engine::create(cfg);
  const int heads = e->model().num_key_value_heads, layers = e->model().num_hidden_layers;
  std::mt19937 rng(3);
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (int i = 0; i < 4; ++i)
    streams.push_back(
        e->submit(greedy_request(random_prompt(rng, 80, e->model().vocab_size), 200)));
  const auto st = wait_stats(*e, [](const EngineStats& s) {
    return s.layers && s.layers->size() > 1 && (*s.layers)[1].kept_sequences > 0;
  });
  ASSERT_TRUE(st.layers && st.layers->size() == static_cast<std::size_t>(layers));
  ASSERT_GT((*st.layers)[1].kept_sequences, 0) << "no census of kept positions while running";
  EXPECT_GT(st.page_bytes, 0u);
  for (int l = 0; l < layers; ++l) {
    const LayerUsage& u = (*st.layers)[static_cast<std::size_t>(l)];
    EXPECT_EQ(u.rule.sparse(), l >= 1) << l;
    EXPECT_EQ(u.bytes, static_cast<std::size_t>(u.pages) * st.page_bytes) << l;
    if (l == 0 || u.kept_sequences == 0) continue;
    // Every prompt (80) selected: each reporting sequence keeps C slots per KV head, its
    // sinks and the last α positions among them.
    const std::int64_t n = static_cast<std::int64_t>(u.kept_sequences) * heads;
    EXPECT_EQ(u.kept.total(), n * 40) << l;
    EXPECT_EQ(u.kept.sinks, n * 2) << l;
    EXPECT_EQ(u.kept.recent, n * 8) << l;
    EXPECT_LE(u.slots.max, 80) << l;  // (a prompt still in temp pages counts as held)
  }
  for (auto& s : streams) {
    const auto c = drain(*s);
    EXPECT_EQ(c.finish[0], FinishReason::kLength) << c.error;
  }
  const auto end = wait_stats(*e, [](const EngineStats& s) {
    return s.pages_used == 0 && s.layers && (*s.layers)[1].slots.sequences == 0;
  });
  ASSERT_TRUE(end.layers);
  for (const auto& u : *end.layers) {
    EXPECT_EQ(u.slots.sequences, 0);
    EXPECT_EQ(u.kept_sequences, 0);
    EXPECT_EQ(u.pages, 0);
  }
}

// A census step asks at most 16 served rows for their kept positions (their cost on the CUDA
// backend grows with every kept slot of every layer): the first census (the first step) and
// every later one, however many sequences run.
TEST(LayerCensusEngine, ACensusStepAsksAtMostSixteenRows) {
  Config cfg = tiny_config();
  cfg.sparsity = test::sparse_profile(Policy::kScored, 1, 40, 8, 2);
  cfg.scheduler.max_num_seqs = 32;
  auto probe = std::make_shared<StepProbe>();
  auto e = Engine::create(cfg, probe_factory(probe));
  std::mt19937 rng(5);
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (int i = 0; i < 24; ++i)
    streams.push_back(
        e->submit(greedy_request(random_prompt(rng, 80, e->model().vocab_size), 300)));
  for (auto& s : streams) {
    const auto c = drain(*s);
    EXPECT_EQ(c.finish[0], FinishReason::kLength) << c.error;
  }
  std::lock_guard<std::mutex> l(probe->mu);
  std::size_t census_steps = 0, widest = 0;
  for (const auto& plan : probe->plans) {
    const auto n = static_cast<std::size_t>(std::count_if(
        plan.seqs.begin(), plan.seqs.end(), [](const SeqStep& st) { return st.report_kept; }));
    census_steps += n > 0;
    widest = std::max(widest, n);
  }
  EXPECT_GE(census_steps, 1u);
  EXPECT_LE(widest, 16u);
}

// The rows asked take turns: the longest-unasked first (ties by row), replays never.
TEST(CensusTurns, LongestUnaskedFirstAndEveryRowWithinCeilNOverK) {
  using actors::kNotServed;
  std::vector<std::pair<std::uint64_t, std::size_t>> order;
  std::vector<char> pick;
  actors::pick_census_rows({3, 0, kNotServed, 1, 0}, 2, order, pick);
  EXPECT_EQ(pick, (std::vector<char>{0, 1, 0, 0, 1}));
  actors::pick_census_rows({kNotServed, kNotServed}, 16, order, pick);
  EXPECT_EQ(pick, (std::vector<char>{0, 0}));
  // 40 rows, 16 per census, rows shuffled between steps: every row within 3 censuses.
  std::vector<std::uint64_t> turn(40, 0);  // by sequence
  std::vector<std::size_t> row_seq(40);
  for (std::size_t i = 0; i < row_seq.size(); ++i) row_seq[i] = i;
  std::mt19937 rng(7);
  for (std::uint64_t c = 1; c <= 3; ++c) {
    std::shuffle(row_seq.begin(), row_seq.end(), rng);
    std::vector<std::uint64_t> turns(40);
    for (std::size_t i = 0; i < 40; ++i) turns[i] = turn[row_seq[i]];
    actors::pick_census_rows(turns, 16, order, pick);
    EXPECT_EQ(std::count(pick.begin(), pick.end(), 1), 16);
    for (std::size_t i = 0; i < 40; ++i)
      if (pick[i]) turn[row_seq[i]] = c;
  }
  EXPECT_EQ(std::count(turn.begin(), turn.end(), 0u), 0);
}

}  // namespace
}  // namespace strata

// The per-layer census through the engine (EngineStats::layers, docs/api.md "Per-layer
// statistics"): the batcher asks the CPU backend for kept positions, the cache manager keeps
// them, the census sums them while sequences run and empties when the last one leaves.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace strata

// Prefix-cache hits in the engine (issue 23) on the CPU backend and the tiny random model: a
// hit computes only the uncached suffix (its first prefill chunk starts at the hit boundary)
// and its tokens and log-probabilities equal the same request with the cache off, bit for
// bit, for the full cache and each sparse policy, chunked and whole prefill; preempted
// sequences that share blocks keep greedy outputs; cache_salt keeps requests apart.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "engine_fixture.h"

namespace strata {
namespace {
using namespace strata::test;

struct Out {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  int cached = 0;
  std::string error;
};

Out run(Engine& e, Request r) {
  Out o;
  auto s = e.submit(std::move(r));
  while (auto ev = s->next_blocking()) {
    o.tokens.insert(o.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    for (const auto& lp : ev->logprobs) o.logprobs.push_back(lp.logprob);
    if (ev->usage) o.cached = ev->usage->cached_tokens;
    if (!ev->error.empty()) o.error = ev->error;
  }
  return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Request req(std::vector<std::int32_t> prompt, int max_tokens, std::string salt = "") {
  Request r = greedy_request(std::move(prompt), max_tokens);
  r.params.logprobs = 0;
  r.cache_salt = std::move(salt);
  return r;
}

struct Mode {
  const char* name;
  bool sparse;
  Policy policy;
  bool chunked;
};

class PrefixCacheHits : public ::testing::TestWithParam<Mode> {};

TEST_P(PrefixCacheHits, HitsEqualTheCacheOffRunBitwiseAndStartAtTheHit) {
  const Mode m = GetParam();
  Config cfg = tiny_config();
  cfg.scheduler.chunked_prefill = m.chunked;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = m.chunked ? 40 : 512;  // chunked: several chunks
  if (m.sparse) {
    cfg.sparsity.enabled = true;
    cfg.sparsity.full_layers = 1;
    cfg.sparsity.policy = m.policy;
    cfg.sparsity.capacity = 32;  // < every prompt below: every sparse layer selects
    cfg.sparsity.window = 8;
    cfg.sparsity.sinks = 2;
  }
  std::mt19937 rng(11);
  const auto shared = random_prompt(rng, 83, 200);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    auto p = shared;
    const auto tail = random_prompt(rng, 10 + 9 * i, 200);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(std::move(p));
  }
  prompts.push_back(shared);  // the shared prefix alone (its own tail block is partial)

  Config off_cfg = cfg;
  off_cfg.cache.prefix_cache = false;
  std::vector<Out> ref;
  {
    auto off = Engine::create(off_cfg);
    for (const auto& p : prompts) ref.push_back(run(*off, req(p, 10)));
  }

  auto probe = std::make_shared<StepProbe>();
  auto on = Engine::create(cfg, probe_factory(probe));
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::size_t first_plan = probe->plans.size();
    const Out o = run(*on, req(prompts[i], 10));
    ASSERT_TRUE(o.error.empty()) << o.error;
    EXPECT_EQ(o.tokens, ref[i].tokens) << "prompt " << i;
    EXPECT_TRUE(same_bits(o.logprobs, ref[i].logprobs)) << "prompt " << i;
    // The first request misses; every later one hits the shared 83 tokens' 5 full blocks, up
    // to the last boundary that leaves the observation window (8) to compute.
    const int len = static_cast<int>(prompts[i].size());
    const int window = m.sparse ? 8 : 1;
    const int want = i == 0 ? 0 : std::min(80, (len - window) / 16 * 16);
    EXPECT_EQ(o.cached, want) << "prompt " << i;
    // The plan: the request's first prefill chunk starts at the hit, none computes before it.
    std::lock_guard<std::mutex> l(probe->mu);
    int first_start = -1;
    for (std::size_t k = first_plan; k < probe->plans.size(); ++k)
      for (const auto& s : probe->plans[k].seqs)
        if (s.prefill) {
          if (first_start < 0) first_start = s.start;
          EXPECT_GE(s.start, want);
        }
    EXPECT_EQ(first_start, want) << "prompt " << i;
  }
  // The same prompt again hits its own suffix blocks too.
  const Out again = run(*on, req(prompts[3], 10));
  EXPECT_EQ(again.tokens, ref[3].tokens);
  EXPECT_TRUE(same_bits(again.logprobs, ref[3].logprobs));
  EXPECT_EQ(again.cached, (static_cast<int>(prompts[3].size()) - (m.sparse ? 8 : 1)) / 16 * 16);
  // Another tenant's salt shares nothing.
  EXPECT_EQ(run(*on, req(prompts[1], 10, "tenant-b")).cached, 0);
  const auto st = wait_stats(*on, [](const EngineStats& s) { return s.pages_used == 0; });
  EXPECT_EQ(st.pages_used, 0);  // cached blocks are free memory
  EXPECT_GT(st.pages_cached, 0);
  EXPECT_GT(st.prefix_cache_hits, 0u);
  EXPECT_GT(st.prefix_cache_queries, st.prefix_cache_hits);
}

INSTANTIATE_TEST_SUITE_P(Profiles, PrefixCacheHits,
                         ::testing::Values(Mode{"FullChunked", false, Policy::kScored, true},
                                           Mode{"FullWhole", false, Policy::kScored, false},
                                           Mode{"WindowChunked", true, Policy::kWindow, true},
                                           Mode{"WindowWhole", true, Policy::kWindow, false},
                                           Mode{"SnapKvChunked", true, Policy::kSnapKv, true},
                                           Mode{"SnapKvWhole", true, Policy::kSnapKv, false},
                                           Mode{"ScoredChunked", true, Policy::kScored, true},
                                           Mode{"ScoredWhole", true, Policy::kScored, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PrefixCacheEngine, PreemptedSequencesSharingBlocksKeepGreedyOutputs) {
  Config cfg = tiny_config();
  std::mt19937 rng(5);
  const auto shared = random_prompt(rng, 48, 200);
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) {
    auto p = shared;
    const auto tail = random_prompt(rng, 8, 200);
    p.insert(p.end(), tail.begin(), tail.end());
    reqs.push_back(req(p, 40));
  }
  std::vector<Out> ref;
  {
    Config off = cfg;
    off.cache.prefix_cache = false;
    auto e = Engine::create(off);
    for (const auto& r : reqs) ref.push_back(run(*e, r));
  }
  // 3 layers x 7 pages per sequence at the end, 3 of them shared: 60 pages hold about 5.
  const std::size_t page_bytes = 2 * 2 * 16 * 16 * 4;
  cfg.cache.cpu_kv_bytes = 60 * page_bytes;
  auto e = Engine::create(cfg);
  (void)run(*e, reqs[0]);  // the shared blocks are cached
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& r : reqs) ss.push_back(e->submit(r));
  for (std::size_t i = 0; i < ss.size(); ++i) {
    auto c = drain(*ss[i]);
    EXPECT_EQ(c.finish[0], FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens[0], ref[i].tokens) << "request " << i;
    ASSERT_TRUE(c.usage.has_value());
    EXPECT_GE(c.usage->cached_tokens, 48) << "request " << i;
  }
  const auto st =
      wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0 && s.steps > 0; });
  EXPECT_GT(st.preemptions, 0u) << "the pool was meant to force preemptions";
  EXPECT_EQ(st.pages_used, 0);
}

// A follow-up turn resends prompt + answer + a new message. With sparsity off the answer's
// blocks were cached at the release (decode K/V of full layers equal a dense prefill's), so
// the hit covers them too; with a sparse layer only the first prompt's blocks are reused.
TEST(PrefixCacheEngine, FollowUpTurnsHitTheAnswerOnlyWithSparsityOff) {
  for (const bool sparse : {false, true}) {
    SCOPED_TRACE(sparse ? "sparse" : "full");
    Config cfg = tiny_config();
    if (sparse) {
      cfg.sparsity.enabled = true;
      cfg.sparsity.full_layers = 1;
      cfg.sparsity.policy = Policy::kScored;
      cfg.sparsity.capacity = 32;
      cfg.sparsity.window = 8;
      cfg.sparsity.sinks = 2;
    }
    std::mt19937 rng(21);
    const auto p1 = random_prompt(rng, 60, 200);
    Config off = cfg;
    off.cache.prefix_cache = false;
    auto ref_engine = Engine::create(off);
    auto on = Engine::create(cfg);
    const Out a1 = run(*on, req(p1, 40));
    const Out r1 = run(*ref_engine, req(p1, 40));
    ASSERT_EQ(a1.tokens, r1.tokens);
    auto p2 = p1;
    p2.insert(p2.end(), a1.tokens.begin(), a1.tokens.end());
    const auto more = random_prompt(rng, 20, 200);
    p2.insert(p2.end(), more.begin(), more.end());  // 120 tokens
    const Out a2 = run(*on, req(p2, 10));
    const Out r2 = run(*ref_engine, req(p2, 10));
    EXPECT_EQ(a2.tokens, r2.tokens);
    EXPECT_TRUE(same_bits(a2.logprobs, r2.logprobs));
    // Full: 60 + 40 - 1 = 99 positions computed -> 6 blocks (96 tokens) cached at the release.
    // Sparse: the first prompt's 60 - 8 = 52 -> 3 blocks (48 tokens).
    EXPECT_EQ(a2.cached, sparse ? 48 : 96);
  }
}

// The repro of a pinned full cache (4 layers, 1000-token prompts on the server) scaled down: a
// decoding sparse sequence's cached blocks keep the prompt's sparse-layer K/V only in pages the
// block table alone references; they count as free memory, so the cache on admits as many
// concurrent sparse requests as the cache off (it used to hold every layer's full prompt per
// running sequence: about 4 of these 8 fitted), with the same outputs.
TEST(PrefixCacheEngine, RunningSparseSequencesPinNoMoreThanWithTheCacheOff) {
  Config cfg = tiny_config();
  cfg.sparsity.enabled = true;
  cfg.sparsity.full_layers = 1;
  cfg.sparsity.policy = Policy::kScored;
  cfg.sparsity.capacity = 32;
  cfg.sparsity.window = 8;
  cfg.sparsity.sinks = 2;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = 512;
  // A 300-token prompt: 19 full-layer pages + 2 x (2 own + 19 temp) at admission; decoding,
  // 19-22 + 2 x 2 (cache off), + 2 x 18 cached sparse-layer pages when they pinned.
  const std::size_t page_bytes = 2 * 2 * 16 * 16 * 4;
  cfg.cache.cpu_kv_bytes = 280 * page_bytes;
  std::mt19937 rng(31);
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(req(random_prompt(rng, 300, 200), 40));
  auto run_all = [&](bool cache, std::vector<std::vector<std::int32_t>>* tokens) {
    Config c = cfg;
    c.cache.prefix_cache = cache;
    auto probe = std::make_shared<StepProbe>();
    auto e = Engine::create(c, probe_factory(probe));
    std::vector<std::shared_ptr<TokenStream>> ss;
    for (const auto& r : reqs) ss.push_back(e->submit(r));
    for (auto& s : ss) {
      auto got = drain(*s);
      EXPECT_EQ(got.finish[0], FinishReason::kLength) << got.error;
      tokens->push_back(got.tokens[0]);
    }
    const auto st = wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0; });
    EXPECT_EQ(st.pages_used, 0);
    EXPECT_EQ(st.preemptions, 0u);
    std::lock_guard<std::mutex> l(probe->mu);
    std::size_t most = 0;  // sequences in one step
    for (const auto& p : probe->plans) most = std::max(most, p.seqs.size());
    return most;
  };
  std::vector<std::vector<std::int32_t>> on_tokens, off_tokens;
  const std::size_t off = run_all(false, &off_tokens);
  const std::size_t on = run_all(true, &on_tokens);
  EXPECT_EQ(off, 8u);  // the pool holds them all with the cache off
  EXPECT_EQ(on, off);
  EXPECT_EQ(on_tokens, off_tokens);
}

}  // namespace
}  // namespace strata

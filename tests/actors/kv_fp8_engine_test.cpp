// The FP8 KV cache through the engine (cache.kv_dtype fp8, docs/kv-fp8.md) on the CPU backend:
// prefix-cache hits stay bitwise equal to the cache-off run (a cached block's e4m3 codes are the
// same bytes for every request: the scales are fixed at start-up, never per prompt), for the
// full cache and the sparse policies, chunked and whole prefill; and fp8-KV generation follows
// the fp32-KV run closely.
#include <gtest/gtest.h>

#include <cstring>

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

Out run(Engine& e, std::vector<std::int32_t> prompt, int max_tokens) {
  Request r = greedy_request(std::move(prompt), max_tokens);
  r.params.logprobs = 0;
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

struct Mode {
  const char* name;
  bool sparse;
  Policy policy;
  bool chunked;
};

Config fp8_config(const Mode& m) {
  Config cfg = tiny_config();
  cfg.cache.kv_dtype = KvDtype::kFp8;
  cfg.scheduler.chunked_prefill = m.chunked;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = m.chunked ? 40 : 512;
  if (m.sparse) {
    cfg.sparsity.enabled = true;
    cfg.sparsity.full_layers = 1;
    cfg.sparsity.policy = m.policy;
    cfg.sparsity.capacity = 32;
    cfg.sparsity.window = 8;
    cfg.sparsity.sinks = 2;
  }
  return cfg;
}

class KvFp8PrefixCache : public ::testing::TestWithParam<Mode> {};

TEST_P(KvFp8PrefixCache, HitsEqualTheCacheOffRunBitwise) {
  const Mode m = GetParam();
  const Config cfg = fp8_config(m);
  std::mt19937 rng(17);
  const auto shared = random_prompt(rng, 83, 200);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    auto p = shared;
    const auto tail = random_prompt(rng, 12 + 9 * i, 200);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(std::move(p));
  }
  Config off_cfg = cfg;
  off_cfg.cache.prefix_cache = false;
  std::vector<Out> ref;
  {
    auto off = Engine::create(off_cfg);
    for (const auto& p : prompts) ref.push_back(run(*off, p, 10));
  }
  auto on = Engine::create(cfg);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const Out o = run(*on, prompts[i], 10);
    ASSERT_TRUE(o.error.empty()) << o.error;
    EXPECT_EQ(o.tokens, ref[i].tokens) << "prompt " << i;
    EXPECT_TRUE(same_bits(o.logprobs, ref[i].logprobs)) << "prompt " << i;
    if (i > 0) {
      EXPECT_EQ(o.cached, 80) << "prompt " << i;  // the shared 5 blocks
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, KvFp8PrefixCache,
                         ::testing::Values(Mode{"FullChunked", false, Policy::kScored, true},
                                           Mode{"FullWhole", false, Policy::kScored, false},
                                           Mode{"WindowChunked", true, Policy::kWindow, true},
                                           Mode{"SnapKvWhole", true, Policy::kSnapKv, false},
                                           Mode{"ScoredChunked", true, Policy::kScored, true},
                                           Mode{"ScoredWhole", true, Policy::kScored, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// Greedy generation with fp8 KV against fp32 KV through the whole engine (the tiny random model,
// full cache): most tokens agree (a first disagreement changes every later one, so this counts
// the common prefix of each stream; random weights have near ties). Fewer than all agreeing is
// also the evidence that the engine's backend really stores e4m3 (cpu_backend_options copies
// cache.kv_dtype).
TEST(KvFp8Engine, GreedyStreamsFollowTheFp32Run) {
  Config c8 = fp8_config(Mode{"Full", false, Policy::kScored, true});
  Config c32 = c8;
  c32.cache.kv_dtype = KvDtype::kBf16;
  auto e8 = Engine::create(c8);
  auto e32 = Engine::create(c32);
  std::mt19937 rng(23);
  int same = 0, total = 0;
  for (int i = 0; i < 6; ++i) {
    const auto p = random_prompt(rng, 30 + 11 * i, 200);
    const Out a = run(*e32, p, 16), b = run(*e8, p, 16);
    ASSERT_TRUE(a.error.empty() && b.error.empty()) << a.error << b.error;
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    std::size_t k = 0;
    while (k < a.tokens.size() && a.tokens[k] == b.tokens[k]) ++k;
    same += static_cast<int>(k);
    total += static_cast<int>(a.tokens.size());
  }
  std::printf("[ figure ] kv_fp8_engine_greedy_common_prefix %d of %d tokens\n", same, total);
  EXPECT_GE(same, total * 3 / 4);
  EXPECT_LT(same, total);
}

}  // namespace
}  // namespace strata

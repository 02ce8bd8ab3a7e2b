// Prompt logprobs through the engine (Request::prompt_logprobs: the legacy API's echo +
// logprobs, vLLM's prompt_logprobs) on the CPU backend and the tiny random model. The reference
// is independent of the batcher's scoring: the teacher-forced logits of the whole prompt on a
// backend of its own (runtime/teacher_forcing.h), their log-softmax, rank and top-N computed
// here in fp64. Checked: every choice gets one event with one entry per prompt token, before its
// first token; chunked and whole prefill, sparse and full profiles, n = 2; the generated tokens
// are those of the same request without prompt logprobs; the prefix cache is not used by such a
// request (its positions would not be computed) and still serves the others; nothing leaks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine_fixture.h"
#include "runtime/teacher_forcing.h"

namespace strata {
namespace {
using namespace strata::test;

struct Choice {
  std::vector<TokenLogprob> prompt;
  int prompt_events = 0;
  bool prompt_after_token = false;
  std::vector<std::int32_t> tokens;
};
struct Outcome {
  std::vector<Choice> choices;
  std::optional<Usage> usage;
  std::string error;
};

Outcome run(Engine& e, Request r) {
  Outcome o;
  o.choices.resize(static_cast<std::size_t>(r.n));
  auto s = e.submit(std::move(r));
  while (auto ev = s->next_blocking()) {
    auto& c = o.choices.at(static_cast<std::size_t>(ev->index));
    if (!ev->prompt_logprobs.empty()) {
      ++c.prompt_events;
      c.prompt_after_token = c.prompt_after_token || !c.tokens.empty();
      c.prompt = ev->prompt_logprobs;
    }
    c.tokens.insert(c.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    if (ev->usage) o.usage = ev->usage;
    if (!ev->error.empty()) o.error = ev->error;
  }
  return o;
}

// Row q - 1 of the whole prompt's teacher-forced logits scores prompt token q.
struct Ref {
  std::vector<double> logprob;                 // [P], entry 0 unused
  std::vector<int> rank;                       // [P]
  std::vector<std::vector<std::int32_t>> top;  // [P][N]
};
Ref reference(const Config& cfg, const std::vector<std::int32_t>& prompt, int n_top) {
  auto b = make_cpu_backend(ModelWeights::load(cfg.model.path), cpu_backend_options(cfg));
  const int V = b->model().vocab_size;
  const auto logits = teacher_forced_logits(*b, prompt, SparsityProfile{});
  Ref r;
  const std::size_t P = prompt.size();
  r.logprob.assign(P, 0.0);
  r.rank.assign(P, 0);
  r.top.resize(P);
  for (std::size_t q = 1; q < P; ++q) {
    const float* row = logits.data() + (q - 1) * static_cast<std::size_t>(V);
    const float x = row[prompt[q]];
    double m = -INFINITY, z = 0.0;
    for (int v = 0; v < V; ++v) m = std::max(m, static_cast<double>(row[v]));
    for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - m);
    r.logprob[q] = static_cast<double>(x) - m - std::log(z);
    r.rank[q] = 1 + static_cast<int>(std::count_if(row, row + V, [&](float v) { return v > x; }));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(V));
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b2) { return row[a] > row[b2]; });
    r.top[q].assign(ids.begin(), ids.begin() + n_top);
  }
  return r;
}

struct Mode {
  const char* name;
  bool chunked;
  bool sparse;
};
class PromptLogprobs : public ::testing::TestWithParam<Mode> {};

TEST_P(PromptLogprobs, EveryChoiceGetsThePromptScoredBeforeItsTokens) {
  const Mode m = GetParam();
  Config cfg = tiny_config();
  cfg.scheduler.chunked_prefill = m.chunked;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = m.chunked ? 24 : 512;  // chunked: several chunks
  if (m.sparse) {
    cfg.sparsity.enabled = true;
    cfg.sparsity.full_layers = 1;
    cfg.sparsity.policy = Policy::kScored;
    cfg.sparsity.capacity = 32;  // < the prompt: the sparse layers select
    cfg.sparsity.window = 8;
    cfg.sparsity.sinks = 2;
  }
  std::mt19937 rng(5);
  const auto prompt = random_prompt(rng, 70, 200);
  const int kTop = 3;
  const Ref ref = reference(cfg, prompt, kTop);

  auto e = Engine::create(cfg);
  Request plain = greedy_request(prompt, 5);
  plain.n = 2;
  const Outcome base = run(*e, plain);
  ASSERT_TRUE(base.error.empty()) << base.error;

  Request scored = plain;
  scored.prompt_logprobs = kTop;
  const Outcome got = run(*e, scored);
  ASSERT_TRUE(got.error.empty()) << got.error;
  for (std::size_t i = 0; i < got.choices.size(); ++i) {
    SCOPED_TRACE("choice " + std::to_string(i));
    const Choice& c = got.choices[i];
    EXPECT_EQ(c.prompt_events, 1);
    EXPECT_FALSE(c.prompt_after_token);
    EXPECT_EQ(c.tokens, base.choices[i].tokens);  // scoring changes nothing generated
    ASSERT_EQ(c.prompt.size(), prompt.size());
    EXPECT_EQ(c.prompt[0].token, prompt[0]);
    EXPECT_TRUE(c.prompt[0].top.empty());
    for (std::size_t q = 1; q < prompt.size(); ++q) {
      SCOPED_TRACE("position " + std::to_string(q));
      const TokenLogprob& lp = c.prompt[q];
      EXPECT_EQ(lp.token, prompt[q]);
      EXPECT_NEAR(lp.logprob, ref.logprob[q], 1e-4);
      EXPECT_EQ(lp.rank, ref.rank[q]);
      ASSERT_EQ(lp.top.size(), static_cast<std::size_t>(kTop));
      for (int k = 0; k < kTop; ++k) {
        EXPECT_EQ(lp.top[k].token, ref.top[q][k]);
        if (k > 0) {
          EXPECT_GE(lp.top[k - 1].logprob, lp.top[k].logprob);
        }
      }
      if (lp.rank == 1) {
        EXPECT_EQ(lp.top[0].token, lp.token);
      }
    }
  }
  const auto st = wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0; });
  EXPECT_EQ(st.pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Profiles, PromptLogprobs,
                         ::testing::Values(Mode{"FullChunked", true, false},
                                           Mode{"FullWhole", false, false},
                                           Mode{"ScoredChunked", true, true},
                                           Mode{"ScoredWhole", false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PromptLogprobsEngine, TakesNothingFromThePrefixCacheWhichStillServesTheOthers) {
  Config cfg = tiny_config();
  ASSERT_TRUE(cfg.cache.prefix_cache);  // (the default)
  std::mt19937 rng(9);
  const auto prompt = random_prompt(rng, 60, 200);
  const Ref ref = reference(cfg, prompt, 0);
  auto e = Engine::create(cfg);
  const Outcome first = run(*e, greedy_request(prompt, 3));
  ASSERT_TRUE(first.error.empty()) << first.error;
  ASSERT_TRUE(first.usage);
  EXPECT_EQ(first.usage->cached_tokens, 0);

  Request scored = greedy_request(prompt, 3);
  scored.prompt_logprobs = 0;
  const Outcome got = run(*e, scored);
  ASSERT_TRUE(got.error.empty()) << got.error;
  ASSERT_TRUE(got.usage);
  EXPECT_EQ(got.usage->cached_tokens, 0);  // computed, not taken from the cache
  EXPECT_EQ(got.choices[0].tokens, first.choices[0].tokens);
  ASSERT_EQ(got.choices[0].prompt.size(), prompt.size());
  for (std::size_t q = 1; q < prompt.size(); ++q) {
    EXPECT_NEAR(got.choices[0].prompt[q].logprob, ref.logprob[q], 1e-4) << q;
    EXPECT_TRUE(got.choices[0].prompt[q].top.empty());
  }
  const Outcome again = run(*e, greedy_request(prompt, 3));
  ASSERT_TRUE(again.usage);
  EXPECT_GT(again.usage->cached_tokens, 0);  // the cache still serves requests that may use it
  EXPECT_EQ(again.choices[0].tokens, first.choices[0].tokens);
}

// A pool too small for every sequence forces preemptions (victims recompute their prompt and
// output without scoring it again): every choice still gets each prompt token's entry once,
// equal to the reference, and the tokens the run without preemption gives. The victims here are
// decoding (none was preempted inside its prompt's chunks, so the resume of a partly scored
// prompt — prompt_lps.size() as the resume point — is not exercised).
TEST(PromptLogprobsEngine, PreemptionsKeepEveryEntryOnceAndCorrect) {
  Config cfg = tiny_config();
  cfg.cache.prefix_cache = false;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = 24;  // chunked prefill
  std::mt19937 rng(13);
  std::vector<Request> reqs;
  std::vector<Ref> refs;
  for (int i = 0; i < 8; ++i) {
    Request r = greedy_request(random_prompt(rng, 40 + 5 * i, 200), 30);
    r.prompt_logprobs = 1;
    refs.push_back(reference(cfg, *r.prompt_ids, 1));
    reqs.push_back(std::move(r));
  }
  std::vector<Outcome> want;
  {
    auto e = Engine::create(cfg);
    for (const auto& r : reqs) want.push_back(run(*e, r));
  }
  const std::size_t page_bytes = 2 * 2 * 16 * 16 * 4;  // (as the prefix-cache test's pool)
  cfg.cache.cpu_kv_bytes = 60 * page_bytes;
  auto e = Engine::create(cfg);
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& r : reqs) ss.push_back(e->submit(r));
  for (std::size_t i = 0; i < ss.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    Choice c;
    while (auto ev = ss[i]->next_blocking()) {
      ASSERT_TRUE(ev->error.empty()) << ev->error;
      if (!ev->prompt_logprobs.empty()) {
        ++c.prompt_events;
        c.prompt_after_token = c.prompt_after_token || !c.tokens.empty();
        c.prompt = ev->prompt_logprobs;
      }
      c.tokens.insert(c.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    }
    EXPECT_EQ(c.prompt_events, 1);
    EXPECT_FALSE(c.prompt_after_token);
    EXPECT_EQ(c.tokens, want[i].choices[0].tokens);
    const auto& p = *reqs[i].prompt_ids;
    ASSERT_EQ(c.prompt.size(), p.size());
    for (std::size_t q = 1; q < p.size(); ++q) {
      EXPECT_EQ(c.prompt[q].token, p[q]);
      EXPECT_NEAR(c.prompt[q].logprob, refs[i].logprob[q], 1e-4) << q;
    }
  }
  const auto st =
      wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0 && s.steps > 0; });
  EXPECT_GT(st.preemptions, 0u) << "the pool was meant to force preemptions";
  EXPECT_EQ(st.pages_used, 0);
}

TEST(PromptLogprobsEngine, AOneTokenPromptHasOnlyItsToken) {
  Config cfg = tiny_config();
  auto e = Engine::create(cfg);
  Request r = greedy_request({42}, 2);
  r.prompt_logprobs = 2;
  const Outcome got = run(*e, r);
  ASSERT_TRUE(got.error.empty()) << got.error;
  EXPECT_EQ(got.choices[0].prompt_events, 1);
  ASSERT_EQ(got.choices[0].prompt.size(), 1u);
  EXPECT_EQ(got.choices[0].prompt[0].token, 42);
  EXPECT_EQ(got.choices[0].tokens.size(), 2u);
}

TEST(PromptLogprobsEngine, ANegativeCountIsRefused) {
  auto e = Engine::create(tiny_config());
  Request r = greedy_request({1, 2, 3}, 2);
  r.prompt_logprobs = -2;
  try {
    e->submit(r);
    FAIL() << "accepted";
  } catch (const InvalidRequest& err) {
    EXPECT_EQ(err.param(), "prompt_logprobs");
  }
}

}  // namespace
}  // namespace strata

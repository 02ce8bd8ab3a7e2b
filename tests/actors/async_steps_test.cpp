// The pipelined step loop (scheduler.async_steps, docs/actors.md "Pipelined steps"): the same
// workloads through the engine with the synchronous loop on the CPU backend and with the
// pipelined loop on a backend that really defers (deferred_backend.h: results a step late,
// pending inputs fed from its own results) emit the same streams bit for bit: every event in
// order, token ids, text, logprobs (bit patterns), finish reasons, errors and usage counts;
// the same token and request totals; no page held afterwards; and the steps really overlapped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>

#include "deferred_backend.h"
#include "engine_fixture.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata::test {
namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// One request's stream, floats as bit patterns, timings left out: each choice's events in order,
// choice by choice, then the usage. How the choices' events interleave, and so which choice's
// last event carries the usage, depends on when the batcher admitted each choice, which differs
// between the two loops whenever a submission races a step (a flake of 2026-12-07 under load);
// the sampled tokens may not.
std::vector<std::string> trace(TokenStream& s) {
  std::vector<std::vector<std::string>> by_choice;
  std::string usage = "no usage";
  while (auto ev = s.next_blocking()) {
    std::ostringstream o;
    o << "i" << ev->index << " t[";
    for (auto t : ev->token_ids) o << t << ",";
    o << "] x'" << ev->text << "' l[";
    for (const auto& lp : ev->logprobs) {
      o << lp.token << ":" << bits(lp.logprob) << "{";
      for (const auto& t : lp.top) o << t.token << ":" << bits(t.logprob) << ",";
      o << "}";
    }
    o << "] f" << static_cast<int>(ev->finish) << " e'" << ev->error << "'";
    if (ev->usage) {
      const Usage& u = *ev->usage;
      std::ostringstream uo;
      uo << " u" << u.prompt_tokens << "/" << u.completion_tokens << "/" << u.cached_tokens << "/"
         << u.max_tokens << "/" << bits(u.compression_ratio);
      usage = uo.str();
    }
    const auto i = static_cast<std::size_t>(std::max(ev->index, 0));
    if (by_choice.size() <= i) by_choice.resize(i + 1);
    by_choice[i].push_back(o.str());
  }
  std::vector<std::string> out;
  for (const auto& c : by_choice) out.insert(out.end(), c.begin(), c.end());
  out.push_back(usage);
  return out;
}

struct RunResult {
  std::vector<std::vector<std::string>> streams;  // per request
  EngineStats stats;
};

// Submits `waves` of requests (a wave is submitted once the previous one is drained).
RunResult run(const Config& base, bool async, const std::vector<std::vector<Request>>& waves,
              std::shared_ptr<DeferredCounters> counters) {
  Config cfg = base;
  cfg.scheduler.async_steps = async;
  // (no counters: the plain CPU backend, pipelined through Backend's default submit/collect)
  auto e =
      async && counters ? Engine::create(cfg, deferred_factory(counters)) : Engine::create(cfg);
  RunResult r;
  for (const auto& wave : waves) {
    std::vector<std::shared_ptr<TokenStream>> ss;
    for (const auto& q : wave) ss.push_back(e->submit(q));
    for (auto& s : ss) r.streams.push_back(trace(*s));
  }
  r.stats = wait_stats(*e, [](const EngineStats& s) {
    return s.pages_used == 0 && s.running == 0 && s.waiting == 0 && s.preempted == 0;
  });
  return r;
}

// Runs the workload both ways and compares everything; returns the counters of the pipelined run.
std::shared_ptr<DeferredCounters> expect_identical(const Config& cfg,
                                                   const std::vector<std::vector<Request>>& waves,
                                                   RunResult* sync_out = nullptr) {
  auto counters = std::make_shared<DeferredCounters>();
  const RunResult a = run(cfg, false, waves, nullptr);
  const RunResult b = run(cfg, true, waves, counters);
  EXPECT_EQ(a.streams.size(), b.streams.size());
  for (std::size_t i = 0; i < a.streams.size() && i < b.streams.size(); ++i) {
    EXPECT_EQ(a.streams[i], b.streams[i]) << "request " << i << " differs";
  }
  EXPECT_EQ(a.stats.generation_tokens_total, b.stats.generation_tokens_total);
  EXPECT_EQ(a.stats.requests_finished, b.stats.requests_finished);
  EXPECT_EQ(a.stats.requests_aborted, b.stats.requests_aborted);
  for (const RunResult* r : {&a, &b}) {
    EXPECT_EQ(r->stats.pages_used, 0) << "pages held after the workload";
    EXPECT_EQ(r->stats.running, 0);
  }
  EXPECT_GT(counters->overlapped.load(), 0) << "the pipelined loop never had two steps out";
  EXPECT_GT(counters->pending_rows.load(), 0) << "no decode took its input on the backend";
  EXPECT_EQ(counters->direct_steps.load(), 0);
  EXPECT_EQ(counters->changed_plans.load(), 0) << "a plan changed while it was in flight";
  if (sync_out) *sync_out = a;
  return counters;
}

Config base_config() {
  Config c = tiny_config();
  c.scheduler.max_num_seqs = 16;
  c.scheduler.max_num_batched_tokens = 96;  // long prompts are chunked, beside decodes
  return c;
}

Request req(std::mt19937& rng, int len, int max_tokens) {
  Request r = greedy_request(random_prompt(rng, len, 200), max_tokens);
  r.params.logprobs = 2;
  return r;
}

TEST(AsyncSteps, GreedyIsIdentical) {
  std::mt19937 rng(1);
  std::vector<Request> w;
  for (int i = 0; i < 10; ++i) w.push_back(req(rng, 3 + 17 * i % 120, 4 + 7 * (i % 5)));
  const auto n = expect_identical(base_config(), {w});
  EXPECT_GT(n->submits.load(), 20);
}

TEST(AsyncSteps, MaxTokensOfOneAndTwo) {
  std::mt19937 rng(2);
  std::vector<Request> w;
  for (int i = 0; i < 6; ++i) w.push_back(req(rng, 5 + 9 * i, 1 + i % 2));
  w.push_back(req(rng, 30, 12));  // keeps the loop busy around them
  expect_identical(base_config(), {w});
}

TEST(AsyncSteps, SeededSamplingWithSeveralChoicesIsIdentical) {
  std::mt19937 rng(3);
  std::vector<Request> w;
  for (int i = 0; i < 8; ++i) {
    Request r = req(rng, 4 + 11 * i, 10 + 3 * i);
    r.params.temperature = 0.9f;
    r.params.top_p = 0.85f;
    r.params.top_k = i % 2 ? 40 : 0;
    r.params.seed = 1000 + i;
    r.n = 1 + i % 3;
    w.push_back(std::move(r));
  }
  expect_identical(base_config(), {w});
}

TEST(AsyncSteps, PenaltiesSeeTheJustSampledToken) {
  std::mt19937 rng(4);
  std::vector<Request> w;
  for (int i = 0; i < 8; ++i) {
    Request r = req(rng, 6 + 13 * i, 24);
    r.params.temperature = i % 2 ? 0.0f : 0.8f;
    r.params.seed = 77 + i;
    r.params.repetition_penalty = 1.0f + 0.15f * static_cast<float>(1 + i % 3);
    r.params.presence_penalty = 0.4f * static_cast<float>(i % 3);
    r.params.frequency_penalty = 0.6f * static_cast<float>((i + 1) % 3);
    w.push_back(std::move(r));
  }
  expect_identical(base_config(), {w});
}

// Stop strings, stop token ids (the EOS path) and min_tokens, chosen from a reference run so
// that they fire part-way through the outputs.
TEST(AsyncSteps, StopsEosAndMinTokensSeenOneStepLateEmitNothingExtra) {
  std::mt19937 rng(5);
  std::vector<Request> plain;
  for (int i = 0; i < 9; ++i) {
    Request r = req(rng, 5 + 10 * i, 30);
    r.params.temperature = 0.7f;
    r.params.seed = 500 + i;
    plain.push_back(std::move(r));
  }
  // The reference outputs.
  std::vector<Collected> ref;
  {
    auto e = Engine::create(base_config());
    for (const auto& r : plain) ref.push_back(drain(*e->submit(r)));
  }
  std::vector<Request> w;
  int stops = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    Request r = plain[i];
    const auto& toks = ref[i].tokens[0];
    const auto& text = ref[i].text[0];
    switch (i % 3) {
      case 0:  // a stop string ending in the middle of the text (and of a token's text)
        if (text.size() > 6) {
          r.params.stop = {text.substr(text.size() / 2, 3)};
          ++stops;
        }
        break;
      case 1:  // a stop token id (the EOS branch): its first occurrence ends the output
        r.params.ignore_eos = false;
        r.params.stop_token_ids = {toks[toks.size() / 3]};
        break;
      case 2:  // the same with min_tokens past its first occurrence
        r.params.ignore_eos = false;
        r.params.stop_token_ids = {toks[2]};
        r.params.min_tokens = 6;
        break;
    }
    w.push_back(std::move(r));
  }
  EXPECT_GT(stops, 0);
  RunResult sync;
  expect_identical(base_config(), {w}, &sync);
  int stopped = 0;
  for (const auto& s : sync.streams)
    for (const auto& ev : s) stopped += ev.find(" f1 ") != std::string::npos;
  EXPECT_GE(stopped, 5) << "the stops were meant to fire";
}

TEST(AsyncSteps, PreemptionUnderATightPoolIsIdentical) {
  Config cfg = tiny_config();
  const std::size_t page_bytes = 2 * 2 * 16 * 16 * 4;
  cfg.cache.cpu_kv_bytes = 60 * page_bytes;  // cannot hold 12 x 3 layers x 4 pages
  cfg.cache.prefix_cache = false;
  std::mt19937 rng(6);
  std::vector<Request> w;
  for (int i = 0; i < 12; ++i) w.push_back(req(rng, 20, 40));
  auto counters = std::make_shared<DeferredCounters>();
  const RunResult a = run(cfg, false, {w}, nullptr);
  const RunResult b = run(cfg, true, {w}, counters);
  EXPECT_GT(a.stats.preemptions, 0u);
  EXPECT_GT(b.stats.preemptions, 0u);
  ASSERT_EQ(a.streams.size(), b.streams.size());
  for (std::size_t i = 0; i < a.streams.size(); ++i)
    EXPECT_EQ(a.streams[i], b.streams[i]) << "request " << i;
  EXPECT_EQ(a.stats.generation_tokens_total, b.stats.generation_tokens_total);
  EXPECT_EQ(b.stats.pages_used, 0);
  EXPECT_GT(counters->overlapped.load(), 0);
  EXPECT_EQ(counters->changed_plans.load(), 0);
}

TEST(AsyncSteps, SparseProfileIsIdentical) {
  Config cfg = base_config();
  cfg.sparsity = test::sparse_profile(Policy::kScored, 1, 40, 8, 2);
  std::mt19937 rng(7);
  std::vector<Request> w;
  for (int i = 0; i < 10; ++i) {
    Request r = req(rng, 10 + 19 * i % 110, 20 + i);  // past the capacity of 40 too
    r.params.temperature = i % 2 ? 0.8f : 0.0f;
    r.params.seed = 9 + i;
    r.params.frequency_penalty = 0.3f;
    w.push_back(std::move(r));
  }
  expect_identical(cfg, {w});
}

TEST(AsyncSteps, PrefixCacheHitsAreIdentical) {
  Config cfg = base_config();
  cfg.cache.prefix_cache = true;
  std::mt19937 rng(8);
  const auto shared = random_prompt(rng, 70, 200);
  auto with_tail = [&](int tail, int max_tokens) {
    Request r = greedy_request(shared, max_tokens);
    auto p = random_prompt(rng, tail, 200);
    r.prompt_ids->insert(r.prompt_ids->end(), p.begin(), p.end());
    r.params.logprobs = 1;
    return r;
  };
  std::vector<std::vector<Request>> waves = {{with_tail(5, 20)},
                                             {with_tail(9, 18), with_tail(30, 12)},
                                             {with_tail(1, 25), with_tail(17, 7)}};
  RunResult sync;
  expect_identical(cfg, waves, &sync);
  int hits = 0;
  for (std::size_t i = 1; i < sync.streams.size(); ++i)
    hits += sync.streams[i].back().find(" u") != std::string::npos &&
            sync.streams[i].back().find("/0/") == std::string::npos;
  EXPECT_GT(hits, 0) << "later waves were meant to hit the prefix cache";
}

// Aborts land at moments that differ between runs: an aborted stream is a prefix of its
// uninterrupted output, ends with `abort`, and the survivors are unchanged; no page is held.
TEST(AsyncSteps, AbortsMidStreamFreeEverything) {
  Config cfg = base_config();
  cfg.cache.prefix_cache = false;
  std::mt19937 rng(9);
  std::vector<Request> w;
  for (int i = 0; i < 12; ++i) w.push_back(req(rng, 4 + 7 * i, 40));
  std::vector<std::vector<std::int32_t>> ref;
  {
    auto e = Engine::create(cfg);
    std::vector<std::shared_ptr<TokenStream>> ss;
    for (const auto& r : w) ss.push_back(e->submit(r));
    for (auto& s : ss) ref.push_back(drain(*s).tokens[0]);
  }
  auto counters = std::make_shared<DeferredCounters>();
  cfg.scheduler.async_steps = true;
  auto e = Engine::create(cfg, deferred_factory(counters));
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& r : w) ss.push_back(e->submit(r));
  // Every request runs at once: when the first has 3 tokens the others are mid-stream too.
  std::vector<std::vector<std::int32_t>> got(ss.size());
  std::vector<FinishReason> fin(ss.size(), FinishReason::kNone);
  auto take = [&](std::size_t i, const StreamEvent& ev) {
    got[i].insert(got[i].end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish != FinishReason::kNone) fin[i] = ev.finish;
  };
  while (got[0].size() < 3) {
    auto ev = ss[0]->next_blocking();
    ASSERT_TRUE(ev.has_value());
    take(0, *ev);
  }
  for (std::size_t i = 1; i < ss.size(); i += 2) e->abort(ss[i]->id());
  for (std::size_t i = 0; i < ss.size(); ++i) {
    while (auto ev = ss[i]->next_blocking()) take(i, *ev);
    ASSERT_LE(got[i].size(), ref[i].size());
    EXPECT_TRUE(std::equal(got[i].begin(), got[i].end(), ref[i].begin())) << "request " << i;
    if (i % 2) {
      EXPECT_EQ(fin[i], FinishReason::kAbort) << "request " << i;
      EXPECT_LT(got[i].size(), ref[i].size());
    } else {
      EXPECT_EQ(fin[i], FinishReason::kLength);
      EXPECT_EQ(got[i], ref[i]);
    }
  }
  const auto st = wait_stats(*e, [](const EngineStats& s) {
    return s.pages_used == 0 && s.running == 0 && s.requests_aborted == 6;
  });
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.requests_aborted, 6u);
  EXPECT_EQ(st.requests_finished, 6u);
  EXPECT_GT(counters->overlapped.load(), 0);
  EXPECT_EQ(counters->changed_plans.load(), 0);
}

// The guardrail's replays ride the pipelined loop (sparse profile, every request sampled), and a
// synchronous backend works under async_steps through Backend's defaults.
TEST(AsyncSteps, ReplaysAndTheDefaultSubmitCollect) {
  Config cfg = base_config();
  cfg.sparsity = test::sparse_profile(Policy::kScored, 1, 40, 8, 2);
  cfg.quality_monitor.sample_rate = 1.0;
  cfg.quality_monitor.max_pending = 64;
  std::mt19937 rng(10);
  std::vector<std::vector<Request>> waves(3);
  for (int i = 0; i < 9; ++i) waves[i % 3].push_back(req(rng, 50 + 7 * i, 10 + i));
  const auto counters = expect_identical(cfg, waves);
  for (bool deferred : {true, false}) {
    Config c = cfg;
    c.scheduler.async_steps = true;
    auto n = std::make_shared<DeferredCounters>();
    auto e = deferred ? Engine::create(c, deferred_factory(n)) : Engine::create(c);
    for (const auto& w : waves) {
      std::vector<std::shared_ptr<TokenStream>> ss;
      for (const auto& q : w) ss.push_back(e->submit(q));
      for (auto& s : ss) EXPECT_EQ(drain(*s).finish[0], FinishReason::kLength);
    }
    const auto st = wait_stats(*e, [](const EngineStats& s) {
      return s.quality && s.quality->replays_completed + s.replays.dropped >= 9 &&
             s.pages_used == 0;
    });
    EXPECT_EQ(st.replays.sampled, 9u) << (deferred ? "deferred" : "default");
    ASSERT_TRUE(st.quality);
    EXPECT_EQ(st.quality->replays_completed + st.replays.dropped, 9u);
    EXPECT_GT(st.replays.finished, 0u);
    EXPECT_EQ(st.pages_used, 0);
  }
}

// Steps by how they ran (EngineStats::sync_steps, strata_sync_steps_total) and by kind: the
// synchronous loop counts every step as sync_loop; a backend that runs replays' return_logits
// steps synchronously (as the CUDA backend does) gets them counted under return_logits and the
// rest as pipelined, with the outputs still those of the synchronous loop; the plain CPU backend
// (Backend's default submit) under `backend`.
TEST(AsyncSteps, SyncStepsAreCountedByReason) {
  Config cfg = base_config();
  cfg.sparsity = test::sparse_profile(Policy::kScored, 1, 40, 8, 2);
  cfg.quality_monitor.sample_rate = 1.0;
  cfg.quality_monitor.max_pending = 64;
  std::mt19937 rng(11);
  std::vector<std::vector<Request>> waves(2);
  for (int i = 0; i < 6; ++i) waves[i % 2].push_back(req(rng, 40 + 9 * i, 8 + i));
  const auto idx = [](SyncReason r) { return static_cast<std::size_t>(r); };
  struct Run {
    std::vector<std::vector<std::string>> streams;
    EngineStats stats;
  };
  auto go = [&](bool async, std::shared_ptr<DeferredCounters> n) {
    Config c = cfg;
    c.scheduler.async_steps = async;
    auto e = n ? Engine::create(c, deferred_factory(n)) : Engine::create(c);
    Run r;
    for (const auto& w : waves) {
      std::vector<std::shared_ptr<TokenStream>> ss;
      for (const auto& q : w) ss.push_back(e->submit(q));
      for (auto& s : ss) r.streams.push_back(trace(*s));
    }
    r.stats = wait_stats(*e, [&](const EngineStats& s) {
      std::uint64_t sum = 0;
      for (auto k : s.sync_steps) sum += k;
      return s.quality && s.quality->replays_completed + s.replays.dropped >= 6 &&
             s.pages_used == 0 && s.running == 0 && sum == s.steps &&
             (!n || static_cast<long>(s.sync_steps[idx(SyncReason::kReturnLogits)]) ==
                        n->sync_steps.load());
    });
    return r;
  };
  const auto kinds_add_up = [](const EngineStats& s) {
    EXPECT_EQ(s.steps_decode + s.steps_mixed + s.steps_prefill, s.steps);
    EXPECT_GT(s.steps_decode, 0u);
    EXPECT_GT(s.steps_prefill + s.steps_mixed, 0u);
  };
  const Run a = go(false, nullptr);
  EXPECT_EQ(a.stats.sync_steps[idx(SyncReason::kSyncLoop)], a.stats.steps);
  kinds_add_up(a.stats);

  auto n = std::make_shared<DeferredCounters>();
  n->sync_return_logits = true;
  const Run b = go(true, n);
  ASSERT_EQ(a.streams.size(), b.streams.size());
  for (std::size_t i = 0; i < a.streams.size(); ++i)
    EXPECT_EQ(a.streams[i], b.streams[i]) << "request " << i << " differs";
  EXPECT_GT(n->sync_steps.load(), 0) << "no replay asked for logits";
  EXPECT_EQ(static_cast<long>(b.stats.sync_steps[idx(SyncReason::kReturnLogits)]),
            n->sync_steps.load());
  EXPECT_EQ(b.stats.sync_steps[idx(SyncReason::kNone)] +
                b.stats.sync_steps[idx(SyncReason::kReturnLogits)],
            b.stats.steps);
  EXPECT_GT(b.stats.sync_steps[idx(SyncReason::kNone)], 0u);
  EXPECT_EQ(b.stats.sync_steps[idx(SyncReason::kSyncLoop)], 0u);
  EXPECT_GT(n->overlapped.load(), 0);
  EXPECT_EQ(n->changed_plans.load(), 0);
  EXPECT_EQ(n->direct_steps.load(), 0);
  kinds_add_up(b.stats);

  const Run c = go(true, nullptr);
  EXPECT_EQ(c.streams, a.streams);
  EXPECT_EQ(c.stats.sync_steps[idx(SyncReason::kBackend)], c.stats.steps);
  kinds_add_up(c.stats);
}

TEST(AsyncSteps, OnByDefaultAndParsed) {
  EXPECT_TRUE(Config{}.scheduler.async_steps);
  EXPECT_TRUE(parse_config_yaml("scheduler:\n  async_steps: true\n", "test").scheduler.async_steps);
  EXPECT_FALSE(
      parse_config_yaml("scheduler:\n  async_steps: false\n", "test").scheduler.async_steps);
}

}  // namespace
}  // namespace strata::test

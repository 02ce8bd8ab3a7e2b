// The load generator's clock against a server whose timing is known
// (tests/tools/sse_stub_server.h).
#include "tools/bench/load_gen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/tools/sse_stub_server.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/report.h"

namespace strata::bench {
namespace {

using testing::SseStubServer;
using testing::StubOptions;

LoadOptions options_for(const SseStubServer& s) {
  LoadOptions o;
  o.port = s.port();
  o.input_tokens = 4;
  o.output_tokens = 20;
  o.num_prompts = 4;
  o.concurrency = 1;
  return o;
}

// The stub sends the first token 50 ms after the request and one every 10 ms after it, 20 in all:
// E2E ≈ 240 ms. The bounds are wide enough for a loaded 2-core machine under sanitizers (a late
// client only moves TTFT up and squeezes some gaps to 0 while widening others), yet the old reader
// (one async_read into a 16 KiB buffer, returning at the end of a short response) fails them:
// it reported TTFT ≈ E2E and every ITL 0.
TEST(LoadGen, TimestampsEachEventAsItArrives) {
  SseStubServer stub({.first_token_ms = 50, .token_interval_ms = 10});
  const auto o = options_for(stub);
  double duration = 0;
  const auto recs = run_load(o, &duration);
  ASSERT_EQ(recs.size(), 4u);
  for (const auto& r : recs) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_tokens, 20);
    EXPECT_EQ(r.prompt_tokens, 4);
    // TTFT in [45, 200] ms: never earlier than the stub's 50 ms (less 5 for clock granularity).
    EXPECT_GE(r.ttft_s * 1e3, 45);
    EXPECT_LE(r.ttft_s * 1e3, 200);
    // The last token leaves 240 ms after the request: E2E - TTFT is at least 100 ms unless the
    // client was stalled for > 90 ms right at the first token.
    EXPECT_GE((r.e2e_s - r.ttft_s) * 1e3, 100);
    EXPECT_GE(r.e2e_s * 1e3, 235);
    EXPECT_LE(r.itl_s.size(), 19u);  // one gap per token after the first (fewer if coalesced)
    EXPECT_GE(r.itl_s.size(), 5u);
  }
  const auto level = aggregate(recs, duration);
  EXPECT_EQ(level.completed, 4);
  EXPECT_EQ(level.failed, 0);
  std::printf(
      "stub 50 ms + 20 x 10 ms: TTFT median %.1f ms, ITL median %.1f ms (mean %.1f), "
      "TPOT median %.1f ms, E2E median %.1f ms\n",
      level.ttft_ms.median, level.itl_ms.median, level.itl_ms.mean, level.tpot_ms.median,
      level.e2e_ms.median);
  EXPECT_GE(level.itl_ms.median, 8);
  EXPECT_LE(level.itl_ms.median, 40);
  // TPOT = (E2E - TTFT) / 19 = 10 ms when on time; a stalled client moves it either way.
  EXPECT_GE(level.tpot_ms.median, 5);
  EXPECT_LE(level.tpot_ms.median, 40);
  EXPECT_LT(level.ttft_ms.median, 0.5 * level.e2e_ms.median);
}

TEST(LoadGen, KeepAliveReusesConnectionsAndTimesTheSame) {
  SseStubServer stub({.first_token_ms = 30, .token_interval_ms = 10});
  auto o = options_for(stub);
  o.keep_alive = true;
  o.output_tokens = 5;
  o.concurrency = 2;
  double duration = 0;
  const auto recs = run_load(o, &duration);
  ASSERT_EQ(recs.size(), 4u);
  for (const auto& r : recs) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GE(r.ttft_s * 1e3, 25);
    EXPECT_GE(r.e2e_s * 1e3, 65);
  }
  EXPECT_EQ(stub.wait_completions(4), 4);
}

TEST(LoadGen, DiscoversTheModelWithTheApiKey) {
  SseStubServer stub({.api_key = "k1", .first_token_ms = 1, .token_interval_ms = 1});
  auto o = options_for(stub);
  o.output_tokens = 3;
  EXPECT_THROW(discover_model(o), std::runtime_error);  // 401 without the key
  try {
    discover_model(o);
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 401"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--api-key"), std::string::npos) << e.what();
  }
  o.api_key = "k1";
  EXPECT_EQ(discover_model(o), "stub-model");
  double duration = 0;
  const auto recs = run_load(o, &duration);
  for (const auto& r : recs) EXPECT_TRUE(r.ok) << r.error;
}

TEST(LoadGen, FailuresSayWhy) {
  SseStubServer stub({.api_key = "k1"});
  auto o = options_for(stub);
  o.model = "stub-model";  // past discovery: every request gets the 401
  double duration = 0;
  auto recs = run_load(o, &duration);
  ASSERT_EQ(recs.size(), 4u);
  const auto errors = count_errors(recs);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].second, 4);
  EXPECT_EQ(errors[0].first, "HTTP 401: stub: a valid API key is required");

  o.api_key = "k1";
  o.model = "other";
  recs = run_load(o, &duration);
  EXPECT_EQ(count_errors(recs).at(0).first, "HTTP 404: stub: no such model");

  // A port nothing listens on (the stub's, once it is gone).
  int dead_port = 0;
  {
    SseStubServer gone({});
    dead_port = gone.port();
  }
  o.port = dead_port;
  recs = run_load(o, &duration);
  const auto refused = count_errors(recs);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].first.find("Connection refused"), std::string::npos) << refused[0].first;
  EXPECT_EQ(aggregate(recs, duration).failed, 4);
}

// A record whose tokens arrive at send + ttft + k * gap (k = 0 .. n-1).
RequestRecord stream_at(double send, double ttft, double gap, int n, int prompt = 7) {
  RequestRecord r;
  r.ok = true;
  r.prompt_tokens = prompt;
  r.output_tokens = n;
  r.send_s = send;
  r.ttft_s = ttft;
  r.itl_s.assign(static_cast<std::size_t>(n - 1), gap);
  r.e2e_s = ttft + gap * (n - 1);
  return r;
}

// The steady window, by hand (binary fractions, so the sums are exact): two slots, tokens every
// 0.125 s after a 0.5 s first token. The ramp round's first tokens land at 0.5; measured requests
// are sent at 1.0, 1.5, 2.0 and 3.0, so the window is [1.0, 3.0).
TEST(SteadyWindow, CountsEveryEventInsideTheWindow) {
  const std::vector<RequestRecord> ramp = {stream_at(0, 0.5, 0.125, 5),   // tokens 0.5 .. 1.0
                                           stream_at(0, 0.5, 0.125, 9)};  // 0.5 .. 1.5
  const std::vector<RequestRecord> measured = {
      stream_at(1.0, 0.5, 0.125, 5),   // 1.5 .. 2.0: 5 in the window, finishes inside
      stream_at(1.5, 0.5, 0.125, 9),   // 2.0 .. 3.0: 8 inside (3.0 is not), finishes at 3.0
      stream_at(2.0, 0.5, 0.125, 5),   // 2.5 .. 3.0: 4 inside
      stream_at(3.0, 0.5, 0.125, 5)};  // none inside
  const auto w = steady_window(measured, ramp);
  EXPECT_FALSE(w.transient);
  EXPECT_DOUBLE_EQ(w.start_s, 1.0);
  EXPECT_DOUBLE_EQ(w.end_s, 3.0);
  // ramp: 1.0 (1) + 1.0 .. 1.5 (5); measured: 5 + 8 + 4.
  EXPECT_DOUBLE_EQ(w.output_tokens, 23);
  EXPECT_EQ(w.input_tokens, 3 * 7);  // sent at 1.0, 1.5, 2.0
  EXPECT_EQ(w.finished, 3);          // ramp #1 at 1.0, ramp #2 at 1.5, measured #1 at 2.0
  LevelResult r = aggregate(measured, 99);
  apply_steady_window(r, w);
  EXPECT_DOUBLE_EQ(r.duration_s, 2.0);
  EXPECT_DOUBLE_EQ(r.output_throughput, 11.5);
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(r.total_throughput, (21 + 23) / 2.0);
  // Latencies stay those of the measured requests.
  EXPECT_NEAR(r.ttft_ms.median, 500, 1e-6);

  // Every measured send before the pile-up is worked off: first -> last measured send, flagged.
  const auto early =
      steady_window({stream_at(0.125, 0.5, 0.125, 5), stream_at(0.25, 0.5, 0.125, 5)},
                    {stream_at(0, 2.0, 0.125, 5)});
  EXPECT_TRUE(early.transient);
  EXPECT_DOUBLE_EQ(early.start_s, 0.125);
  EXPECT_DOUBLE_EQ(early.end_s, 0.25);
  // One measured request: no window.
  EXPECT_EQ(steady_window({stream_at(1, 0.5, 0.125, 5)}, ramp).length(), 0);
}

// Steady state against the stub (50 ms first token, then one token every 10 ms; 20 tokens per
// request, four slots): a slot serves 20 tokens per 240 ms, so four give ≈ 333 tokens/s, ≈ 307
// inside this short window (the measured requests' first 50 ms carry no token). With as many
// measured requests as slots, their own tokens over first send -> last finish read ≈ 205 (the
// drain at the end runs with fewer than four streams): the bound below fails that.
TEST(LoadGen, SteadyStateThroughputIsTheWindowsRate) {
  SseStubServer stub({.first_token_ms = 50, .token_interval_ms = 10});
  auto o = options_for(stub);
  o.steady_state = true;
  o.concurrency = 4;
  o.num_prompts = 4;
  double duration = 0;
  LoadExcluded ex;
  const auto recs = run_load(o, &duration, &ex);
  ASSERT_EQ(recs.size(), 4u);
  ASSERT_EQ(ex.ramp.size(), 4u);
  for (const auto& r : recs) ASSERT_TRUE(r.ok) << r.error;
  const auto naive = aggregate(recs, duration);
  auto steady = naive;
  const auto w = steady_window(recs, ex.ramp);
  apply_steady_window(steady, w);
  std::printf(
      "steady window %.0f ms: %.0f tok/s (measured only, first send -> last finish: %.0f)\n",
      w.length() * 1e3, steady.output_throughput, naive.output_throughput);
  EXPECT_FALSE(w.transient);
  EXPECT_GE(steady.output_throughput, 250);
  EXPECT_LE(steady.output_throughput, 420);
}

TEST(LoadGen, SharedPrefixPromptsStartAlikeAndEndApart) {
  SseStubServer stub({.first_token_ms = 1, .token_interval_ms = 1});
  auto o = options_for(stub);
  o.output_tokens = 3;
  o.num_prompts = 6;
  o.concurrency = 2;
  o.workload = LoadOptions::Workload::kSharedPrefix;
  o.shared_prefix = 40;
  o.input_tokens = 7;
  double duration = 0;
  const auto recs = run_load(o, &duration);
  ASSERT_EQ(recs.size(), 6u);
  for (const auto& r : recs) EXPECT_TRUE(r.ok) << r.error;
  const auto ps = stub.prompts();
  ASSERT_EQ(ps.size(), 6u);
  std::set<std::vector<std::int64_t>> tails;
  for (const auto& p : ps) {
    ASSERT_EQ(p.size(), 47u);
    EXPECT_TRUE(std::equal(p.begin(), p.begin() + 40, ps[0].begin()));  // one shared prefix
    tails.insert(std::vector<std::int64_t>(p.begin() + 40, p.end()));
  }
  EXPECT_EQ(tails.size(), 6u);  // each request its own suffix
}

TEST(LoadGen, MultiTurnResendsTheConversationAfterEachAnswer) {
  SseStubServer stub({.first_token_ms = 5, .token_interval_ms = 2});
  auto o = options_for(stub);
  o.workload = LoadOptions::Workload::kMultiTurn;
  o.input_tokens = 20;
  o.output_tokens = 4;
  o.turn_tokens = 6;
  o.turns = 3;
  o.num_prompts = 5;  // -> 2 conversations of 3 turns
  o.concurrency = 2;
  double duration = 0;
  const auto recs = run_load(o, &duration);
  ASSERT_EQ(recs.size(), 6u);
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const auto& r = recs[i];
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.turn, static_cast<int>(i % 3));
    if (r.turn > 0) {  // sent when the previous answer had ended
      const auto& prev = recs[i - 1];
      EXPECT_GE(r.send_s + 1e-4, prev.send_s + prev.e2e_s);
    }
  }
  // Every later turn's prompt is the previous one extended (answer + new tokens).
  const auto ps = stub.prompts();
  ASSERT_EQ(ps.size(), 6u);
  std::multiset<std::size_t> sizes;
  for (const auto& p : ps) sizes.insert(p.size());
  EXPECT_EQ(sizes, (std::multiset<std::size_t>{20, 20, 30, 30, 40, 40}));
  int extended = 0;
  for (const auto& p : ps)
    for (const auto& q : ps)
      if (q.size() == p.size() + 10 && std::equal(p.begin(), p.end(), q.begin())) ++extended;
  EXPECT_EQ(extended, 4);
  const std::string table = format_prefix_cache(recs);
  EXPECT_NE(table.find("turn 3: 2 requests"), std::string::npos) << table;
}

}  // namespace
}  // namespace strata::bench

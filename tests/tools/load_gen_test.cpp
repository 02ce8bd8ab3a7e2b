// The load generator's clock against a server whose timing is known
// (tests/tools/sse_stub_server.h).
#include "tools/bench/load_gen.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/tools/sse_stub_server.h"
#include "tools/bench/bench_stats.h"

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
  EXPECT_EQ(stub.completions(), 4);
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

}  // namespace
}  // namespace strata::bench

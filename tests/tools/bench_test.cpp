#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>

#include "runtime/model/make_model.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/load_gen.h"
#include "tools/bench/report.h"
#include "tools/bench/roofline.h"

namespace strata::bench {
namespace {

TEST(BenchStats, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  const auto s = summarize({10, 20, 30});
  EXPECT_DOUBLE_EQ(s.mean, 20);
  EXPECT_DOUBLE_EQ(s.median, 20);
  EXPECT_DOUBLE_EQ(summarize({}).p99, 0);
  EXPECT_NEAR(s.std, std::sqrt(200.0 / 3), 1e-12);  // population std, as numpy's default
  EXPECT_DOUBLE_EQ(s.p95, 29);
}

TEST(BenchStats, AggregateFollowsVllmDefinitions) {
  RequestRecord a;
  a.ok = true;
  a.prompt_tokens = 100;
  a.output_tokens = 11;
  a.ttft_s = 0.5;
  a.e2e_s = 1.5;  // TPOT = (1.5 - 0.5) / 10 = 100 ms
  a.itl_s = {0.1, 0.1};
  RequestRecord b = a;
  b.ttft_s = 0.7;
  b.e2e_s = 2.7;  // TPOT = 200 ms
  RequestRecord c;
  c.ok = false;
  c.error = "HTTP 401: no key";
  const auto r = aggregate({a, b, c}, 2.0);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0], (std::pair<std::string, int>{"HTTP 401: no key", 1}));
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.total_output_tokens, 22);
  EXPECT_DOUBLE_EQ(r.output_throughput, 11);
  EXPECT_DOUBLE_EQ(r.total_throughput, 111);
  EXPECT_DOUBLE_EQ(r.request_throughput, 1);
  EXPECT_NEAR(r.tpot_ms.mean, 150, 1e-9);
  EXPECT_NEAR(r.ttft_ms.median, 600, 1e-9);
  EXPECT_NEAR(r.itl_ms.mean, 100, 1e-9);
  // JSON round trip
  const auto back = level_from_json(to_json(r));
  EXPECT_EQ(back.completed, 2);
  EXPECT_DOUBLE_EQ(back.tpot_ms.mean, r.tpot_ms.mean);
  EXPECT_DOUBLE_EQ(back.ttft_ms.std, r.ttft_ms.std);
  EXPECT_EQ(back.errors, r.errors);
}

TEST(Roofline, Llama3DefaultProfileArithmetic) {
  const auto m = preset_config("llama3-8b");
  SparsityProfile p;
  p.enabled = true;
  const Roofline full(m, {}), sparse(m, p.resolve(32));
  // 128 KiB of K+V per token over 32 layers in bf16: 2 * 8 * 128 * 2 bytes per layer.
  EXPECT_DOUBLE_EQ(full.kv_bytes_per_token_layer(), 4096);
  EXPECT_DOUBLE_EQ(full.full_kv_bytes(4500), 4500.0 * 32 * 4096);
  // DESIGN.md: 3*4500 + 29*512 = 28,348 token-layers kept of 144,000.
  EXPECT_DOUBLE_EQ(sparse.kept_kv_bytes(4500, 500), 28348.0 * 4096);
  EXPECT_NEAR(full.kept_kv_bytes(4500, 500) / sparse.kept_kv_bytes(4500, 500), 5.08, 0.01);
  // Weights read per step: all parameters but the input embedding, bf16 (~15 GB for 8B).
  EXPECT_NEAR(full.weight_bytes_per_step() / 1e9, (8.03e9 - 128256.0 * 4096) * 2 / 1e9, 0.05);
  // Prefill dominates equally; decode gains: sparse beats full at high concurrency only.
  const Workload w{4000, 500};
  const double f = full.best_output_throughput(256, w, 0),
               s = sparse.best_output_throughput(256, w, 0);
  EXPECT_GT(s / f, 1.2);
  EXPECT_LT(s / f, 2.0);
  EXPECT_NEAR(sparse.best_output_throughput(1, w, 0) / full.best_output_throughput(1, w, 0), 1.0,
              0.1);
  // A KV budget limits concurrency: 8 GiB holds 8 GiB / (4500*32*4096) = 14 full sequences.
  EXPECT_EQ(full.max_sequences(8.0 * (1ull << 30), w), 14);
  EXPECT_EQ(sparse.max_sequences(8.0 * (1ull << 30), w), 73);
}

TEST(Report, MergeReplacesSameLevelsAndRejectsOtherWorkloads) {
  Report a, b;
  a.workload = b.workload = "10 in / 5 out";
  LevelResult l;
  l.config = "full";
  l.concurrency = 4;
  l.output_throughput = 1;
  a.levels.push_back(l);
  l.output_throughput = 2;
  b.levels.push_back(l);
  l.concurrency = 8;
  b.levels.push_back(l);
  const auto m = merge_reports({a, b});
  ASSERT_EQ(m.levels.size(), 2u);
  EXPECT_DOUBLE_EQ(m.levels[0].output_throughput, 2);
  Report c;
  c.workload = "other";
  EXPECT_THROW(merge_reports({a, c}), std::runtime_error);
  const std::string path =
      ::testing::TempDir() + "/bench_report.json" + "." + std::to_string(::getpid());
  write_report_json(path, m);
  EXPECT_EQ(read_report_json(path).levels.size(), 2u);
  const auto svg = svg_line_chart("t", "x", "y", {{"full", {{1, 10}, {4, 20}}}});
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find(">full<"), std::string::npos);
}

TEST(LoadGen, ParsesPrometheusText) {
  const auto m = parse_prometheus(
      "# HELP x\n# TYPE vllm:prompt_tokens_total "
      "counter\nvllm:prompt_tokens_total{model_name=\"m\"} 42\n"
      "vllm:request_success_total{finished_reason=\"stop\"} "
      "3\nvllm:request_success_total{finished_reason=\"length\"} 4\n"
      "plain 1.5\n");
  EXPECT_DOUBLE_EQ(m.at("vllm:prompt_tokens_total"), 42);
  EXPECT_DOUBLE_EQ(m.at("vllm:request_success_total"), 7);
  EXPECT_DOUBLE_EQ(m.at("plain"), 1.5);
  EXPECT_EQ(http_get("127.0.0.1", 1, "/health", 1).first, 0);  // nothing listens on port 1
}

}  // namespace
}  // namespace strata::bench

#include "api/metrics.h"

#include <gtest/gtest.h>

namespace strata::api {
namespace {

TEST(Metrics, HistogramBucketsAreCumulativeInTheText) {
  ApiMetrics m;
  Usage u;
  u.prompt_tokens = 10;
  u.completion_tokens = 4;
  u.ttft_ms = 30;  // 0.03 s: bucket le=0.04
  u.e2e_ms = 900;
  u.mean_itl_ms = 5;
  m.observe_request(u, FinishReason::kLength);
  u.ttft_ms = 3000;  // 3 s: bucket le=5
  m.observe_request(u, FinishReason::kStop);
  MetricsInput in;
  in.model_name = "tiny";
  const std::string t = render_metrics(m, in);
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.02\"} 0\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.04\"} 1\n"),
            std::string::npos);
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"5\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 2\n"),
            std::string::npos);
  EXPECT_NE(
      t.find("vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1\n"),
      std::string::npos);
  EXPECT_NE(t.find("# TYPE vllm:e2e_request_latency_seconds histogram\n"), std::string::npos);
  EXPECT_EQ(t.find("vllm:num_requests_running"), std::string::npos);  // no engine yet
  EXPECT_DOUBLE_EQ(m.recent_ttft_mean_ms(), 1515.0);
}

TEST(Metrics, QualityGuardrailSeriesPerVersionAndBucket) {
  ApiMetrics m;
  EngineStats s;
  s.profile_version = 3;
  s.replays.sampled = 5;
  s.replays.finished = 3;
  s.replays.dropped = 1;
  s.replays.preempted = 2;
  s.replays.tokens = 900;
  auto q = std::make_shared<QualityReport>();
  ReplayRecord rec;
  rec.profile_version = 2;
  rec.prompt.assign(300, 1);
  ReplayScore a;
  a.positions = 10, a.agree = 10;
  add_replay(*q, rec, a);
  rec.profile_version = 3;  // a profile change: its own line
  ReplayScore b;
  b.positions = 10, b.agree = 5, b.delta_sum = -2.0;
  add_replay(*q, rec, b);
  rec.prompt.assign(20, 1);
  add_replay(*q, rec, b);
  q->alerts.push_back({3, 0.5, 0.7, 2, false});
  s.quality = q;
  MetricsInput in;
  in.model_name = "tiny";
  in.stats = &s;
  const std::string t = render_metrics(m, in);
  const std::string l = "{model_name=\"tiny\",profile_version=";
  for (const std::string& want : std::vector<std::string>{
           "# TYPE strata_quality_argmax_agreement gauge\n",
           "strata_quality_argmax_agreement" + l + "\"2\",prompt_len=\"256-1023\"} 1\n",
           "strata_quality_argmax_agreement" + l + "\"3\",prompt_len=\"0-255\"} 0.5\n",
           "strata_quality_argmax_agreement" + l + "\"3\",prompt_len=\"256-1023\"} 0.5\n",
           "strata_quality_delta_loglik" + l + "\"3\",prompt_len=\"0-255\"} -0.2\n",
           "# TYPE strata_quality_samples_total counter\n",
           "strata_quality_samples_total" + l + "\"2\",prompt_len=\"256-1023\"} 1\n",
           "strata_quality_positions_total" + l + "\"3\",prompt_len=\"0-255\"} 10\n",
           "strata_quality_alert" + l + "\"2\"} 0\n",
           "strata_quality_alert" + l + "\"3\"} 1\n",
           "strata_quality_replays_total{model_name=\"tiny\",outcome=\"dropped\"} 1\n",
           "strata_quality_replay_preemptions_total{model_name=\"tiny\"} 2\n",
           "strata_quality_replay_tokens_total{model_name=\"tiny\"} 900\n",
       })
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  // No monitor: no guardrail series.
  s.quality.reset();
  EXPECT_EQ(render_metrics(m, in).find("strata_quality"), std::string::npos);
}

TEST(Metrics, EngineGaugesAndLayerGroups) {
  ApiMetrics m;
  EngineStats s;
  s.running = 3;
  s.waiting = 1;
  s.kv_usage = 0.25;
  s.pages_per_layer = {8, 8, 2, 2};
  s.compression_ratio = 2.5;
  s.profile_version = 4;
  s.requests_finished = 7;
  s.requests_aborted = 2;
  std::vector<LayerRule> rules(4);
  rules[2].policy = rules[3].policy = Policy::kScored;
  MetricsInput in;
  in.model_name = "m\"x";
  in.ready = true;
  in.stats = &s;
  in.rules = &rules;
  const std::string t = render_metrics(m, in);
  EXPECT_NE(t.find("vllm:num_requests_running{model_name=\"m\\\"x\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata_requests_finished_total{model_name=\"m\\\"x\"} 7\n"), std::string::npos);
  EXPECT_NE(t.find("strata_requests_aborted_total{model_name=\"m\\\"x\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("strata_kv_group_pages{model_name=\"m\\\"x\",group=\"full\"} 16\n"),
            std::string::npos);
  EXPECT_NE(t.find("strata_kv_group_pages{model_name=\"m\\\"x\",group=\"sparse\"} 4\n"),
            std::string::npos);
  EXPECT_NE(t.find("strata_kv_compression_ratio{model_name=\"m\\\"x\"} 2.5\n"), std::string::npos);
  EXPECT_NE(t.find("strata_sparsity_profile_version{model_name=\"m\\\"x\"} 4\n"),
            std::string::npos);
  EXPECT_NE(t.find("layer=\"3\",group=\"sparse\"} 2\n"), std::string::npos);
  const auto g = pages_by_group(s.pages_per_layer, rules);
  EXPECT_EQ(g.at("full"), 16);
  EXPECT_EQ(g.at("sparse"), 4);
}

// strata_gpu_idle_ratio (issue 24 item 4) only where the backend measures device gaps.
TEST(Metrics, GpuIdleRatioOnlyWhenMeasured) {
  ApiMetrics m;
  EngineStats s;
  s.host_overhead = 0.5;
  MetricsInput in;
  in.model_name = "m";
  in.ready = true;
  in.stats = &s;
  std::string t = render_metrics(m, in);
  EXPECT_EQ(t.find("strata_gpu_idle_ratio"), std::string::npos) << "exported without a gap";
  EXPECT_NE(t.find("strata_host_overhead_ratio{model_name=\"m\"} 0.5\n"), std::string::npos);
  EXPECT_EQ(t.find("strata_gpu_idle_seconds_total"), std::string::npos);
  EXPECT_EQ(t.find("strata_table_upload_bytes_total"), std::string::npos);
  s.gpu_idle_steps = 10;
  s.gpu_idle_ratio = 0.125;
  s.gpu_idle_ms = 250;
  s.gpu_busy_ms = 1750;
  t = render_metrics(m, in);
  EXPECT_NE(t.find("strata_gpu_idle_ratio{model_name=\"m\"} 0.125\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata_gpu_idle_seconds_total{model_name=\"m\"} 0.25\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("strata_gpu_busy_seconds_total{model_name=\"m\"} 1.75\n"), std::string::npos)
      << t;
  s.table_bytes = 7500;
  s.table_steps = 3;
  t = render_metrics(m, in);
  EXPECT_NE(t.find("strata_table_upload_bytes_total{model_name=\"m\"} 7500\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("strata_table_upload_steps_total{model_name=\"m\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE strata_gpu_idle_ratio gauge"), std::string::npos);
}

// The pipelined loop's synchronous steps by reason, the idle split by them, steps by kind.
TEST(Metrics, SyncStepsByReasonAndStepsByKind) {
  ApiMetrics m;
  EngineStats s;
  s.steps = 40;
  s.steps_decode = 30;
  s.steps_mixed = 7;
  s.steps_prefill = 3;
  s.sync_steps[static_cast<std::size_t>(SyncReason::kNone)] = 35;
  s.sync_steps[static_cast<std::size_t>(SyncReason::kReturnLogits)] = 4;
  s.sync_steps[static_cast<std::size_t>(SyncReason::kHostSampled)] = 1;
  MetricsInput in;
  in.model_name = "m";
  in.ready = true;
  in.stats = &s;
  std::string t = render_metrics(m, in);
  EXPECT_NE(t.find("# TYPE strata_sync_steps_total counter"), std::string::npos) << t;
  EXPECT_NE(t.find("strata_sync_steps_total{model_name=\"m\",reason=\"return_logits\"} 4\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("strata_sync_steps_total{model_name=\"m\",reason=\"host_sampled\"} 1\n"),
            std::string::npos);
  // Every reason is exported (zero-valued series: rate() works from the start); pipelined steps
  // are not a reason.
  for (const char* r : {"sync_loop", "backend", "report_kept", "lm_chunks", "profile"})
    EXPECT_NE(
        t.find(std::string("strata_sync_steps_total{model_name=\"m\",reason=\"") + r + "\"} 0\n"),
        std::string::npos)
        << r;
  EXPECT_EQ(t.find("strata_sync_steps_total{model_name=\"m\",reason=\"none\"}"), std::string::npos);
  EXPECT_NE(t.find("strata_engine_steps_by_kind_total{model_name=\"m\",kind=\"decode\"} 30\n"),
            std::string::npos);
  EXPECT_NE(t.find("strata_engine_steps_by_kind_total{model_name=\"m\",kind=\"mixed\"} 7\n"),
            std::string::npos);
  EXPECT_NE(t.find("strata_engine_steps_by_kind_total{model_name=\"m\",kind=\"prefill\"} 3\n"),
            std::string::npos);
  EXPECT_EQ(t.find("strata_gpu_idle_by_reason_seconds_total"), std::string::npos)
      << "exported without a gap";
  s.gpu_idle_steps = 10;
  s.gpu_idle_ms = 250;
  s.gpu_idle_ms_by_sync[static_cast<std::size_t>(SyncReason::kNone)] = 50;
  s.gpu_idle_ms_by_sync[static_cast<std::size_t>(SyncReason::kReturnLogits)] = 200;
  t = render_metrics(m, in);
  EXPECT_NE(t.find("strata_gpu_idle_by_reason_seconds_total{model_name=\"m\",reason=\"none\"} "
                   "0.05\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("strata_gpu_idle_by_reason_seconds_total{model_name=\"m\",reason=\"return_"
                   "logits\"} 0.2\n"),
            std::string::npos);
}

TEST(Metrics, PrefixCacheCountersAndGauges) {
  ApiMetrics m;
  EngineStats s;
  s.prefix_cache_queries = 400;
  s.prefix_cache_hits = 96;
  s.pages_cached = 12;
  s.page_bytes = 4096;
  MetricsInput in;
  in.model_name = "m";
  in.ready = true;
  in.stats = &s;
  const std::string t = render_metrics(m, in);
  EXPECT_NE(t.find("vllm:prefix_cache_queries_total{model_name=\"m\"} 400\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("vllm:prefix_cache_hits_total{model_name=\"m\"} 96\n"), std::string::npos);
  EXPECT_NE(t.find("vllm:gpu_prefix_cache_hit_rate{model_name=\"m\"} 0.24\n"), std::string::npos);
  EXPECT_NE(t.find("strata_kv_pages_cached{model_name=\"m\"} 12\n"), std::string::npos);
  EXPECT_NE(t.find("strata_prefix_cache_bytes{model_name=\"m\"} 49152\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE vllm:prefix_cache_hits_total counter"), std::string::npos);
}

// vLLM's request phases and max_tokens from the usage, the per-token inter-token latency from
// the engine (both names), the deprecated KV gauge beside the current one, per-layer capacity.
TEST(Metrics, VllmPhasesInterTokenLatencyAndLayerCapacity) {
  ApiMetrics m;
  Usage u;
  u.prompt_tokens = 10;
  u.completion_tokens = 5;
  u.prefill_ms = 30;  // le=0.04
  u.decode_ms = 400;  // le=0.5
  u.inference_ms = 430;
  u.max_tokens = 16;  // le=20
  u.mean_itl_ms = 100;
  u.compression_ratio = 2.5;  // le=3
  m.observe_request(u, FinishReason::kLength);
  EngineStats s;
  s.kv_usage = 0.5;
  for (double v : {0.02, 0.02, 0.3}) s.inter_token_latency_s.observe(v);
  std::vector<LayerRule> rules(3);
  rules[2].policy = Policy::kScored;
  rules[2].capacity = 128;
  MetricsInput in;
  in.model_name = "t";
  in.stats = &s;
  in.rules = &rules;
  const std::string t = render_metrics(m, in);
  for (const char* line : {
           "vllm:request_prefill_time_seconds_bucket{model_name=\"t\",le=\"0.04\"} 1\n",
           "vllm:request_prefill_time_seconds_bucket{model_name=\"t\",le=\"0.02\"} 0\n",
           "vllm:request_decode_time_seconds_bucket{model_name=\"t\",le=\"0.5\"} 1\n",
           "vllm:request_decode_time_seconds_bucket{model_name=\"t\",le=\"0.25\"} 0\n",
           "vllm:request_inference_time_seconds_sum{model_name=\"t\"} 0.43\n",
           "vllm:request_max_num_generation_tokens_bucket{model_name=\"t\",le=\"10\"} 0\n",
           "vllm:request_max_num_generation_tokens_bucket{model_name=\"t\",le=\"20\"} 1\n",
           "vllm:request_time_per_output_token_seconds_sum{model_name=\"t\"} 0.1\n",
           "vllm:inter_token_latency_seconds_bucket{model_name=\"t\",le=\"0.025\"} 2\n",
           "vllm:inter_token_latency_seconds_count{model_name=\"t\"} 3\n",
           "vllm:time_per_output_token_seconds_count{model_name=\"t\"} 3\n",
           "vllm:gpu_cache_usage_perc{model_name=\"t\"} 0.5\n",
           "vllm:kv_cache_usage_perc{model_name=\"t\"} 0.5\n",
           "strata_request_kv_compression_ratio_bucket{model_name=\"t\",le=\"3\"} 1\n",
           "strata_kv_layer_capacity_slots{model_name=\"t\",layer=\"0\",policy=\"full\"} 0\n",
           "strata_kv_layer_capacity_slots{model_name=\"t\",layer=\"2\",policy=\"scored\"} 128\n",
       })
    EXPECT_NE(t.find(line), std::string::npos) << line << t;
}

}  // namespace
}  // namespace strata::api

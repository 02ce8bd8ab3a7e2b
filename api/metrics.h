// Prometheus metrics (text exposition format 0.0.4). vLLM's names where one exists, so
// existing dashboards work, plus Strata's KV-sparsity gauges. Pure: rendering takes the
// engine's stats snapshot; the server owns one ApiMetrics and observes finished requests
// on its I/O thread (not thread-safe by itself).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "actors/engine_stats.h"
#include "actors/request.h"

namespace strata::api {

using strata::Histogram;  // actors/engine_stats.h

struct ApiMetrics {
  ApiMetrics();
  // One finished request (every choice done), from the engine's usage.
  void observe_request(const Usage& u, FinishReason reason);
  void observe_http(int status);

  // Per finished request, vLLM's meanings: tpot_s is vllm:request_time_per_output_token_seconds
  // (decode time / (tokens - 1)); the per-token vllm:inter_token_latency_seconds (and its
  // deprecated name vllm:time_per_output_token_seconds) is the engine's (EngineStats).
  Histogram ttft_s, tpot_s, e2e_s, queue_s, prefill_s, decode_s, inference_s;
  Histogram prompt_tokens, generation_tokens, max_tokens;
  Histogram compression;                          // the request's KV compression ratio
  std::map<std::string, std::uint64_t> finished;  // by finish reason
  std::map<int, std::uint64_t> http_responses;    // by status
  std::deque<double> recent_ttft_ms;              // last 32, for the admin charts
  double recent_ttft_mean_ms() const;
};

struct MetricsInput {
  std::string model_name;
  bool ready = false;
  const EngineStats* stats = nullptr;             // null while loading
  const std::vector<LayerRule>* rules = nullptr;  // resolved profile: layer -> full/sparse
};

std::string render_metrics(const ApiMetrics& m, const MetricsInput& in);

// Per layer group ("full" / "sparse") page counts from per-layer pages and rules.
std::map<std::string, long long> pages_by_group(const std::vector<int>& pages_per_layer,
                                                const std::vector<LayerRule>& rules);

}  // namespace strata::api

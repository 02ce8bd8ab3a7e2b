#include "api/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata::api {

namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string model) : model_("model_name=\"" + escape_label(model) + "\"") {}
  void head(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, double v, const std::string& labels = {}) {
    out_ += name + "{" + model_ + (labels.empty() ? "" : "," + labels) + "} " + num(v) + "\n";
  }
  void gauge(const std::string& name, const char* help, double v) {
    head(name, "gauge", help);
    sample(name, v);
  }
  void counter(const std::string& name, const char* help, double v) {
    head(name, "counter", help);
    sample(name, v);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    head(name, "histogram", help);
    std::uint64_t cum = 0;
    for (std::size_t i = 0; i < h.bounds().size(); ++i) {
      cum += h.counts()[i];
      sample(name + "_bucket", static_cast<double>(cum), "le=\"" + num(h.bounds()[i]) + "\"");
    }
    sample(name + "_bucket", static_cast<double>(h.count()), "le=\"+Inf\"");
    sample(name + "_sum", h.sum());
    sample(name + "_count", static_cast<double>(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string model_;
  std::string out_;
};

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}
std::vector<double> token_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}

// The quality guardrail (docs/sparsity.md "Quality guardrail"): one series per profile version
// and prompt-length bucket that has finished replays.
void render_quality(Writer& w, const EngineStats& s) {
  const QualityReport& q = *s.quality;
  auto labels = [](const QualityCell& c) {
    return "profile_version=\"" + std::to_string(c.version) + "\",prompt_len=\"" + c.bucket + "\"";
  };
  w.head("strata_quality_argmax_agreement", "gauge",
         "Share of replayed generated positions where the full cache's argmax equals the sparse "
         "run's, per profile version and prompt-length bucket.");
  for (const auto& c : q.cells)
    w.sample("strata_quality_argmax_agreement", c.agreement(), labels(c));
  w.head("strata_quality_delta_loglik", "gauge",
         "Mean log-likelihood per emitted token under the full cache minus under the sparse run "
         "(nats), per profile version and prompt-length bucket.");
  for (const auto& c : q.cells) w.sample("strata_quality_delta_loglik", c.delta_mean(), labels(c));
  w.head("strata_quality_samples_total", "counter",
         "Finished requests replayed through the full cache, per profile version and bucket.");
  for (const auto& c : q.cells)
    w.sample("strata_quality_samples_total", static_cast<double>(c.samples), labels(c));
  w.head("strata_quality_positions_total", "counter",
         "Generated positions compared, per profile version and prompt-length bucket.");
  for (const auto& c : q.cells)
    w.sample("strata_quality_positions_total", static_cast<double>(c.positions), labels(c));
  w.head("strata_quality_alert", "gauge",
         "1 when the version's agreement interval lies below quality_monitor.alert_below.");
  for (const auto v : q.versions()) {
    const bool on = std::any_of(q.alerts.begin(), q.alerts.end(),
                                [&](const QualityAlert& a) { return a.version == v; });
    w.sample("strata_quality_alert", on ? 1 : 0, "profile_version=\"" + std::to_string(v) + "\"");
  }
  w.head("strata_quality_replays_total", "counter",
         "Guardrail replays by outcome: sampled, finished, dropped (queue full, never fits, "
         "failed).");
  w.sample("strata_quality_replays_total", static_cast<double>(s.replays.sampled),
           "outcome=\"sampled\"");
  w.sample("strata_quality_replays_total", static_cast<double>(s.replays.finished),
           "outcome=\"finished\"");
  w.sample("strata_quality_replays_total", static_cast<double>(s.replays.dropped),
           "outcome=\"dropped\"");
  w.counter("strata_quality_replay_preemptions_total",
            "Guardrail replays preempted to make room for served requests (they go first).",
            static_cast<double>(s.replays.preempted));
  w.counter("strata_quality_replay_tokens_total", "Tokens the guardrail's replays computed.",
            static_cast<double>(s.replays.tokens));
}

}  // namespace

ApiMetrics::ApiMetrics()
    : ttft_s(latency_buckets()),
      tpot_s(latency_buckets()),
      e2e_s(latency_buckets()),
      queue_s(latency_buckets()),
      prefill_s(latency_buckets()),
      decode_s(latency_buckets()),
      inference_s(latency_buckets()),
      prompt_tokens(token_buckets()),
      generation_tokens(token_buckets()),
      max_tokens(token_buckets()),
      compression({1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16, 32}) {}

void ApiMetrics::observe_request(const Usage& u, FinishReason reason) {
  ttft_s.observe(u.ttft_ms / 1000.0);
  if (u.completion_tokens > 1) tpot_s.observe(u.mean_itl_ms / 1000.0);
  e2e_s.observe(u.e2e_ms / 1000.0);
  queue_s.observe(u.queue_ms / 1000.0);
  prefill_s.observe(u.prefill_ms / 1000.0);
  decode_s.observe(u.decode_ms / 1000.0);
  inference_s.observe(u.inference_ms / 1000.0);
  prompt_tokens.observe(u.prompt_tokens);
  generation_tokens.observe(u.completion_tokens);
  if (u.max_tokens > 0) max_tokens.observe(u.max_tokens);
  compression.observe(u.compression_ratio);
  const char* r = to_string(reason);
  ++finished[r ? r : "unknown"];
  recent_ttft_ms.push_back(u.ttft_ms);
  while (recent_ttft_ms.size() > 32) recent_ttft_ms.pop_front();
}

void ApiMetrics::observe_http(int status) {
  ++http_responses[status];
}

double ApiMetrics::recent_ttft_mean_ms() const {
  if (recent_ttft_ms.empty()) return 0;
  double s = 0;
  for (double v : recent_ttft_ms) s += v;
  return s / static_cast<double>(recent_ttft_ms.size());
}

std::map<std::string, long long> pages_by_group(const std::vector<int>& pages_per_layer,
                                                const std::vector<LayerRule>& rules) {
  std::map<std::string, long long> g{{"full", 0}, {"sparse", 0}};
  for (std::size_t l = 0; l < pages_per_layer.size(); ++l) {
    const bool sparse = l < rules.size() && rules[l].sparse();
    g[sparse ? "sparse" : "full"] += pages_per_layer[l];
  }
  return g;
}

std::string render_metrics(const ApiMetrics& m, const MetricsInput& in) {
  Writer w(in.model_name);
  w.gauge("strata_ready", "1 once the model is loaded and the engine serves requests.",
          in.ready ? 1 : 0);
  if (in.stats) {
    const EngineStats& s = *in.stats;
    w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
            s.running);
    w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting);
    w.gauge("strata_num_requests_preempted", "Number of preempted requests waiting to resume.",
            s.preempted);
    w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage);
    w.gauge("vllm:gpu_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage. DEPRECATED: vllm:kv_cache_usage_perc.",
            s.kv_usage);
    w.counter("vllm:num_preemptions_total", "Cumulative number of preemptions.",
              static_cast<double>(s.preemptions));
    w.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
              static_cast<double>(s.prompt_tokens_total));
    w.counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
              static_cast<double>(s.generation_tokens_total));
    // vLLM v1's prefix-cache counters (tokens) and v0's hit-rate gauge.
    w.counter("vllm:prefix_cache_queries_total",
              "Prefix cache queries, in terms of number of queried tokens.",
              static_cast<double>(s.prefix_cache_queries));
    w.counter("vllm:prefix_cache_hits_total",
              "Prefix cache hits, in terms of number of cached tokens.",
              static_cast<double>(s.prefix_cache_hits));
    w.gauge("vllm:gpu_prefix_cache_hit_rate",
            "Prefix cache hit rate: cached over queried prompt tokens since start. DEPRECATED: "
            "rate(vllm:prefix_cache_hits_total) / rate(vllm:prefix_cache_queries_total).",
            s.prefix_cache_queries > 0 ? static_cast<double>(s.prefix_cache_hits) /
                                             static_cast<double>(s.prefix_cache_queries)
                                       : 0.0);
    w.counter("strata_engine_steps_total", "Engine iterations (batched steps) run.",
              static_cast<double>(s.steps));
    w.head("strata_engine_steps_by_kind_total", "counter",
           "Engine steps completed, by kind: decode rows only, prefill chunks only (guardrail "
           "replays included), or both (mixed).");
    w.sample("strata_engine_steps_by_kind_total", static_cast<double>(s.steps_decode),
             "kind=\"decode\"");
    w.sample("strata_engine_steps_by_kind_total", static_cast<double>(s.steps_mixed),
             "kind=\"mixed\"");
    w.sample("strata_engine_steps_by_kind_total", static_cast<double>(s.steps_prefill),
             "kind=\"prefill\"");
    w.head("strata_sync_steps_total", "counter",
           "Steps the pipelined loop (scheduler.async_steps) ran synchronously, after the steps "
           "in flight, by reason: host_sampled (a row sampled on the host), return_logits "
           "(guardrail replays), report_kept (kept-positions census), lm_chunks (several lm_head "
           "chunks), profile, backend (a backend that never pipelines: the CPU backend); "
           "sync_loop: every step of the synchronous loop (scheduler.async_steps off, or "
           "tensor parallelism).");
    for (int r = 1; r < kSyncReasons; ++r)
      w.sample("strata_sync_steps_total",
               static_cast<double>(s.sync_steps[static_cast<std::size_t>(r)]),
               std::string("reason=\"") + to_string(static_cast<SyncReason>(r)) + "\"");
    w.counter("strata_requests_refused_total", "Requests refused because the queue was full.",
              static_cast<double>(s.requests_refused));
    w.counter("strata_requests_aborted_total", "Requests aborted (client gone, cancel, shutdown).",
              static_cast<double>(s.requests_aborted));
    w.counter("strata_requests_finished_total",
              "Requests ended without an abort (stop, length, timeout, error).",
              static_cast<double>(s.requests_finished));
    w.gauge("strata_kv_pages_capacity", "KV pages in the pool.", s.pages_total);
    w.gauge("strata_kv_pages_used", "KV pages held by sequences.", s.pages_used);
    w.gauge("strata_kv_pages_cached",
            "KV pages held by prefix-cache blocks, shared with sequences or not; those only the "
            "cache references (table-only) count as free and are reclaimed under pressure.",
            s.pages_cached);
    w.gauge("strata_prefix_cache_bytes", "KV bytes held by prefix-cache blocks.",
            static_cast<double>(s.pages_cached) * static_cast<double>(s.page_bytes));
    w.gauge("strata_kv_compression_ratio",
            "Full-cache KV bytes over bytes held, over running sequences.", s.compression_ratio);
    w.gauge("strata_sparsity_profile_version", "Version of the published sparsity profile.",
            static_cast<double>(s.profile_version));
    w.gauge("strata_sparsity_enabled", "1 when layer-wise KV sparsity is on.",
            s.profile.enabled ? 1 : 0);
    w.gauge("strata_batch_size_mean", "Mean sequences per engine step since start.", s.mean_batch);
    w.gauge("strata_host_overhead_ratio",
            "Share of the time a step was in flight not covered by device work.", s.host_overhead);
    if (s.gpu_idle_steps > 0)
      w.gauge("strata_gpu_idle_ratio",
              "Share of device time idle between engine steps while sequences ran (device "
              "timeline).",
              s.gpu_idle_ratio);
    if (s.table_steps > 0) {
      w.counter("strata_table_upload_bytes_total",
                "Page-table bytes the engine's steps copied to the device.",
                static_cast<double>(s.table_bytes));
      w.counter("strata_table_upload_steps_total", "Steps that reported their page-table bytes.",
                static_cast<double>(s.table_steps));
    }
    if (s.gpu_idle_steps > 0) {  // the ratio's sums: a window's ratio from two scrapes
      w.counter("strata_gpu_idle_seconds_total",
                "Device idle time between engine steps while sequences ran.", s.gpu_idle_ms / 1e3);
      w.counter("strata_gpu_busy_seconds_total",
                "Device time of engine steps (the idle ratio's denominator less the idle time).",
                s.gpu_busy_ms / 1e3);
      w.head("strata_gpu_idle_by_reason_seconds_total", "counter",
             "strata_gpu_idle_seconds_total split by the synchronous step each gap sat next to "
             "(before it: the drain; right after it: the refill), reasons as "
             "strata_sync_steps_total; reason=\"none\": gaps between pipelined steps.");
      for (int r = 0; r < kSyncReasons; ++r)
        w.sample("strata_gpu_idle_by_reason_seconds_total",
                 s.gpu_idle_ms_by_sync[static_cast<std::size_t>(r)] / 1e3,
                 std::string("reason=\"") + to_string(static_cast<SyncReason>(r)) + "\"");
    }
    if (in.rules) {
      w.head("strata_kv_group_pages", "gauge", "KV pages held per layer group (full / sparse).");
      for (const auto& [g, n] : pages_by_group(s.pages_per_layer, *in.rules))
        w.sample("strata_kv_group_pages", static_cast<double>(n), "group=\"" + g + "\"");
    }
    w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                s.inter_token_latency_s);
    w.histogram("vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds. DEPRECATED: "
                "vllm:inter_token_latency_seconds.",
                s.inter_token_latency_s);
    if (in.rules) {
      w.head("strata_kv_layer_capacity_slots", "gauge",
             "Capacity C_l in token slots per sequence of each layer under the published "
             "profile (0: a full layer, unbounded).");
      for (std::size_t l = 0; l < in.rules->size(); ++l) {
        const LayerRule& r = (*in.rules)[l];
        w.sample("strata_kv_layer_capacity_slots", r.sparse() ? r.capacity : 0,
                 "layer=\"" + std::to_string(l) + "\",policy=\"" + to_string(r.policy) + "\"");
      }
    }
    if (s.quality) render_quality(w, s);
    w.head("strata_kv_layer_pages", "gauge", "KV pages held per layer.");
    for (std::size_t l = 0; l < s.pages_per_layer.size(); ++l) {
      const bool sparse = in.rules && l < in.rules->size() && (*in.rules)[l].sparse();
      w.sample(
          "strata_kv_layer_pages", s.pages_per_layer[l],
          "layer=\"" + std::to_string(l) + "\",group=\"" + (sparse ? "sparse" : "full") + "\"");
    }
  }
  w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.ttft_s);
  w.histogram("vllm:request_time_per_output_token_seconds",
              "Histogram of time_per_output_token_seconds per request.", m.tpot_s);
  w.histogram("vllm:e2e_request_latency_seconds",
              "Histogram of end to end request latency in seconds.", m.e2e_s);
  w.histogram("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.", m.queue_s);
  w.histogram("vllm:request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.", m.prefill_s);
  w.histogram("vllm:request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.", m.decode_s);
  w.histogram("vllm:request_inference_time_seconds",
              "Histogram of time spent in RUNNING phase for request.", m.inference_s);
  w.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens);
  w.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              m.generation_tokens);
  w.histogram("vllm:request_max_num_generation_tokens",
              "Histogram of maximum number of requested generation tokens.", m.max_tokens);
  w.histogram("strata_request_kv_compression_ratio",
              "Full-cache KV bytes over bytes held at the end, per finished request.",
              m.compression);
  w.head("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const char* r : {"stop", "length", "abort"}) {
    auto it = m.finished.find(r);
    w.sample("vllm:request_success_total",
             it == m.finished.end() ? 0.0 : static_cast<double>(it->second),
             std::string("finished_reason=\"") + r + "\"");
  }
  w.head("strata_http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, n] : m.http_responses)
    w.sample("strata_http_responses_total", static_cast<double>(n),
             "code=\"" + std::to_string(status) + "\"");
  return w.take();
}

}  // namespace strata::api

// The load generator of `strata bench`: OpenAI-compatible streaming completions against any
// server (ours or another), prompts of an exact token length sent as token ids (or text),
// fixed output length with ignore_eos, infinite or Poisson request rate, max concurrency,
// warm-up, bounded run time, one connection per request or keep-alive.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tools/bench/bench_stats.h"

namespace strata::bench {

struct LoadOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model;  // "model" field ("" = first of GET /v1/models)
  std::string api_key;
  int input_tokens = 128;
  int output_tokens = 32;
  bool text_prompts = false;  // text instead of token ids (length then approximate)
  int id_range = 600;         // token ids drawn from [1, id_range)
  int num_prompts = 64;
  int warmup = 0;  // requests sent (one at a time) before measuring
  // Steady state (needs concurrency > 0): a ramp-up round of `concurrency` requests is sent at
  // once with staggered output lengths (request j of c: output_tokens * (j+1) / c), so they
  // finish spread over one output period; they are excluded from the records. The measured
  // num_prompts requests then start as slots free up — one arrival at a time, at full
  // concurrency, as a server in steady state sees them — and the duration runs from the first
  // measured send to the last measured finish. on_measure_start runs before the ramp-up (the
  // server's counters then cover the excluded requests too: see LoadExcluded).
  bool steady_state = false;
  int concurrency = 0;        // 0 = unbounded
  double request_rate = 0;    // requests/s, Poisson; 0 = all at once
  double max_duration_s = 0;  // stop sending after this long (0 = no bound)
  bool keep_alive = false;    // reuse connections between requests
  std::uint64_t seed = 0;
  double timeout_s = 600;  // per request
  std::function<void(int done, int failed, int total, double elapsed_s)> progress;
  std::function<void()> on_measure_start;  // after the warm-up, before the first request
};

// Requests sent but left out of the records (the steady-state ramp-up round).
struct LoadExcluded {
  int requests = 0, failed = 0, input_tokens = 0, output_tokens = 0;
};

// Runs one level; returns the per-request records (warm-up and ramp-up excluded) and the
// measured wall time.
std::vector<RequestRecord> run_load(const LoadOptions& o, double* duration_s,
                                    LoadExcluded* excluded = nullptr);

// GET a path (e.g. /metrics, /health, /v1/models): {status, body}; status 0 on connect error.
std::pair<int, std::string> http_get(const std::string& host, int port, const std::string& path,
                                     double timeout_s = 10);
// Parses Prometheus text: sums every sample of each metric name over its labels.
std::map<std::string, double> parse_prometheus(const std::string& text);

}  // namespace strata::bench

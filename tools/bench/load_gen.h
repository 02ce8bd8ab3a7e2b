// The load generator of `strata bench`: OpenAI-compatible streaming completions against any
// server (ours or another), prompts of an exact token length sent as token ids (or text),
// fixed output length with ignore_eos, infinite or Poisson request rate, max concurrency,
// warm-up, bounded run time, one connection per request or keep-alive.
//
// Timing: the response is read with beast's parser one socket read at a time
// (http::async_read_some into a buffer_body), and each SSE event is timestamped when the read
// that completed it returns — not when a buffer fills or the response ends. Token-bearing events
// are those whose first choice has non-empty `text` (or `token_ids`, without a finish_reason);
// the finish chunk, usage chunk and `[DONE]` carry no token. Definitions: bench_stats.h.
// Failures are records with ok = false and an error saying why ("connect 127.0.0.1:8000:
// Connection refused", "HTTP 401: <the server's error message>", "stream error: ...").
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
  std::string model;    // "model" field ("" = first of GET /v1/models, sent with api_key)
  std::string api_key;  // "Authorization: Bearer <key>" on every request, discovery included
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
  // concurrency, as a server in steady state sees them. The duration returned runs from the
  // first measured send to the last measured finish; throughput is measured over the steady
  // window instead (bench_stats.h SteadyWindow, from LoadExcluded::ramp and the records).
  // on_measure_start runs before the ramp-up (the server's counters then cover the excluded
  // requests too: see LoadExcluded).
  bool steady_state = false;
  int concurrency = 0;        // 0 = unbounded
  double request_rate = 0;    // requests/s, Poisson; 0 = all at once
  double max_duration_s = 0;  // stop sending after this long (0 = no bound)
  bool keep_alive = false;    // reuse connections between requests
  std::uint64_t seed = 0;
  // The workload (issue 23's prefix-cache benchmarks):
  //   kRandom        every prompt is input_tokens independent ids;
  //   kSharedPrefix  one shared_prefix-token prefix (the same ids for every request of the
  //                  run), then input_tokens ids of the request's own;
  //   kMultiTurn     conversations of `turns` turns (num_prompts requests in all, rounded up to
  //                  whole conversations; `concurrency` bounds the conversations in flight):
  //                  turn 1 sends input_tokens ids, turn t > 1 resends turn t-1's prompt, then
  //                  output_tokens ids standing for its answer (a client resending it; the
  //                  engine never caches generated blocks with sparsity on, so the hit is the
  //                  same as with the real answer), then turn_tokens new ids; it is sent when
  //                  turn t-1's answer has ended. Records are in conversation order, `turn` set.
  enum class Workload { kRandom, kSharedPrefix, kMultiTurn };
  Workload workload = Workload::kRandom;
  int shared_prefix = 0;
  int turns = 1;
  int turn_tokens = 0;
  // Explicit token-id prompts (e.g. `strata eval --guardrail-live`): when set, the run sends
  // each once, in order, one at a time (concurrency, rate, warm-up and the workload ignored),
  // with the same body as the others (temperature 0, max_tokens = min_tokens = output_tokens,
  // ignore_eos); num_prompts is their count.
  std::vector<std::vector<std::int64_t>> prompts;
  double timeout_s = 600;  // per request
  std::function<void(int done, int failed, int total, double elapsed_s)> progress;
  std::function<void()> on_measure_start;  // after the warm-up, before the first request
};

// Requests sent but left out of the records: the steady-state ramp-up round (counted in
// requests/failed/tokens) and the warm-up (warmup_failed only; sent before on_measure_start).
struct LoadExcluded {
  int requests = 0, failed = 0, input_tokens = 0, output_tokens = 0;
  int warmup_failed = 0;
  std::vector<RequestRecord> failures;  // the failed excluded requests, for their errors
  std::vector<RequestRecord> ramp;      // every ramp-up record (their events count in the window)
};

// The model to name in requests: o.model, else the first id of GET /v1/models (sent with
// o.api_key). Throws std::runtime_error saying why when the server cannot be reached or does not
// answer 200 with a model list — no silent fallback name.
std::string discover_model(const LoadOptions& o);

// Runs one level; returns the per-request records (warm-up and ramp-up excluded) and the
// measured wall time. Throws (via discover_model) when no model can be named.
std::vector<RequestRecord> run_load(const LoadOptions& o, double* duration_s,
                                    LoadExcluded* excluded = nullptr);

// GET a path (e.g. /metrics, /health, /v1/models): {status, body}; status 0 when no response
// came (then *error, if given, says why). api_key, if not empty, is sent as a bearer token.
std::pair<int, std::string> http_get(const std::string& host, int port, const std::string& path,
                                     double timeout_s = 10, const std::string& api_key = "",
                                     std::string* error = nullptr);
// Parses Prometheus text: sums every sample of each metric name over its labels.
std::map<std::string, double> parse_prometheus(const std::string& text);

}  // namespace strata::bench

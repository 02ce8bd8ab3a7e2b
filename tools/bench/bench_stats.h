// Serving-benchmark statistics, defined as vLLM's serving benchmark (benchmark_serving.py,
// `vllm bench serve`) defines them, from client-side timestamps taken as each SSE event is read
// off the socket (tools/bench/load_gen.cpp):
//   TTFT = first token-bearing event - send;  ITL = gaps between successive token-bearing events;
//   TPOT = (E2E - TTFT) / (output_tokens - 1); E2E = `data: [DONE]` read - send.
// Events read in one socket read share a timestamp (their ITL is 0), as in vLLM's client.
#pragma once

#include <boost/json/fwd.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata::bench {

struct RequestRecord {
  bool ok = false;
  std::string error;
  int prompt_tokens = 0;
  int output_tokens = 0;      // from the server's usage (or counted chunks)
  double send_s = 0;          // seconds since the run started
  double ttft_s = 0;          // relative to send
  double e2e_s = 0;           // relative to send
  std::vector<double> itl_s;  // gaps between token-bearing events
  int turn = 0;               // multi-turn workload: 0-based turn of its conversation
  int cached_tokens = 0;      // usage.prompt_tokens_details.cached_tokens (0 when absent)
};

struct Summary {  // one statistic over requests; std is the population standard deviation
  double mean = 0, median = 0, std = 0, p90 = 0, p95 = 0, p99 = 0, min = 0, max = 0;
};
Summary summarize(std::vector<double> values);            // empty -> zeros
double percentile(std::vector<double> sorted, double q);  // linear interpolation, q in [0,100]

struct LevelResult {
  std::string config;       // server configuration label
  int concurrency = 0;      // max in flight (0 = unbounded)
  double request_rate = 0;  // 0 = infinite
  int completed = 0, failed = 0;
  std::vector<std::pair<std::string, int>> errors;  // why they failed: {error, count}
  double duration_s = 0;
  int total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0;  // completed / duration
  double output_throughput = 0;   // output tokens / s
  double total_throughput = 0;    // (input + output) tokens / s
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::map<std::string, double> server;   // figures read from the server's /metrics
  double roofline_output_throughput = 0;  // best possible output tokens/s (0 = not computed)
  // Steady-state mode (LoadOptions::steady_state): the ramp-up round, sent and left out of
  // every figure above except `server` (whose counters include it).
  // In steady state duration_s and the three throughputs are those of the window (SteadyWindow);
  // the latency figures stay those of the measured requests.
  bool steady_state = false;
  int excluded_requests = 0, excluded_input_tokens = 0, excluded_output_tokens = 0;
};

LevelResult aggregate(const std::vector<RequestRecord>& records, double duration_s);

// Steady-state throughput (LoadOptions::steady_state). A closed loop keeps `concurrency`
// requests in flight until the last measured send. The window runs from the moment the ramp-up
// round's prompts have all been prefilled (its last first token; before that the server works
// off a pile of `concurrency` prompts that arrived at once) or the first measured send, whichever
// is later, to the last measured send. Throughput counts every token-bearing event read inside
// it — of the ramp-up round and of the measured requests alike — divided by its length (an event
// carrying k tokens counts k: output_tokens / events per record). Input tokens and requests are
// those sent, and finished, inside the window. (The measured requests' own tokens over first
// send -> last finish include the drain at the end, where fewer than `concurrency` requests
// run: with as many measured requests as slots that reads about half the steady rate.)
// When the measured sends all fall before the pile-up is worked off, the window falls back to
// first -> last measured send and `transient` says so (more measured requests fix it).
struct SteadyWindow {
  double start_s = 0, end_s = 0;  // seconds since the run started
  bool transient = false;         // the fallback window (see above)
  double output_tokens = 0;       // token events read in [start, end), weighted as above
  long input_tokens = 0;          // prompt tokens of requests sent in [start, end)
  int finished = 0;               // requests whose [DONE] was read in [start, end)
  double length() const { return end_s - start_s; }
};
// `measured` and `ramp` fix the window; both supply the events. Failed records
// contribute nothing. A window of zero length (one measured request) comes back empty.
SteadyWindow steady_window(const std::vector<RequestRecord>& measured,
                           const std::vector<RequestRecord>& ramp);
// Replaces r's duration and throughputs by the window's (when it has a length).
void apply_steady_window(LevelResult& r, const SteadyWindow& w);
// The failed records' errors, most frequent first: {error, count}.
std::vector<std::pair<std::string, int>> count_errors(const std::vector<RequestRecord>& records);
boost::json::value to_json(const LevelResult& r);
LevelResult level_from_json(const boost::json::value& v);

}  // namespace strata::bench

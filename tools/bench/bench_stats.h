// Serving-benchmark statistics, defined as vLLM's serving benchmark defines them:
// TTFT = first content chunk - send; TPOT = (e2e - TTFT) / (output_tokens - 1);
// ITL = gaps between successive content chunks; E2E = last byte - send.
#pragma once

#include <boost/json/fwd.hpp>
#include <map>
#include <string>
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
  std::vector<double> itl_s;  // gaps between content chunks
};

struct Summary {  // one statistic over requests
  double mean = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Summary summarize(std::vector<double> values);            // empty -> zeros
double percentile(std::vector<double> sorted, double q);  // linear interpolation, q in [0,100]

struct LevelResult {
  std::string config;       // server configuration label
  int concurrency = 0;      // max in flight (0 = unbounded)
  double request_rate = 0;  // 0 = infinite
  int completed = 0, failed = 0;
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
  bool steady_state = false;
  int excluded_requests = 0, excluded_input_tokens = 0, excluded_output_tokens = 0;
};

LevelResult aggregate(const std::vector<RequestRecord>& records, double duration_s);
boost::json::value to_json(const LevelResult& r);
LevelResult level_from_json(const boost::json::value& v);

}  // namespace strata::bench

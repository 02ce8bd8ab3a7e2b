// `strata bench` output: terminal table, JSON report (mergeable across invocations) and
// SVG plots (throughput and TTFT P50/P99 vs concurrency, one line per configuration).
#pragma once

#include <string>
#include <vector>

#include "tools/bench/bench_stats.h"

namespace strata::bench {

struct Report {
  std::string workload;  // e.g. "4000 in / 500 out"
  std::vector<LevelResult> levels;
};

std::string format_table(const std::vector<LevelResult>& levels);
// One level in the layout of vLLM's serving benchmark ("Serving Benchmark Result": counts,
// throughputs, then mean/median/P90/P99 of TTFT, TPOT, ITL and E2E latency), for comparison
// with its output line by line.
std::string format_level(const LevelResult& level);
// The prefix-cache lines of a level (shared-prefix / multi-turn workloads): the cache hit rate
// the server reported (usage.prompt_tokens_details.cached_tokens over prompt tokens) and, per
// turn (multi-turn; one line otherwise), requests, TTFT median and P90, cached share.
std::string format_prefix_cache(const std::vector<RequestRecord>& records);
// "3 of 12 requests failed:\n  3 x HTTP 401: ...\n" ("" when none failed).
std::string format_failures(const std::string& what, int failed, int total,
                            const std::vector<std::pair<std::string, int>>& errors);
void write_report_json(const std::string& path, const Report& r);
Report read_report_json(const std::string& path);  // throws std::runtime_error naming the file
// Later reports replace earlier levels with the same (config, concurrency, rate).
Report merge_reports(const std::vector<Report>& reports);

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x > 0
};
// A line chart with a log2 x axis; returns SVG text.
std::string svg_line_chart(const std::string& title, const std::string& xlabel,
                           const std::string& ylabel, const std::vector<Series>& series);
// Writes throughput.svg and ttft.svg into `dir`.
void write_plots(const std::string& dir, const Report& r);

}  // namespace strata::bench

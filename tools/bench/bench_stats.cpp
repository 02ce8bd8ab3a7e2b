#include "tools/bench/bench_stats.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <map>
#include <numeric>

namespace strata::bench {
namespace json = boost::json;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.median = percentile(v, 50);
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(v.size()));
  s.p90 = percentile(v, 90);
  s.p95 = percentile(v, 95);
  s.p99 = percentile(v, 99);
  s.min = v.front();
  s.max = v.back();
  return s;
}

LevelResult aggregate(const std::vector<RequestRecord>& recs, double duration_s) {
  LevelResult r;
  r.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& x : recs) {
    if (!x.ok) {
      ++r.failed;
      continue;
    }
    ++r.completed;
    r.total_input_tokens += x.prompt_tokens;
    r.total_output_tokens += x.output_tokens;
    ttft.push_back(x.ttft_s * 1e3);
    e2e.push_back(x.e2e_s * 1e3);
    if (x.output_tokens > 1) tpot.push_back((x.e2e_s - x.ttft_s) * 1e3 / (x.output_tokens - 1));
    for (double g : x.itl_s) itl.push_back(g * 1e3);
  }
  if (duration_s > 0) {
    r.request_throughput = r.completed / duration_s;
    r.output_throughput = r.total_output_tokens / duration_s;
    r.total_throughput = (r.total_input_tokens + r.total_output_tokens) / duration_s;
  }
  r.errors = count_errors(recs);
  r.ttft_ms = summarize(ttft);
  r.tpot_ms = summarize(tpot);
  r.itl_ms = summarize(itl);
  r.e2e_ms = summarize(e2e);
  return r;
}

SteadyWindow steady_window(const std::vector<RequestRecord>& measured,
                           const std::vector<RequestRecord>& ramp) {
  SteadyWindow w;
  bool any = false;
  for (const auto& x : measured) {
    if (!any) w.start_s = w.end_s = x.send_s;
    w.start_s = std::min(w.start_s, x.send_s);
    w.end_s = std::max(w.end_s, x.send_s);
    any = true;
  }
  double piled_up = 0;  // the ramp-up round's last first token
  for (const auto& x : ramp)
    if (x.ok) piled_up = std::max(piled_up, x.send_s + x.ttft_s);
  if (piled_up < w.end_s)
    w.start_s = std::max(w.start_s, piled_up);
  else
    w.transient = !ramp.empty();
  if (w.length() <= 0) return SteadyWindow{};
  auto inside = [&](double t) { return t >= w.start_s && t < w.end_s; };
  auto count = [&](const RequestRecord& x) {
    if (!x.ok) return;
    if (inside(x.send_s)) w.input_tokens += x.prompt_tokens;
    if (inside(x.send_s + x.e2e_s)) ++w.finished;
    const double events = 1.0 + static_cast<double>(x.itl_s.size());
    const double per_event = x.output_tokens > 0 ? x.output_tokens / events : 1.0;
    double t = x.send_s + x.ttft_s;
    if (inside(t)) w.output_tokens += per_event;
    for (double g : x.itl_s) {
      t += g;
      if (inside(t)) w.output_tokens += per_event;
    }
  };
  for (const auto& x : measured) count(x);
  for (const auto& x : ramp) count(x);
  return w;
}

void apply_steady_window(LevelResult& r, const SteadyWindow& w) {
  const double len = w.length();
  if (len <= 0) return;
  r.duration_s = len;
  r.request_throughput = w.finished / len;
  r.output_throughput = w.output_tokens / len;
  r.total_throughput = (static_cast<double>(w.input_tokens) + w.output_tokens) / len;
}

std::vector<std::pair<std::string, int>> count_errors(const std::vector<RequestRecord>& recs) {
  std::map<std::string, int> by;
  for (const auto& x : recs)
    if (!x.ok) ++by[x.error.empty() ? "unknown error" : x.error];
  std::vector<std::pair<std::string, int>> out(by.begin(), by.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

namespace {
json::object sum_json(const Summary& s) {
  return {{"mean", s.mean}, {"median", s.median}, {"std", s.std}, {"p90", s.p90},
          {"p95", s.p95},   {"p99", s.p99},       {"min", s.min}, {"max", s.max}};
}
Summary sum_from(const json::value& v) {
  Summary s;
  const auto& o = v.as_object();
  s.mean = o.at("mean").to_number<double>();
  s.median = o.at("median").to_number<double>();
  s.p90 = o.at("p90").to_number<double>();
  s.p99 = o.at("p99").to_number<double>();
  s.min = o.at("min").to_number<double>();
  s.max = o.at("max").to_number<double>();
  if (auto* x = o.if_contains("std")) s.std = x->to_number<double>();  // older reports lack them
  if (auto* x = o.if_contains("p95")) s.p95 = x->to_number<double>();
  return s;
}
}  // namespace

json::value to_json(const LevelResult& r) {
  json::object server;
  for (const auto& [k, v] : r.server) server[k] = v;
  json::array errors;
  for (const auto& [e, n] : r.errors) errors.push_back(json::object{{"error", e}, {"count", n}});
  return json::object{{"config", r.config},
                      {"concurrency", r.concurrency},
                      {"request_rate", r.request_rate},
                      {"completed", r.completed},
                      {"failed", r.failed},
                      {"errors", errors},
                      {"duration_s", r.duration_s},
                      {"total_input_tokens", r.total_input_tokens},
                      {"total_output_tokens", r.total_output_tokens},
                      {"request_throughput", r.request_throughput},
                      {"output_throughput", r.output_throughput},
                      {"total_throughput", r.total_throughput},
                      {"ttft_ms", sum_json(r.ttft_ms)},
                      {"tpot_ms", sum_json(r.tpot_ms)},
                      {"itl_ms", sum_json(r.itl_ms)},
                      {"e2e_ms", sum_json(r.e2e_ms)},
                      {"server", server},
                      {"roofline_output_throughput", r.roofline_output_throughput},
                      {"steady_state", r.steady_state},
                      {"excluded_requests", r.excluded_requests},
                      {"excluded_input_tokens", r.excluded_input_tokens},
                      {"excluded_output_tokens", r.excluded_output_tokens}};
}

LevelResult level_from_json(const json::value& v) {
  const auto& o = v.as_object();
  LevelResult r;
  r.config = std::string(o.at("config").as_string());
  r.concurrency = static_cast<int>(o.at("concurrency").to_number<std::int64_t>());
  r.request_rate = o.at("request_rate").to_number<double>();
  r.completed = static_cast<int>(o.at("completed").to_number<std::int64_t>());
  r.failed = static_cast<int>(o.at("failed").to_number<std::int64_t>());
  if (auto* es = o.if_contains("errors"))
    for (const auto& e : es->as_array())
      r.errors.emplace_back(std::string(e.at("error").as_string()),
                            static_cast<int>(e.at("count").to_number<std::int64_t>()));
  r.duration_s = o.at("duration_s").to_number<double>();
  r.total_input_tokens = static_cast<int>(o.at("total_input_tokens").to_number<std::int64_t>());
  r.total_output_tokens = static_cast<int>(o.at("total_output_tokens").to_number<std::int64_t>());
  r.request_throughput = o.at("request_throughput").to_number<double>();
  r.output_throughput = o.at("output_throughput").to_number<double>();
  r.total_throughput = o.at("total_throughput").to_number<double>();
  r.ttft_ms = sum_from(o.at("ttft_ms"));
  r.tpot_ms = sum_from(o.at("tpot_ms"));
  r.itl_ms = sum_from(o.at("itl_ms"));
  r.e2e_ms = sum_from(o.at("e2e_ms"));
  for (const auto& [k, x] : o.at("server").as_object())
    r.server[std::string(k)] = x.to_number<double>();
  if (auto* rf = o.if_contains("roofline_output_throughput"))
    r.roofline_output_throughput = rf->to_number<double>();
  if (auto* ss = o.if_contains("steady_state")) r.steady_state = ss->as_bool();
  auto int_of = [&](const char* k, int* dst) {
    if (auto* v = o.if_contains(k)) *dst = static_cast<int>(v->to_number<std::int64_t>());
  };
  int_of("excluded_requests", &r.excluded_requests);
  int_of("excluded_input_tokens", &r.excluded_input_tokens);
  int_of("excluded_output_tokens", &r.excluded_output_tokens);
  return r;
}

}  // namespace strata::bench

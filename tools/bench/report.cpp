#include "tools/bench/report.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace strata::bench {
namespace json = boost::json;

std::string format_table(const std::vector<LevelResult>& levels) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-18s %5s %6s %5s %8s %10s %10s %9s %9s %9s %9s %9s %7s\n",
                "config", "conc", "rate", "fail", "req/s", "out tok/s", "tot tok/s", "TTFT p50",
                "TTFT p99", "TPOT p50", "ITL p50", "E2E p50", "roof%");
  out += line;
  for (const auto& l : levels) {
    char roof[16] = "      -";  // no roofline (a --host/--port target without --roofline-model)
    if (l.roofline_output_throughput > 0)
      std::snprintf(roof, sizeof roof, "%6.1f%%",
                    100.0 * l.output_throughput / l.roofline_output_throughput);
    std::snprintf(
        line, sizeof line,
        "%-18s %5d %6.1f %5d %8.2f %10.1f %10.1f %8.1fms %8.1fms %8.2fms %8.2fms %8.0fms %s\n",
        l.config.substr(0, 18).c_str(), l.concurrency, l.request_rate, l.failed,
        l.request_throughput, l.output_throughput, l.total_throughput, l.ttft_ms.median,
        l.ttft_ms.p99, l.tpot_ms.median, l.itl_ms.median, l.e2e_ms.median, roof);
    out += line;
  }
  return out;
}

std::string format_prefix_cache(const std::vector<RequestRecord>& records) {
  std::map<int, std::vector<const RequestRecord*>> by_turn;
  long prompt = 0, cached = 0;
  for (const auto& r : records) {
    if (!r.ok) continue;
    by_turn[r.turn].push_back(&r);
    prompt += r.prompt_tokens;
    cached += r.cached_tokens;
  }
  std::string out;
  char line[256];
  std::snprintf(
      line, sizeof line, "  prefix cache hit rate: %.1f %% (%ld of %ld prompt tokens)\n",
      prompt > 0 ? 100.0 * static_cast<double>(cached) / static_cast<double>(prompt) : 0.0, cached,
      prompt);
  out += line;
  for (const auto& [turn, rs] : by_turn) {
    std::vector<double> ttft;
    long p = 0, c = 0;
    for (const auto* r : rs) {
      ttft.push_back(r->ttft_s * 1e3);
      p += r->prompt_tokens;
      c += r->cached_tokens;
    }
    const auto s = summarize(ttft);
    std::snprintf(line, sizeof line,
                  "  turn %d: %zu requests, TTFT median %.2f ms, P90 %.2f ms, prompt %.0f tokens, "
                  "cached %.1f %%\n",
                  turn + 1, rs.size(), s.median, s.p90,
                  static_cast<double>(p) / static_cast<double>(rs.size()),
                  p > 0 ? 100.0 * static_cast<double>(c) / static_cast<double>(p) : 0.0);
    out += line;
  }
  return out;
}

std::string format_level(const LevelResult& l) {
  std::string out;
  char line[256];
  auto row = [&](const char* name, double v, int decimals) {
    std::snprintf(line, sizeof line, "%-40s %-10.*f\n", name, decimals, v);
    out += line;
  };
  auto rule = [&](const std::string& title) {
    const int w = 50, pad = (w - static_cast<int>(title.size())) / 2;
    std::string r(static_cast<std::size_t>(pad), '-');
    r += title;
    r.resize(static_cast<std::size_t>(w), '-');
    out += r + "\n";
  };
  out += "============ Serving Benchmark Result ============\n";
  std::snprintf(line, sizeof line, "%-40s %s, concurrency %d%s\n", "Level:", l.config.c_str(),
                l.concurrency, l.steady_state ? ", steady state" : "");
  out += line;
  row("Successful requests:", l.completed, 0);
  row("Failed requests:", l.failed, 0);
  row("Benchmark duration (s):", l.duration_s, 2);
  row("Total input tokens:", l.total_input_tokens, 0);
  row("Total generated tokens:", l.total_output_tokens, 0);
  row("Request throughput (req/s):", l.request_throughput, 2);
  row("Output token throughput (tok/s):", l.output_throughput, 2);
  row("Total Token throughput (tok/s):", l.total_throughput, 2);
  auto block = [&](const std::string& title, const char* key, const Summary& s) {
    rule(title);
    const std::string k = key;
    row(("Mean " + k + " (ms):").c_str(), s.mean, 2);
    row(("Median " + k + " (ms):").c_str(), s.median, 2);
    row(("P90 " + k + " (ms):").c_str(), s.p90, 2);
    row(("P99 " + k + " (ms):").c_str(), s.p99, 2);
  };
  block("Time to First Token", "TTFT", l.ttft_ms);
  block("Time per Output Token (excl. 1st token)", "TPOT", l.tpot_ms);
  block("Inter-token Latency", "ITL", l.itl_ms);
  block("End-to-end Latency", "E2EL", l.e2e_ms);
  out += "==================================================\n";
  return out;
}

std::string format_failures(const std::string& what, int failed, int total,
                            const std::vector<std::pair<std::string, int>>& errors) {
  if (failed == 0) return "";
  std::string out =
      what + ": " + std::to_string(failed) + " of " + std::to_string(total) + " requests failed:\n";
  for (const auto& [e, n] : errors) out += "  " + std::to_string(n) + " x " + e + "\n";
  return out;
}

void write_report_json(const std::string& path, const Report& r) {
  json::array lv;
  for (const auto& l : r.levels) lv.push_back(to_json(l));
  std::ofstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot write");
  f << json::serialize(json::object{{"workload", r.workload}, {"levels", lv}}) << "\n";
}

Report read_report_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    const auto v = json::parse(ss.str());
    Report r;
    r.workload = std::string(v.at("workload").as_string());
    for (const auto& l : v.at("levels").as_array()) r.levels.push_back(level_from_json(l));
    return r;
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not a strata bench report: " + e.what());
  }
}

Report merge_reports(const std::vector<Report>& reports) {
  Report out;
  std::map<std::tuple<std::string, int, double>, LevelResult> by_key;
  for (const auto& r : reports) {
    if (out.workload.empty())
      out.workload = r.workload;
    else if (!r.workload.empty() && r.workload != out.workload)
      throw std::runtime_error("cannot merge reports of different workloads: '" + out.workload +
                               "' and '" + r.workload + "'");
    for (const auto& l : r.levels) by_key[{l.config, l.concurrency, l.request_rate}] = l;
  }
  for (auto& [k, l] : by_key) out.levels.push_back(l);
  return out;
}

std::string svg_line_chart(const std::string& title, const std::string& xlabel,
                           const std::string& ylabel, const std::vector<Series>& series) {
  const double W = 720, H = 440, L = 80, R = 170, T = 40, B = 60;
  double xmin = 1e300, xmax = -1e300, ymax = 0;
  for (const auto& s : series)
    for (auto [x, y] : s.points) {
      xmin = std::min(xmin, std::log2(std::max(x, 1e-9)));
      xmax = std::max(xmax, std::log2(std::max(x, 1e-9)));
      ymax = std::max(ymax, y);
    }
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmax - xmin < 1e-9) xmax = xmin + 1;
  if (ymax <= 0) ymax = 1;
  // round the y axis up to a 1/2/5 step
  const double mag = std::pow(10, std::floor(std::log10(ymax)));
  double top = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= ymax) {
      top = m * mag;
      break;
    }
  auto px = [&](double x) {
    return L + (std::log2(std::max(x, 1e-9)) - xmin) / (xmax - xmin) * (W - L - R);
  };
  auto py = [&](double y) { return H - B - y / top * (H - T - B); };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n"
    << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << title
    << "</text>\n";
  for (int i = 0; i <= 5; ++i) {
    const double y = top * i / 5;
    o << "<line x1='" << L << "' x2='" << W - R << "' y1='" << py(y) << "' y2='" << py(y)
      << "' stroke='#ddd'/><text x='" << L - 6 << "' y='" << py(y) + 4 << "' text-anchor='end'>"
      << y << "</text>\n";
  }
  for (int e = static_cast<int>(std::floor(xmin)); e <= static_cast<int>(std::ceil(xmax)); ++e) {
    const double x = std::pow(2.0, e);
    o << "<line x1='" << px(x) << "' x2='" << px(x) << "' y1='" << T << "' y2='" << H - B
      << "' stroke='#eee'/><text x='" << px(x) << "' y='" << H - B + 16 << "' text-anchor='middle'>"
      << x << "</text>\n";
  }
  o << "<text x='" << (L + W - R) / 2 << "' y='" << H - 18 << "' text-anchor='middle'>" << xlabel
    << "</text>\n"
    << "<text transform='translate(20," << (T + H - B) / 2 << ") rotate(-90)' text-anchor='middle'>"
    << ylabel << "</text>\n";
  for (std::size_t i = 0; i < series.size(); ++i) {
    auto pts = series[i].points;
    std::sort(pts.begin(), pts.end());
    const char* c = colors[i % std::size(colors)];
    o << "<polyline fill='none' stroke='" << c << "' stroke-width='2' points='";
    for (auto [x, y] : pts) o << px(x) << "," << py(y) << " ";
    o << "'/>\n";
    for (auto [x, y] : pts)
      o << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='3' fill='" << c << "'/>\n";
    o << "<rect x='" << W - R + 12 << "' y='" << T + 18 * i << "' width='12' height='12' fill='"
      << c << "'/><text x='" << W - R + 30 << "' y='" << T + 18 * i + 10 << "'>" << series[i].name
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

void write_plots(const std::string& dir, const Report& r) {
  std::map<std::string, Series> thr, p50, p99;
  for (const auto& l : r.levels) {
    const double x = l.concurrency > 0 ? l.concurrency : 1;
    thr[l.config].name = l.config;
    thr[l.config].points.emplace_back(x, l.output_throughput);
    p50[l.config].name = l.config + " P50";
    p50[l.config].points.emplace_back(x, l.ttft_ms.median);
    p99[l.config].name = l.config + " P99";
    p99[l.config].points.emplace_back(x, l.ttft_ms.p99);
  }
  std::vector<Series> a, b;
  for (auto& [k, s] : thr) a.push_back(s);
  for (auto& [k, s] : p50) b.push_back(s);
  for (auto& [k, s] : p99) b.push_back(s);
  std::ofstream(dir + "/throughput.svg") << svg_line_chart("Output throughput (" + r.workload + ")",
                                                           "concurrency", "output tokens/s", a);
  std::ofstream(dir + "/ttft.svg")
      << svg_line_chart("TTFT (" + r.workload + ")", "concurrency", "ms", b);
}

}  // namespace strata::bench

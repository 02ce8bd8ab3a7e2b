// The dashboards operators already run (issue 22 item 3) and the engine status log (item 4),
// over a real engine on the tiny CPU model behind the real server:
// - after a short workload, GET /metrics is well-formed exposition text (HELP and TYPE before
//   each family's samples, histograms with cumulative _bucket series ending in le="+Inf" equal
//   to _count, _sum and _count), and `promtool check metrics` finds nothing but the colon lint
//   when promtool is installed;
// - every metric an expression of vLLM's stock Grafana dashboard (two versions, copies in
//   tests/api/grafana/) or of Strata's (docs/grafana/strata.json) names is exported, and every
//   series the vLLM dashboards query is non-empty (histograms and counters counted > 0);
// - the status line appears every server.status_log_interval_s with its fields.
// GCC 12 with -fsanitize=address at -O2 reports std::regex's internal std::function as maybe
// uninitialized (a false positive inside libstdc++'s <regex>).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "api/server.h"
#include "tests/actors/engine_fixture.h"

namespace strata::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string source_dir() {
  const char* s = std::getenv("STRATA_SOURCE_DIR");
  return s ? s : STRATA_SOURCE_DIR;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The exposition text, checked as it is parsed: sample name -> its samples.
struct Exposition {
  std::map<std::string, std::vector<Sample>> samples;
  std::map<std::string, std::string> types;  // family -> gauge | counter | histogram
};

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  const std::regex sample_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$)");
  const std::regex label_re(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0) {
      const auto name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(helped.insert(name).second) << "HELP twice: " << name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      EXPECT_TRUE(helped.count(name)) << "TYPE before HELP: " << name;
      EXPECT_TRUE(type == "gauge" || type == "counter" || type == "histogram") << line;
      EXPECT_TRUE(e.types.emplace(name, type).second) << "TYPE twice: " << name;
      continue;
    }
    std::smatch m;
    if (!std::regex_match(line, m, sample_re)) {
      ADD_FAILURE() << "not a sample line: " << line;
      continue;
    }
    Sample s;
    const std::string labels = m[2];
    for (auto it = std::sregex_iterator(labels.begin(), labels.end(), label_re);
         it != std::sregex_iterator(); ++it)
      s.labels[(*it)[1]] = (*it)[2];
    const std::string v = m[3];
    s.value = v == "+Inf" ? INFINITY : std::stod(v);
    std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sx = suffix;
      if (name.size() > sx.size() && name.ends_with(sx) &&
          e.types.count(name.substr(0, name.size() - sx.size())) &&
          e.types[name.substr(0, name.size() - sx.size())] == "histogram")
        family = name.substr(0, name.size() - sx.size());
    }
    EXPECT_TRUE(e.types.count(family)) << "sample before its TYPE: " << line;
    EXPECT_TRUE(s.labels.count("model_name")) << line;
    e.samples[name].push_back(std::move(s));
  }
  // Histograms: cumulative buckets, the last le="+Inf" and equal to _count; _sum present.
  for (const auto& [family, type] : e.types) {
    if (type != "histogram") continue;
    const auto& b = e.samples[family + "_bucket"];
    if (b.empty()) {
      ADD_FAILURE() << family << " has no _bucket";
      continue;
    }
    double last = -1;
    for (const auto& s : b) {
      EXPECT_GE(s.value, last) << family << " buckets not cumulative";
      last = s.value;
    }
    EXPECT_EQ(b.back().labels.at("le"), "+Inf") << family;
    const auto& n = e.samples[family + "_count"];
    EXPECT_EQ(n.size(), 1u) << family;
    if (!n.empty()) {
      EXPECT_EQ(n[0].value, b.back().value) << family;
    }
    EXPECT_EQ(e.samples[family + "_sum"].size(), 1u) << family;
  }
  return e;
}

// Every PromQL expression of a Grafana dashboard: panel targets' `expr` and the templating
// variables' queries.
void collect_exprs(const json::value& v, std::vector<std::string>& out) {
  if (v.is_object()) {
    const auto& o = v.as_object();
    // A templating variable of type "query": its PromQL (a string, or {query: ...}).
    // Grafana's label_values(label) names no metric (every sample carries model_name, checked
    // above); label_values(metric, label) names `metric`.
    if (const auto* t = o.if_contains("type"); t && *t == "query" && o.contains("name")) {
      std::string q;
      if (const auto* x = o.if_contains("query"); x && x->is_string())
        q = x->as_string();
      else if (x && x->is_object() && x->as_object().contains("query"))
        q = x->as_object().at("query").as_string();
      std::smatch m;
      static const std::regex lv(R"(^\s*label_values\(\s*([^,()]*(?:\{[^}]*\})?)\s*,)");
      if (std::regex_search(q, m, lv))
        out.push_back(m[1]);
      else if (q.find("label_values(") == std::string::npos)
        out.push_back(q);
      return;
    }
    for (const auto& [k, x] : o) {
      if (k == "expr" && x.is_string())
        out.emplace_back(x.as_string());
      else
        collect_exprs(x, out);
    }
  } else if (v.is_array()) {
    for (const auto& x : v.as_array()) collect_exprs(x, out);
  }
}

// A metric selector of an expression: the name and its equality label matchers.
struct Selector {
  std::string name;
  std::map<std::string, std::string> matchers;
};

// The metric names an expression selects: identifiers that are not functions (followed by
// '('), keywords, label names (inside {} or by/without(...)), durations or string contents.
std::vector<Selector> selectors(const std::string& expr) {
  static const std::set<std::string> kKeywords = {
      "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
      "offset", "inf", "nan",
      // aggregation operators: "sum by(le) (...)"
      "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
      "count_values", "group"};
  std::vector<Selector> out;
  std::size_t i = 0;
  auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  };
  while (i < expr.size()) {
    const char c = expr[i];
    if (c == '"' || c == '\'') {  // string
      const char q = c;
      for (++i; i < expr.size() && expr[i] != q; ++i)
        if (expr[i] == '\\') ++i;
      ++i;
    } else if (c == '[') {  // range
      i = expr.find(']', i) + 1;
    } else if (c == '$') {  // a Grafana variable
      for (++i; i < expr.size() && ident(expr[i]); ++i) {
      }
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      for (; i < expr.size() && (ident(expr[i]) || expr[i] == '.'); ++i) {
      }
    } else if (ident(c)) {
      const std::size_t start = i;
      for (; i < expr.size() && ident(expr[i]); ++i) {
      }
      const std::string word = expr.substr(start, i - start);
      std::size_t j = i;
      while (j < expr.size() && std::isspace(static_cast<unsigned char>(expr[j]))) ++j;
      if (word == "by" || word == "without" || word == "on" || word == "ignoring" ||
          word == "group_left" || word == "group_right") {
        if (j < expr.size() && expr[j] == '(') i = expr.find(')', j) + 1;  // label names
        continue;
      }
      if (kKeywords.count(word) || (j < expr.size() && expr[j] == '(')) continue;
      Selector s;
      s.name = word;
      if (j < expr.size() && expr[j] == '{') {
        const std::size_t end = expr.find('}', j);
        const std::string body = expr.substr(j + 1, end - j - 1);
        static const std::regex m_re(R"re(([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)")re");
        for (auto it = std::sregex_iterator(body.begin(), body.end(), m_re);
             it != std::sregex_iterator(); ++it)
          s.matchers[(*it)[1]] = (*it)[2];
        i = end + 1;
      }
      out.push_back(std::move(s));
    } else if (c == '{') {  // a selector without a name: not used by these dashboards
      ADD_FAILURE() << "selector without a metric name in: " << expr;
      i = expr.find('}', i) + 1;
    } else {
      ++i;
    }
  }
  return out;
}

class DashboardsTest : public ::testing::Test {
 protected:
  void start(double status_interval_s) {
    Config c = test::tiny_config();
    // Sparse, and every finished request replayed: the quality guardrail's series exist.
    c.sparsity.enabled = true;
    c.sparsity.full_layers = 1;
    c.sparsity.capacity = 32;
    c.sparsity.window = 8;
    c.sparsity.sinks = 2;
    c.quality_monitor.sample_rate = 1;
    engine_ = Engine::create(c);
    ServerOptions o;
    o.server.port = 0;
    o.server.status_log_interval_s = status_interval_s;
    o.model_name = "tiny";
    o.handle_signals = false;
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu_);
      log_.emplace_back(Clock::now(), line);
    };
    server_ = std::make_unique<Server>(o);
    server_->listen();
    server_->set_engine(engine_);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (!server_) return;
    server_->stop();
    thread_.join();
  }
  http::response<http::string_body> call(http::verb verb, const std::string& target,
                                         const std::string& body = "",
                                         const std::string& bearer = "") {
    net::io_context io;
    tcp::socket s(io);
    s.connect({net::ip::make_address("127.0.0.1"), server_->port()});
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::user_agent, "dashboards-test");
    if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer b;
    http::response<http::string_body> res;
    http::read(s, b, res);
    return res;
  }
  void workload() {
    for (int i = 0; i < 4; ++i) {
      const auto r = call(http::verb::post, "/v1/completions",
                          R"({"prompt":"the quick brown fox )" + std::to_string(i) +
                              R"(","max_tokens":)" + std::to_string(4 + 2 * i) + "}");
      ASSERT_EQ(r.result_int(), 200) << r.body();
    }
    const auto r = call(http::verb::post, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":6,"n":2})");
    ASSERT_EQ(r.result_int(), 200) << r.body();
  }

  std::shared_ptr<Engine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<Clock::time_point, std::string>> log_;
};

TEST_F(DashboardsTest, EveryDashboardExpressionNamesAnExportedSeriesAfterAWorkload) {
  start(0);
  workload();
  // The workload's 6 sequences are replayed in the background: wait for their scores.
  for (int i = 0; i < 2000; ++i) {
    const auto s = engine_->stats();
    if (s.quality && s.quality->replays_completed >= 6) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto res = call(http::verb::get, "/metrics");
  ASSERT_EQ(res.result_int(), 200);
  const std::string text = res.body();
  const Exposition e = parse_exposition(text);

  struct Dashboard {
    std::string path;
    bool vllm;  // every series non-empty after the workload
  };
  const std::string src = source_dir();
  const std::vector<Dashboard> dashboards = {
      {src + "/tests/api/grafana/vllm_grafana_0e98964.json", true},
      {src + "/tests/api/grafana/vllm_grafana_7e09410.json", true},
      {src + "/docs/grafana/strata.json", false},
  };
  for (const auto& d : dashboards) {
    SCOPED_TRACE(d.path);
    std::vector<std::string> exprs;
    collect_exprs(json::parse(read_text(d.path)), exprs);
    ASSERT_GE(exprs.size(), 10u);
    std::set<std::string> names;
    for (const auto& expr : exprs) {
      for (const auto& sel : selectors(expr)) {
        names.insert(sel.name);
        const auto it = e.samples.find(sel.name);
        ASSERT_NE(it, e.samples.end())
            << "'" << expr << "' names " << sel.name << ", which /metrics does not export";
        if (!d.vllm) continue;
        // The series this selector picks with $model_name = the served name.
        double total = 0;
        int series = 0;
        for (const auto& s : it->second) {
          bool match = true;
          for (const auto& [k, v] : sel.matchers) {
            const std::string want = v == "$model_name" ? "tiny" : v;
            const auto l = s.labels.find(k);
            match = match && l != s.labels.end() && l->second == want;
          }
          if (!match) continue;
          ++series;
          total += s.value;
        }
        EXPECT_GT(series, 0) << sel.name << " in '" << expr << "' selects no series";
        const bool counted = sel.name.ends_with("_bucket") || sel.name.ends_with("_sum") ||
                             sel.name.ends_with("_count") || sel.name.ends_with("_total");
        if (counted) {
          EXPECT_GT(total, 0) << sel.name << " is still 0 after the workload";
        }
      }
    }
    for (const auto& n : names)
      EXPECT_TRUE(n.starts_with("vllm:") || n.starts_with("strata_")) << n;
    if (d.vllm) {
      EXPECT_TRUE(names.count("vllm:request_prefill_time_seconds_sum")) << "fixture changed?";
    }
  }

  // promtool, where installed (Debian's prometheus package): nothing but the colon lint.
  if (std::filesystem::exists("/usr/bin/promtool")) {
    const auto path = std::filesystem::temp_directory_path() / "strata_dashboards_metrics.txt";
    {
      std::ofstream f(path);
      f << text;
    }
    const std::string cmd = "/usr/bin/promtool check metrics < " + path.string() + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) {
      const std::string l = buf;
      if (!std::regex_search(l, std::regex(R"(^vllm:\S+ metric names should not contain ':')")))
        out += l;
    }
    const int rc = pclose(p);
    std::filesystem::remove(path);
    EXPECT_TRUE(out.empty()) << out;
    EXPECT_TRUE(WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 3) << rc << " " << out;
  }
}

TEST_F(DashboardsTest, StatusLineEveryIntervalWithItsFields) {
  const double interval = 0.3;
  start(interval);
  // Work across several intervals, so that each one is active and logged.
  const auto until = Clock::now() + std::chrono::milliseconds(1500);
  while (Clock::now() < until) workload();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  std::vector<std::pair<Clock::time_point, std::string>> lines;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& x : log_)
      if (x.second.rfind("strata: engine status: ", 0) == 0) lines.push_back(x);
  }
  ASSERT_GE(lines.size(), 4u);
  const std::regex re(
      R"(^strata: engine status: prompt [0-9.]+ tok/s, generation [0-9.]+ tok/s, running \d+, )"
      R"(waiting \d+, preempted \d+, KV [0-9.]+ % \(\d+/\d+ pages\), compression [0-9.]+x, )"
      R"(host overhead [0-9.]+ %, steps \d+ \(decode \d+, mixed \d+, prefill \d+\), )"
      R"(sync \d+ of \d+ steps( \([a-z_]+ \d+(, [a-z_]+ \d+)*\))?, profile v\d+$)");
  bool saw_generation = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_TRUE(std::regex_match(lines[i].second, re)) << lines[i].second;
    if (lines[i].second.find("generation 0.0 tok/s") == std::string::npos) saw_generation = true;
    if (i > 0) {
      const double gap = std::chrono::duration<double>(lines[i].first - lines[i - 1].first).count();
      EXPECT_GT(gap, interval * 0.7) << i;
      EXPECT_LT(gap, interval + 1.0) << i;  // the timer restarts after each line: no drift bound
    }
  }
  EXPECT_TRUE(saw_generation);
  // Idle: one idle line, then nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  std::size_t after = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& x : log_)
      if (x.second.rfind("strata: engine status: ", 0) == 0) ++after;
  }
  EXPECT_LE(after, lines.size() + 1);
}

TEST_F(DashboardsTest, ProfileChangesAreLoggedWithWhoAndWhat) {
  start(0);
  const std::string token = server_->admin_token();
  auto r = call(http::verb::put, "/admin/api/profile", R"({"capacity":128,"window":16})", token);
  ASSERT_EQ(r.result_int(), 200) << r.body();
  r = call(http::verb::put, "/admin/api/profile", R"({"window":-1})", token);
  ASSERT_EQ(r.result_int(), 400) << r.body();
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& x : log_) lines.push_back(x.second);
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(std::regex_match(
      lines[0], std::regex(R"(^strata serve: sparsity profile v\d+ -> v\d+ published by admin at )"
                           R"(127\.0\.0\.1:\d+ \(dashboards-test\): .*capacity \d+ -> 128, )"
                           R"(window \d+ -> 16$)")))
      << lines[0];
  EXPECT_TRUE(
      std::regex_search(lines[1], std::regex(R"(by admin at 127\.0\.0\.1:\d+ .*rejected: )")))
      << lines[1];
  EXPECT_NE(lines[1].find("window"), std::string::npos) << lines[1];
}

}  // namespace
}  // namespace strata::api

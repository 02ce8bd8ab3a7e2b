// strata bench: the serving benchmark (load generator, sweeps over concurrency and server
// configurations, report/plots) and the roofline calculator. docs/benchmarks.md.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "runtime/config.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/model/random_model.h"
#include "runtime/yaml_util.h"
#include "tools/bench/load_gen.h"
#include "tools/bench/report.h"
#include "tools/bench/roofline.h"
#include "tools/bench/server_proc.h"
#include "tools/cli/command.h"

namespace strata::cli {
int run_bench_host(Args& a);  // tools/cli/bench_host.cpp

namespace {
namespace fs = std::filesystem;
using namespace strata::bench;

std::vector<int> int_list(const std::string& s, const std::string& key) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoi(item));
    } catch (const std::exception&) {
      throw ConfigError(key, "expected a comma-separated list of integers, got '" + s + "'");
    }
    if (out.back() < 0) throw ConfigError(key, "values must be >= 0");
  }
  if (out.empty()) throw ConfigError(key, "empty list");
  return out;
}

// Model shape of a config's model.path: "random:<preset>" or a HF directory.
ModelConfig shape_of(const std::string& path) {
  if (is_random_model(path)) return random_model_config(path);
  return parse_model_config(read_text_file(path + "/config.json"), path + "/config.json");
}

std::string label_of(const std::string& config_path) {
  return fs::path(config_path).stem().string();
}

int run_roofline(Args& a) {
  const auto preset = a.get_or("preset", "llama3-8b");
  const ModelConfig m = a.get("model") ? shape_of(*a.get("model")) : shape_of("random:" + preset);
  SparsityProfile prof;
  if (auto f = a.get("sparsity")) prof = load_sparsity_file(*f);
  const Workload w{static_cast<int>(a.get_int("input", 4000)),
                   static_cast<int>(a.get_int("output", 500))};
  const double budget =
      a.get("kv-budget")
          ? static_cast<double>(strata::yaml::parse_bytes(*a.get("kv-budget"), "--kv-budget"))
          : 0;
  Roofline full(m, {}), sparse(m, prof.resolve(m.num_hidden_layers));
  std::printf("model: %d layers, hidden %d, %.2f B params; workload %d in / %d out; KV budget %s\n",
              m.num_hidden_layers, m.hidden_size, static_cast<double>(m.num_params()) / 1e9,
              w.input_tokens, w.output_tokens, budget > 0 ? a.get("kv-budget")->c_str() : "none");
  std::printf(
      "weights read per decode step: %.2f GB; KV per sequence at %d tokens: full %.1f MB, profile "
      "%.1f MB (%.2fx less)\n",
      full.weight_bytes_per_step() / 1e9, w.input_tokens + w.output_tokens,
      full.kept_kv_bytes(w.input_tokens + w.output_tokens, w.output_tokens) / 1e6,
      sparse.kept_kv_bytes(w.input_tokens + w.output_tokens, w.output_tokens) / 1e6,
      full.kept_kv_bytes(w.input_tokens + w.output_tokens, w.output_tokens) /
          sparse.kept_kv_bytes(w.input_tokens + w.output_tokens, w.output_tokens));
  std::printf("prefill floor of one prompt: %.1f ms (%.2f TFLOP)\n",
              full.prefill_floor_s(w.input_tokens) * 1e3,
              full.prefill_flops(w.input_tokens) / 1e12);
  if (budget > 0)
    std::printf("max sequences in budget: full %d, profile %d\n", full.max_sequences(budget, w),
                sparse.max_sequences(budget, w));
  std::printf("%6s %14s %14s %14s %8s\n", "conc", "step full ms", "full tok/s", "profile tok/s",
              "ratio");
  for (int c : int_list(a.get_or("concurrency", "1,8,20,32,64,128,256"), "--concurrency")) {
    const double f = full.best_output_throughput(c, w, budget),
                 s = sparse.best_output_throughput(c, w, budget);
    std::printf(
        "%6d %14.2f %14.0f %14.0f %8.2f\n", c,
        full.decode_step_floor_s(c, w.input_tokens + w.output_tokens / 2, w.output_tokens / 2) *
            1e3,
        f, s, f > 0 ? s / f : 0);
  }
  return 0;
}

// The server's counters once it has settled: no request running and two reads equal (the
// engine updates its statistics a moment after the last SSE event reaches the client).
std::map<std::string, double> settled_metrics(const std::string& host, int port) {
  std::map<std::string, double> last;
  for (int i = 0; i < 50; ++i) {
    auto m = parse_prometheus(http_get(host, port, "/metrics").second);
    const bool idle =
        m.count("vllm:num_requests_running") == 0 || m.at("vllm:num_requests_running") == 0;
    if (idle && m == last) return m;
    last = std::move(m);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return last;
}

// `strata bench serve --help`. Keep the defaults here equal to the ones run_serve reads.
constexpr const char* kServeHelp =
    R"(strata bench serve: the serving benchmark (docs/benchmarks.md). Streams
OpenAI /v1/completions requests (prompts of an exact token length sent as token ids,
ignore_eos, temperature 0) at each concurrency level and reports, per level, what a client
sees: TTFT, TPOT, ITL and end-to-end latency (mean, median, P90, P99, as vLLM's serving
benchmark defines them; each SSE event is timestamped as it is read off the socket) and
request/token throughput, plus the server's /metrics deltas and a roofline fraction.

Target (one is required; there is no default server):
  --host H --port P          an OpenAI-compatible server already running (strata, vLLM, ...);
                             either flag alone means the other's default (127.0.0.1, 8000)
  --server-config CFG.yaml   start `strata serve --config CFG.yaml` on a free port for each level
                             and stop it after (repeat to compare configurations back to back)
  --serve-arg ARG            one more argument for those servers (repeat: --serve-arg --set
                             --serve-arg model.tokenizer=PATH)
  --strata-bin PATH          the strata binary to start (default: this one)
  --ready-timeout S          seconds to wait for a started server's /health (default 900)
  --model NAME               "model" of the requests (default: the first id of GET /v1/models)
  --api-key KEY              sent as "Authorization: Bearer KEY", model discovery included

Workload:
  --input N                  prompt tokens per request (default 128)
  --output N                 output tokens per request, min_tokens = max_tokens (default 32)
  --text                     send text prompts (N words; token count then approximate)
  --id-range N               prompt token ids drawn from [1, N) (default 600)
  --seed N                   seed of the prompts and of the Poisson arrival gaps (default 0;
                             the k-th concurrency level uses N + k, so levels share no prompt)
  --concurrency LIST         levels, max requests in flight, 0 = unbounded (default 1,4,16)
  --num-prompts N            measured requests per level (default: as below)
  --prompts-per-concurrency K  measured requests per level = max(min-prompts, K x c) (default 4)
  --min-prompts N            (default 8)
  --request-rate R           Poisson arrivals at R requests/s (default 0 = all at once)
  --warmup N                 requests sent one at a time before each level, not measured
                             (default 1)
  --steady-state             a ramp-up round of c requests with staggered output lengths, left
                             out of the figures; the measured requests then arrive as slots free
                             up (steady-state TTFT/TPOT; needs c >= 1)
  --duration S               stop sending after S seconds of a level (default 0 = no bound)
  --request-timeout S        give up on one request after S seconds (default 600)
  --keep-alive               reuse connections between requests (default: one per request)
  --workload W               random (default) | shared-prefix | multi-turn (the prefix cache's
                             workloads; both print TTFT per turn/class and the cache hit rate)
  --shared-prefix N          shared-prefix: every prompt starts with the same N ids, then its
                             own --input ids (default 1024)
  --turns T                  multi-turn: turns per conversation (default 4); turn 1 sends
                             --input ids, each later turn resends the conversation (previous
                             prompt + --output ids for the answer + --turn-tokens new ids)
                             when the last answer ended; --concurrency = conversations at once
  --turn-tokens N            multi-turn: new ids per later turn (default 64)

Output:
  --out-dir D                report.json, throughput.svg, ttft.svg, server logs
                             (default bench-results)
  --label NAME               configuration name of a --host/--port target (default server)
  --merge OLD.json           merge earlier reports into this one (repeatable)
  --kv-budget B              KV budget for the roofline (e.g. 8GiB; default none)
  --roofline-model DIR|random:PRESET  model shape for the roofline of a --host/--port target

Exit status: 0 when every request (warm-up and ramp-up included) succeeded; 1 when any
failed (the count and the reasons are printed: refused connection, HTTP 401, ...) or the model
could not be discovered; 2 on a usage error. (--fail-on-error is accepted: it is the default.)
)";

int run_serve(Args& a) {
  const auto out_dir = a.get_or("out-dir", "bench-results");
  LoadOptions base;
  base.host = a.get_or("host", "127.0.0.1");
  base.port = static_cast<int>(a.get_int("port", 8000));
  base.model = a.get_or("model", "");
  base.api_key = a.get_or("api-key", "");
  base.input_tokens = static_cast<int>(a.get_int("input", 128));
  base.output_tokens = static_cast<int>(a.get_int("output", 32));
  if (base.input_tokens < 1 || base.output_tokens < 1)
    throw ConfigError("--input/--output", "must be >= 1");
  base.text_prompts = a.flag("text");
  base.id_range = static_cast<int>(a.get_int("id-range", 600));
  base.warmup = static_cast<int>(a.get_int("warmup", 1));
  base.request_rate = a.get_double("request-rate", 0);
  base.max_duration_s = a.get_double("duration", 0);
  base.timeout_s = a.get_double("request-timeout", 600);
  if (base.timeout_s <= 0) throw ConfigError("--request-timeout", "must be > 0");
  base.keep_alive = a.flag("keep-alive");
  base.steady_state = a.flag("steady-state");
  base.seed = static_cast<std::uint64_t>(a.get_int("seed", 0));
  const std::string workload = a.get_or("workload", "random");
  if (workload == "shared-prefix") {
    base.workload = LoadOptions::Workload::kSharedPrefix;
  } else if (workload == "multi-turn") {
    base.workload = LoadOptions::Workload::kMultiTurn;
  } else if (workload != "random") {
    throw ConfigError("--workload",
                      "must be random, shared-prefix or multi-turn, got '" + workload + "'");
  }
  base.shared_prefix = static_cast<int>(a.get_int("shared-prefix", 1024));
  base.turns = static_cast<int>(a.get_int("turns", 4));
  base.turn_tokens = static_cast<int>(a.get_int("turn-tokens", 64));
  if (base.shared_prefix < 0 || base.turns < 1 || base.turn_tokens < 0)
    throw ConfigError("--shared-prefix/--turns/--turn-tokens", "must be >= 0 (turns >= 1)");
  const std::string level_list = a.get_or("concurrency", "1,4,16");
  const auto levels = int_list(level_list, "--concurrency");
  const int fixed_prompts = static_cast<int>(a.get_int("num-prompts", 0));
  const int per_level = static_cast<int>(a.get_int("prompts-per-concurrency", 4));
  const int min_prompts = static_cast<int>(a.get_int("min-prompts", 8));
  const auto configs = a.all("server-config");
  const auto serve_args = a.all("serve-arg");
  if (configs.empty() && !a.get("host") && !a.get("port")) {
    const std::string count = fixed_prompts > 0 ? std::to_string(fixed_prompts)
                                                : "max(" + std::to_string(min_prompts) + ", " +
                                                      std::to_string(per_level) + " x concurrency)";
    std::fprintf(
        stderr,
        "strata bench serve: which server? Nothing was sent: there is no default target.\n"
        "With these settings it would send, at each concurrency level %s, %s streamed\n"
        "/v1/completions requests of %d prompt tokens and %d output tokens (after %d warm-up\n"
        "request%s), measure TTFT/TPOT/ITL/E2E and throughput, and write %s/report.json and "
        "plots.\n"
        "Name the target:\n"
        "  --host H --port P          a server already running (OpenAI-compatible)\n"
        "  --server-config CFG.yaml   start `strata serve` with that config for each level\n"
        "e.g. strata bench serve --host 127.0.0.1 --port 8000\n"
        "     strata bench serve --server-config configs/tiny-cpu.yaml --concurrency 1,4\n"
        "strata bench serve --help lists every flag.\n",
        level_list.c_str(), count.c_str(), base.input_tokens, base.output_tokens, base.warmup,
        base.warmup == 1 ? "" : "s", out_dir.c_str());
    return 2;
  }
  fs::create_directories(out_dir);
  const std::string binary = a.get_or("strata-bin", fs::read_symlink("/proc/self/exe").string());
  const double budget =
      a.get("kv-budget")
          ? static_cast<double>(strata::yaml::parse_bytes(*a.get("kv-budget"), "--kv-budget"))
          : 0;

  // Roofline per configuration (needs the model shape).
  auto roofline_for = [&](const std::string& cfg) -> std::unique_ptr<Roofline> {
    try {
      if (!cfg.empty()) {
        auto c = load_config_file(cfg);
        for (std::size_t i = 0; i + 1 < serve_args.size(); ++i)
          if (serve_args[i] == "--model") c.model.path = serve_args[i + 1];
        return std::make_unique<Roofline>(
            shape_of(c.model.path), c.sparsity.resolve(shape_of(c.model.path).num_hidden_layers));
      }
      if (auto p = a.get("roofline-model"))
        return std::make_unique<Roofline>(shape_of(*p), std::vector<LayerRule>{});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench: no roofline for %s: %s\n", cfg.c_str(), e.what());
    }
    return nullptr;
  };

  Report report;
  report.workload =
      std::to_string(base.input_tokens) + " in / " + std::to_string(base.output_tokens) + " out";
  if (base.workload == LoadOptions::Workload::kSharedPrefix)
    report.workload += ", shared prefix " + std::to_string(base.shared_prefix);
  if (base.workload == LoadOptions::Workload::kMultiTurn)
    report.workload +=
        ", " + std::to_string(base.turns) + " turns of +" + std::to_string(base.turn_tokens);
  const std::vector<std::string> cfgs = configs.empty() ? std::vector<std::string>{""} : configs;
  std::vector<std::unique_ptr<Roofline>> roofs;
  for (const auto& c : cfgs) roofs.push_back(roofline_for(c));
  int failed_measured = 0, failed_excluded = 0;
  for (std::size_t li = 0; li < levels.size(); ++li) {
    const int level = levels[li];
    for (std::size_t ci = 0; ci < cfgs.size(); ++ci) {
      const auto& cfg = cfgs[ci];
      LoadOptions o = base;
      o.concurrency = level;
      // Level k sends the prompts of seed + k: against one running server, one seed for every
      // level re-sent the earlier levels' prompts and the prefix cache served them (the later
      // levels' throughput counted cache hits no new client gets).
      o.seed = base.seed + li;
      o.num_prompts = fixed_prompts > 0 ? fixed_prompts : std::max(min_prompts, level * per_level);
      std::unique_ptr<ServerProcess> server;
      const std::string label = cfg.empty() ? a.get_or("label", "server") : label_of(cfg);
      if (!cfg.empty()) {  // the tool starts each configuration itself, back to back per level
        o.port = free_port();
        o.host = "127.0.0.1";
        server = std::make_unique<ServerProcess>(binary, cfg, o.port, serve_args,
                                                 out_dir + "/server-" + label + ".log");
        server->wait_ready(a.get_double("ready-timeout", 900));
      }
      std::map<std::string, double> before;  // server counters after the warm-up
      o.on_measure_start = [&] { before = settled_metrics(o.host, o.port); };
      o.progress = [&](int done, int failed, int total, double t) {
        std::fprintf(stderr, "\r[%s c=%d] %d/%d done, %d failed, %.1fs   ", label.c_str(), level,
                     done, total, failed, t);
      };
      double dur = 0;
      LoadExcluded excluded;
      const auto recs = run_load(o, &dur, &excluded);
      std::fprintf(stderr, "\n");
      auto res = aggregate(recs, dur);
      if (o.steady_state) {
        const auto w = steady_window(recs, excluded.ramp);
        if (w.transient)
          std::fprintf(stderr,
                       "bench: [%s c=%d] every measured request was sent before the ramp-up "
                       "round's prompts were all prefilled: throughput is over first -> last "
                       "measured send (not steady; measure more requests at this level)\n",
                       label.c_str(), level);
        apply_steady_window(res, w);
      }
      const std::string what = "bench: [" + label + " c=" + std::to_string(level) + "]";
      std::fprintf(
          stderr, "%s",
          format_failures(what, res.failed, static_cast<int>(recs.size()), res.errors).c_str());
      const int excluded_sent = excluded.requests + o.warmup;
      std::fprintf(
          stderr, "%s",
          format_failures(what + " warm-up/ramp-up", excluded.warmup_failed + excluded.failed,
                          excluded_sent, count_errors(excluded.failures))
              .c_str());
      failed_measured += res.failed;
      failed_excluded += excluded.warmup_failed + excluded.failed;
      res.steady_state = o.steady_state;
      res.excluded_requests = excluded.requests;
      res.excluded_input_tokens = excluded.input_tokens;
      res.excluded_output_tokens = excluded.output_tokens;
      res.config = label;
      res.concurrency = level;
      res.request_rate = o.request_rate;
      const auto after = settled_metrics(o.host, o.port);
      for (const auto& [k, v] : after) {
        const bool counter = k.size() > 6 && k.compare(k.size() - 6, 6, "_total") == 0;
        res.server[k] = counter ? v - (before.count(k) ? before.at(k) : 0.0) : v;
      }
      if (roofs[ci])
        res.roofline_output_throughput =
            roofs[ci]->best_output_throughput(level, {o.input_tokens, o.output_tokens}, budget);
      std::printf("%s", format_level(res).c_str());
      // Random prompts share no prefix: the hit rate is printed for them only when some were
      // served from the cache (a server that saw these prompts before), which the figures above
      // then include.
      const bool hits = std::any_of(recs.begin(), recs.end(), [](const RequestRecord& r) {
        return r.ok && r.cached_tokens > 0;
      });
      if (base.workload != LoadOptions::Workload::kRandom || hits)
        std::printf("%s", format_prefix_cache(recs).c_str());
      std::fflush(stdout);
      report.levels.push_back(res);
      if (server) server->stop();
    }
  }
  std::vector<Report> all{report};
  for (const auto& m : a.all("merge")) all.insert(all.begin(), read_report_json(m));
  const auto merged = merge_reports(all);
  write_report_json(out_dir + "/report.json", merged);
  write_plots(out_dir, merged);
  std::printf("%s", format_table(merged.levels).c_str());
  std::printf("report: %s/report.json, plots: %s/throughput.svg, %s/ttft.svg\n", out_dir.c_str(),
              out_dir.c_str(), out_dir.c_str());
  if (failed_measured + failed_excluded > 0) {
    std::fprintf(stderr,
                 "bench: %d requests failed (%d measured, %d warm-up/ramp-up; reasons above): "
                 "exit status 1\n",
                 failed_measured + failed_excluded, failed_measured, failed_excluded);
    return 1;
  }
  return 0;
}

int run_report(Args& a) {
  std::vector<Report> all;
  for (const auto& m : a.all("merge")) all.push_back(read_report_json(m));
  if (all.empty()) throw ConfigError("--merge", "give at least one report.json");
  const auto merged = merge_reports(all);
  const auto out_dir = a.get_or("out-dir", ".");
  fs::create_directories(out_dir);
  write_report_json(out_dir + "/report.json", merged);
  write_plots(out_dir, merged);
  std::printf("%s", format_table(merged.levels).c_str());
  return 0;
}

int run(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  Args a(argc > 0 ? argc - 1 : 0, argv + (argc > 0 ? 1 : 0),
         {"help", "text", "keep-alive", "fail-on-error", "steady-state"});
  if (sub == "serve" && a.flag("help")) {
    std::printf("%s", kServeHelp);
    return 0;
  }
  if (sub == "serve") {
    a.expect_only({"host",
                   "port",
                   "model",
                   "api-key",
                   "input",
                   "output",
                   "text",
                   "id-range",
                   "warmup",
                   "request-rate",
                   "duration",
                   "keep-alive",
                   "seed",
                   "concurrency",
                   "num-prompts",
                   "prompts-per-concurrency",
                   "min-prompts",
                   "server-config",
                   "serve-arg",
                   "strata-bin",
                   "kv-budget",
                   "out-dir",
                   "merge",
                   "label",
                   "roofline-model",
                   "ready-timeout",
                   "fail-on-error",
                   "steady-state",
                   "request-timeout",
                   "workload",
                   "shared-prefix",
                   "turns",
                   "turn-tokens"});
    return run_serve(a);
  }
  if (sub == "roofline" && !a.flag("help")) {
    a.expect_only({"preset", "model", "sparsity", "input", "output", "kv-budget", "concurrency"});
    return run_roofline(a);
  }
  if (sub == "host" && !a.flag("help")) {
    a.expect_only({"preset", "batch", "context", "steps", "warmup-steps", "tokenizer", "config",
                   "max-num-batched-tokens", "sparsity", "pages"});
    return run_bench_host(a);
  }
  if (sub == "report" && !a.flag("help")) {
    a.expect_only({"merge", "out-dir"});
    return run_report(a);
  }
  std::printf(
      "strata bench serve   --host H --port P | --server-config CFG.yaml ...  [--input 128] "
      "[--output 32]\n"
      "                     [--concurrency 1,4,16] [--steady-state] [--api-key K] [--model M] "
      "...\n"
      "                     (strata bench serve --help: every flag and its default)\n"
      "strata bench roofline [--preset llama3-8b | --model DIR] [--sparsity F] --input N --output "
      "N\n"
      "                     [--kv-budget B] [--concurrency LIST]\n"
      "strata bench report  --merge a.json --merge b.json [--out-dir D]\n"
      "strata bench host    [--preset llama3-8b] [--batch 64] [--context 4096] [--steps 200]\n"
      "                     [--warmup-steps 10] [--config CFG.yaml] [--sparsity F] "
      "[--max-num-batched-tokens N]\n"
      "                     [--tokenizer tokenizer.json] [--pages N]   (engine host cost per "
      "step, null backend)\n");
  return sub == "--help" || sub == "help" || a.flag("help") ? 0 : 2;
}

}  // namespace
STRATA_COMMAND(
    "bench",
    "serving benchmark, roofline, reports, engine host cost (serve | roofline | report | host)",
    run);
}  // namespace strata::cli

// strata eval: quality under sparsity (tools/bench/quality.h, docs/quality.md).
#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "runtime/config.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/text/tokenizer.h"
#include "tools/bench/guardrail_check.h"
#include "tools/bench/quality.h"
#include "tools/bench/report.h"
#include "tools/cli/command.h"
#ifdef STRATA_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace strata::cli {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;
using namespace strata::bench;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}
std::vector<double> numbers(const std::string& s, const std::string& key) {
  std::vector<double> out;
  for (const auto& x : split(s)) {
    try {
      out.push_back(std::stod(x));
    } catch (const std::exception&) {
      throw ConfigError(key, "expected comma-separated numbers, got '" + s + "'");
    }
  }
  if (out.empty()) throw ConfigError(key, "empty list");
  return out;
}

// A paired difference of two exact-match vectors over the same cases: the loss (reference
// right, this wrong, minus the reverse, over n) and the 95 % interval half-width of Agresti and
// Min (2005): the adjusted Wald interval with 0.5 added to each cell of the 2 × 2 table, so
// that no discordant pair does not claim certainty.
struct PairedLoss {
  double loss = 0, half = 0;
  int lost = 0, gained = 0, n = 0;
};
PairedLoss paired_loss(const std::vector<std::uint8_t>& ref, const std::vector<std::uint8_t>& x) {
  PairedLoss p;
  p.n = static_cast<int>(std::min(ref.size(), x.size()));
  for (int i = 0; i < p.n; ++i) {
    p.lost += ref[i] && !x[i];
    p.gained += !ref[i] && x[i];
  }
  if (p.n == 0) return p;
  p.loss = static_cast<double>(p.lost - p.gained) / p.n;
  const double b = p.lost + 0.5, c = p.gained + 0.5, n = p.n + 2.0, d = (b - c) / n;
  p.half = 1.959964 * std::sqrt(std::max(0.0, (b + c) / n - d * d) / n);
  return p;
}

// One result row (also the eval.json row).
struct Row {
  std::string policy;
  int full_layers = 0;
  std::string full_list;  // explicit full layers ("6+11", --full-layer-lists), else ""
  double ratio = 1;       // requested sparse-layer compression (context / capacity)
  int context = 0;
  int capacity = 0;
  double sparse_compression = 1, overall_compression = 1;
  double ppl = 0, ppl_change = 0, agreement = 1;
  double retrieval_window = 0, retrieval_followup = 0;
  // Paired against the full cache on the same cases: loss = full − this (points as a
  // fraction), with its 95 % interval half-width.
  PairedLoss loss_window, loss_followup;
  std::string window_bits, followup_bits;  // per case "1" right / "0" wrong, in set order
  int retrieval_n = 0, docs = 0, scored_tokens = 0;
  // Per document, the continuation's argmax at each scored position (--compare's agreement).
  std::vector<std::vector<std::int32_t>> argmax;
};

json::object to_json(const Row& r) {
  return json::object{{"policy", r.policy},
                      {"full_layers", r.full_layers},
                      {"full_layer_list", r.full_list},
                      {"context", r.context},
                      {"capacity", r.capacity},
                      {"requested_sparse_compression", r.ratio},
                      {"sparse_compression", r.sparse_compression},
                      {"overall_compression", r.overall_compression},
                      {"ppl", r.ppl},
                      {"ppl_change", r.ppl_change},
                      {"agreement", r.agreement},
                      {"retrieval_window", r.retrieval_window},
                      {"retrieval_followup", r.retrieval_followup},
                      {"loss_window", r.loss_window.loss},
                      {"loss_window_ci95", r.loss_window.half},
                      {"loss_followup", r.loss_followup.loss},
                      {"loss_followup_ci95", r.loss_followup.half},
                      {"window_cases", r.window_bits},
                      {"followup_cases", r.followup_bits},
                      {"retrieval_cases", r.retrieval_n},
                      {"documents", r.docs},
                      {"scored_tokens", r.scored_tokens},
                      {"argmax", json::value_from(r.argmax)}};
}

Row row_from_json(const json::value& v) {
  const auto& o = v.as_object();
  auto num = [&](const char* k) { return json::value_to<double>(o.at(k)); };
  Row r;
  r.policy = json::value_to<std::string>(o.at("policy"));
  r.full_layers = static_cast<int>(num("full_layers"));
  if (o.contains("full_layer_list"))
    r.full_list = json::value_to<std::string>(o.at("full_layer_list"));
  r.context = static_cast<int>(num("context"));
  r.capacity = o.contains("capacity") ? static_cast<int>(num("capacity")) : 0;
  r.ratio = num("requested_sparse_compression");
  r.sparse_compression = num("sparse_compression");
  r.overall_compression = num("overall_compression");
  r.ppl = num("ppl");
  r.ppl_change = num("ppl_change");
  r.agreement = num("agreement");
  r.retrieval_window = num("retrieval_window");
  r.retrieval_followup = num("retrieval_followup");
  r.retrieval_n = o.contains("retrieval_cases") ? static_cast<int>(num("retrieval_cases")) : 0;
  if (o.contains("loss_window")) {
    r.loss_window.loss = num("loss_window");
    r.loss_window.half = num("loss_window_ci95");
    r.loss_followup.loss = num("loss_followup");
    r.loss_followup.half = num("loss_followup_ci95");
    r.loss_window.n = r.loss_followup.n = r.retrieval_n;
  }
  if (o.contains("window_cases")) {
    r.window_bits = json::value_to<std::string>(o.at("window_cases"));
    r.followup_bits = json::value_to<std::string>(o.at("followup_cases"));
  }
  r.docs = o.contains("documents") ? static_cast<int>(num("documents")) : 0;
  r.scored_tokens = o.contains("scored_tokens") ? static_cast<int>(num("scored_tokens")) : 0;
  if (o.contains("argmax"))
    r.argmax = json::value_to<std::vector<std::vector<std::int32_t>>>(o.at("argmax"));
  return r;
}

std::vector<Row> read_eval_json(const std::string& path, const char* option, std::string* model) {
  std::ifstream in(path);
  if (!in) throw ConfigError(option, "cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<Row> rows;
  try {
    const json::value v = json::parse(ss.str());
    if (model) *model = json::value_to<std::string>(v.at("model"));
    for (const auto& r : v.at("rows").as_array()) rows.push_back(row_from_json(r));
  } catch (const std::exception& e) {
    throw ConfigError(option, "'" + path + "' is not an eval.json: " + e.what());
  }
  return rows;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string pct(double v) {
  return fmt("%.0f %%", 100 * v);
}
std::string signed_pct(double v) {
  std::string s = fmt("%+.1f %%", 100 * v);
  if (s[0] == '-') s = "−" + s.substr(1);  // typographic minus, as docs/quality.md writes it
  return s;
}
std::string ctx_name(int c) {
  return c % 1024 == 0 ? std::to_string(c / 1024) + "k" : std::to_string(c);
}

// 95 % Wilson interval half-width at accuracy p over n cases (the widest, p = 0.5, if p < 0).
double wilson_half(double p, int n) {
  if (n <= 0) return 1;
  const double z = 1.959964, nn = n;
  const double d = 1 + z * z / nn;
  return z * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / d;
}

// The docs/quality.md results table: rows policy × full layers × sparse ratio, columns per
// context (retrieval in window, follow-up), then Δppl and agreement per context.
std::string markdown_table(const std::vector<Row>& rows, const std::string& command) {
  std::set<int> ctx_set;
  for (const auto& r : rows) ctx_set.insert(r.context);
  const std::vector<int> ctxs(ctx_set.begin(), ctx_set.end());
  auto find = [&](const std::string& pol, int fl, const std::string& fll, double ratio,
                  int ctx) -> const Row* {
    for (const auto& r : rows)
      if (r.policy == pol && r.context == ctx &&
          (pol == "full" || (r.full_layers == fl && r.full_list == fll && r.ratio == ratio)))
        return &r;
    return nullptr;
  };
  auto both = [&](const std::vector<const Row*>& rs, auto f) {
    std::string s;
    for (std::size_t i = 0; i < rs.size(); ++i) s += (i ? " / " : "") + (rs[i] ? f(*rs[i]) : "–");
    return s;
  };
  std::string ctx_list;
  for (std::size_t i = 0; i < ctxs.size(); ++i) ctx_list += (i ? " / " : "") + ctx_name(ctxs[i]);
  std::ostringstream md;
  md << "| policy | full layers | sparse × | overall × (" << ctx_list << ")";
  for (int c : ctxs) md << " | retrieval " << ctx_name(c) << ": in window | follow-up";
  md << " | Δppl (" << ctx_list << ") | agreement (" << ctx_list << ") |\n|---|---|---|---";
  for (std::size_t i = 0; i < ctxs.size(); ++i) md << "|---|---";
  md << "|---|---|\n";
  std::vector<std::tuple<std::string, int, std::string, double>> keys;  // first-seen order
  for (const auto& r : rows) {
    std::tuple<std::string, int, std::string, double> k{
        r.policy, r.policy == "full" ? -1 : r.full_layers, r.full_list,
        r.policy == "full" ? 1 : r.ratio};
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  int n_min = 1 << 30, docs = 0, scored = 0;
  for (const auto& [pol, fl, fll, ratio] : keys) {
    std::vector<const Row*> rs;
    for (int c : ctxs) rs.push_back(find(pol, fl, fll, ratio, c));
    for (auto* r : rs)
      if (r) n_min = std::min(n_min, r->retrieval_n), docs = r->docs, scored = r->scored_tokens;
    if (pol == "full") {
      md << "| full cache | all | 1 | 1";
      for (auto* r : rs)
        md << " | " << (r ? pct(r->retrieval_window) : "–") << " | "
           << (r ? pct(r->retrieval_followup) : "–");
      md << " | ppl " << both(rs, [](const Row& r) { return fmt("%.3g", r.ppl); })
         << " | 100 % |\n";
      continue;
    }
    md << "| " << pol << " | " << (fll.empty() ? std::to_string(fl) : "layers " + fll) << " | "
       << fmt("%g", ratio) << " | "
       << both(rs, [](const Row& r) { return fmt("%.2f", r.overall_compression); });
    auto cell = [](double acc, const PairedLoss& l) {
      return pct(acc) + " (" + fmt("%+.1f", -100 * l.loss) + " ± " + fmt("%.1f", 100 * l.half) +
             ")";
    };
    for (auto* r : rs)
      md << " | " << (r ? cell(r->retrieval_window, r->loss_window) : "–") << " | "
         << (r ? cell(r->retrieval_followup, r->loss_followup) : "–");
    md << " | " << both(rs, [](const Row& r) { return signed_pct(r.ppl_change); }) << " | "
       << both(rs, [](const Row& r) { return pct(r.agreement); }) << " |\n";
  }
  md << "\nRetrieval: exact match over " << n_min << " facts per context and mode (95 % interval "
     << "at most ±" << fmt("%.0f", 100 * wilson_half(0.5, n_min)) << " points, Wilson; ±"
     << fmt("%.0f", 100 * wilson_half(0.9, n_min)) << " near 90 %). Δppl and agreement: " << docs
     << " documents × " << scored
     << " continuation tokens per context. Overall × = full-cache KV bytes ÷ bytes held, all "
        "layers (the cache's accounting). In parentheses: the change against the full cache on "
        "the same cases, in points, with its 95 % interval (paired, Agresti–Min).\n";
  if (!command.empty()) md << "\n`" << command << "`\n";
  return md.str();
}

// --compare A.json,B.json: B against A row by row (same policy, full layers, context and
// capacity; the same inputs, e.g. --quantization fp8 against none): perplexity change, greedy
// agreement of B's argmaxes with A's over every scored position, and the retrieval paired
// differences (A right and B wrong, minus the reverse) with their 95 % intervals.
int compare(const std::string& a_path, const std::string& b_path, const std::string& out_dir) {
  const auto a = read_eval_json(a_path, "--compare", nullptr);
  const auto b = read_eval_json(b_path, "--compare", nullptr);
  const auto bits = [](const std::string& s) {
    std::vector<std::uint8_t> v;
    for (char c : s) v.push_back(c == '1');
    return v;
  };
  std::printf("%-7s %10s %6s %6s %9s %9s %8s %9s %16s %16s\n", "policy", "full", "ctx", "cap",
              "ppl A", "ppl B", "Δppl", "agree", "ret.win loss", "ret.f-up loss");
  json::array out;
  int matched = 0;
  for (const Row& rb : b) {
    const auto it = std::find_if(a.begin(), a.end(), [&](const Row& ra) {
      return ra.policy == rb.policy && ra.full_layers == rb.full_layers &&
             ra.full_list == rb.full_list && ra.context == rb.context && ra.capacity == rb.capacity;
    });
    if (it == a.end()) continue;
    const Row& ra = *it;
    ++matched;
    std::int64_t same = 0, total = 0;
    for (std::size_t d = 0; d < std::min(ra.argmax.size(), rb.argmax.size()); ++d)
      for (std::size_t i = 0; i < std::min(ra.argmax[d].size(), rb.argmax[d].size()); ++i)
        same += ra.argmax[d][i] == rb.argmax[d][i], ++total;
    const double agree = total > 0 ? static_cast<double>(same) / total : -1;
    const PairedLoss lw = paired_loss(bits(ra.window_bits), bits(rb.window_bits));
    const PairedLoss lf = paired_loss(bits(ra.followup_bits), bits(rb.followup_bits));
    const std::string full = rb.full_list.empty() ? std::to_string(rb.full_layers) : rb.full_list;
    const double dppl = rb.ppl / ra.ppl - 1;
    std::printf("%-7s %10s %6d %6d %9.3f %9.3f %+7.2f%% %8s %+8.1f ± %4.1f %+8.1f ± %4.1f\n",
                rb.policy.c_str(), full.c_str(), rb.context, rb.capacity, ra.ppl, rb.ppl,
                100 * dppl, agree < 0 ? "n/a" : fmt("%.1f%%", 100 * agree).c_str(), 100 * lw.loss,
                100 * lw.half, 100 * lf.loss, 100 * lf.half);
    out.push_back(json::object{{"policy", rb.policy},
                               {"full_layers", rb.full_layers},
                               {"full_layer_list", rb.full_list},
                               {"context", rb.context},
                               {"capacity", rb.capacity},
                               {"ppl_a", ra.ppl},
                               {"ppl_b", rb.ppl},
                               {"ppl_change", dppl},
                               {"agreement", agree},
                               {"agreement_positions", total},
                               {"loss_window", lw.loss},
                               {"loss_window_ci95", lw.half},
                               {"loss_followup", lf.loss},
                               {"loss_followup_ci95", lf.half},
                               {"retrieval_cases", lw.n}});
  }
  if (matched == 0)
    throw ConfigError("--compare", "no row of '" + b_path + "' matches a row of '" + a_path +
                                       "' (policy, full layers, context, capacity)");
  fs::create_directories(out_dir);
  std::ofstream(out_dir + "/compare.json")
      << json::serialize(json::object{{"a", a_path}, {"b", b_path}, {"rows", out}}) << "\n";
  std::printf("compare: %d rows; B = %s against A = %s; %s/compare.json\n", matched, b_path.c_str(),
              a_path.c_str(), out_dir.c_str());
  return 0;
}

void write_outputs(const std::string& out_dir, const std::string& model,
                   const std::vector<Row>& rows, const std::string& command) {
  fs::create_directories(out_dir);
  std::printf("%-7s %5s %6s %6s %7s %8s %8s %9s %9s %9s %9s\n", "policy", "full", "ctx", "cap",
              "sparse×", "overall×", "ppl", "Δppl", "agree", "ret.win", "ret.f-up");
  json::array jrows;
  std::map<std::string, Series> win, fu;
  for (const auto& r : rows) {
    std::printf("%-7s %5d %6d %6d %7.1f %8.2f %8.3f %+8.2f%% %8.1f%% %8.1f%% %8.1f%%\n",
                r.policy.c_str(), r.full_layers, r.context, r.capacity, r.sparse_compression,
                r.overall_compression, r.ppl, 100 * r.ppl_change, 100 * r.agreement,
                100 * r.retrieval_window, 100 * r.retrieval_followup);
    jrows.push_back(to_json(r));
    if (r.policy == "full") continue;
    const std::string full =
        r.full_list.empty() ? std::to_string(r.full_layers) : "layers " + r.full_list;
    const std::string key = r.policy + " / " + full + " / " + std::to_string(r.context);
    const std::string name = r.policy + ", " + full + " full, " + ctx_name(r.context);
    win[key].name = fu[key].name = name;
    win[key].points.emplace_back(r.overall_compression, r.retrieval_window);
    fu[key].points.emplace_back(r.overall_compression, r.retrieval_followup);
  }
  std::ofstream(out_dir + "/eval.json")
      << json::serialize(json::object{{"model", model}, {"command", command}, {"rows", jrows}})
      << "\n";
  auto plot = [&](const std::string& file, const std::string& title,
                  std::map<std::string, Series>& m) {
    std::vector<Series> series;
    for (auto& [k, s] : m) {
      std::sort(s.points.begin(), s.points.end());
      series.push_back(s);
    }
    std::ofstream(out_dir + "/" + file)
        << svg_line_chart(title, "overall KV compression (x)", "exact match", series);
  };
  plot("retrieval_vs_compression.svg", "Retrieval (question in window) vs overall compression",
       win);
  plot("followup_vs_compression.svg", "Retrieval (follow-up question) vs overall compression", fu);
  std::ofstream(out_dir + "/quality_table.md") << markdown_table(rows, command);
  std::printf(
      "results: %s/{eval.json, quality_table.md, retrieval_vs_compression.svg, "
      "followup_vs_compression.svg}\n",
      out_dir.c_str());
}

// ---- the guardrail against eval (tools/bench/guardrail_check.h, docs/quality.md) ----------

json::object cell_json(const QualityCell& c) {
  const Interval ci = c.agreement_interval();
  return json::object{{"samples", c.samples},
                      {"positions", c.positions},
                      {"agree", c.agree},
                      {"agreement", c.agreement()},
                      {"interval", json::array{ci.lo, ci.hi}},
                      {"delta_loglik", c.delta_mean()}};
}

Config guardrail_config(const Args& a) {
  Config cfg;
  if (auto f = a.get("config")) cfg = load_config_file(*f);
  if (auto m = a.get("model")) cfg.model.path = *m;
  for (const auto& kv : a.all("set")) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw ConfigError("--set", "expects key=value, got '" + kv + "'");
    cfg.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (auto b = a.get("backend")) cfg.backend.kind = *b;
  if (cfg.model.path.empty()) throw ConfigError("--model", "required (or the config's model.path)");
  return cfg;
}

// --write-prompts FILE: the first --context tokens of each of --docs evaluation documents.
int write_prompts(const Args& a) {
  const auto dir = a.get_or("model", "");
  if (dir.empty()) throw ConfigError("--model", "required: a model directory");
  auto weights = std::shared_ptr<const ModelWeights>(ModelWeights::load(dir));
  auto tok = Tokenizer::load(weights->tokenizer_json(), weights->tokenizer_config_json());
  EvalFormat format;
  const fs::path filler = fs::path(dir) / "eval_filler.txt";
  if (fs::exists(filler)) {
    std::ifstream in(filler, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    format.filler = tok->encode(ss.str(), false);
  }
  const int context = static_cast<int>(a.get_int("context", 2048));
  const int docs = static_cast<int>(a.get_int("docs", 16));
  const auto seed = static_cast<std::uint64_t>(a.get_int("seed", 1));
  const EvalSet set = make_eval_set(*tok, context, docs, 0, 1, seed, format);
  std::vector<std::vector<std::int32_t>> prompts;
  for (const auto& d : set.documents)
    prompts.emplace_back(d.ids.begin(), d.ids.begin() + d.prefill_len);
  const auto path = a.get_or("write-prompts", "");
  write_prompts_json(path, prompts,
                     "evaluation documents of " + dir + ": context " + std::to_string(context) +
                         ", seed " + std::to_string(seed));
  std::printf("prompts: %zu documents of %d tokens -> %s\n", prompts.size(), context, path.c_str());
  return 0;
}

// The backend `strata eval` runs on: kind "cpu" builds the CPU backend with options `o`, "cuda"
// the CUDA backend of `cfg` (backend.kind set here) with room for one step of `step_tokens`.
std::unique_ptr<Backend> eval_backend(const std::string& kind,
                                      const std::shared_ptr<const ModelWeights>& weights,
                                      const CpuBackendOptions& o, Config cfg, int step_tokens) {
  if (kind == "cpu") return make_cpu_backend(weights, o);
  if (kind == "cuda") {
#ifdef STRATA_WITH_CUDA
    cfg.backend.kind = "cuda";
    cfg.scheduler.max_num_batched_tokens =
        std::max(cfg.scheduler.max_num_batched_tokens, step_tokens);
    auto all = cuda::make_cuda_backends(cfg);
    return std::move(all.at(0));
#else
    (void)cfg;
    (void)step_tokens;
    throw ConfigError("--backend", "this strata was built without CUDA");
#endif
  }
  throw ConfigError("--backend", "got '" + kind + "' (allowed: cpu, cuda)");
}

// --guardrail-agreement: the guardrail's quantity offline, for the profile of --config/--set.
int guardrail_offline(const Args& a) {
  Config cfg = guardrail_config(a);
  const auto prompts = read_prompts_json(a.get_or("prompts", ""));
  const int n = static_cast<int>(a.get_int("max-tokens", 64));
  std::size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int tokens = static_cast<int>(longest) + n;
  auto weights = std::shared_ptr<const ModelWeights>(ModelWeights::load(cfg.model.path));
  const ModelConfig& model = weights->config();
  CpuBackendOptions o = cpu_backend_options(cfg);
  const std::uint64_t slot_bytes = 2ull * model.num_key_value_heads * model.head_dim * 4;
  o.kv_bytes = std::max<std::uint64_t>(
      o.kv_bytes, 3ull * tokens * model.num_hidden_layers * slot_bytes + (64ull << 20));
  // The full-cache replay runs as one prefill step of prompt + N - 1 tokens.
  const auto backend = eval_backend(cfg.backend.kind, weights, o, cfg, tokens);
  const QualityCell c = offline_guardrail_agreement(*backend, prompts, cfg.sparsity, n);
  const Interval ci = c.agreement_interval();
  std::printf(
      "guardrail offline: agreement %.4f [%.4f, %.4f] over %llu positions of %llu "
      "requests, delta loglik %+.4f\n",
      c.agreement(), ci.lo, ci.hi, static_cast<unsigned long long>(c.positions),
      static_cast<unsigned long long>(c.samples), c.delta_mean());
  if (auto out = a.get("out")) {
    json::object o = cell_json(c);
    o["backend"] = cfg.backend.kind;
    o["model"] = cfg.model.path;
    o["max_tokens"] = n;
    std::ofstream(*out) << json::serialize(o) << "\n";
  }
  return 0;
}

// --guardrail-live: the prompts against a running server, beside --offline's result.
int guardrail_live(const Args& a) {
  const auto prompts = read_prompts_json(a.get_or("prompts", ""));
  const int n = static_cast<int>(a.get_int("max-tokens", 64));
  const LiveGuardrail g = live_guardrail_agreement(
      a.get_or("host", "127.0.0.1"), static_cast<int>(a.get_int("port", 8000)), prompts, n,
      a.get_double("timeout", 1800), a.get_or("admin-token", ""));
  const auto agree = static_cast<std::uint64_t>(std::llround(g.agreement * g.positions));
  json::object live{
      {"profile_version", g.version},  {"samples", g.samples},
      {"positions", g.positions},      {"agree", agree},
      {"agreement", g.agreement},      {"interval", json::array{g.interval.lo, g.interval.hi}},
      {"delta_loglik", g.delta_loglik}};
  const std::string label = a.get_or("label", "");
  json::object row{{"label", label}, {"max_tokens", n}, {"live", live}};
  std::string line;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-8s %.4f [%.4f, %.4f] (%llu req, %llu pos)", label.c_str(),
                g.agreement, g.interval.lo, g.interval.hi,
                static_cast<unsigned long long>(g.samples),
                static_cast<unsigned long long>(g.positions));
  line = buf;
  int rc = 0;
  if (auto off = a.get("offline")) {
    std::ifstream in(*off);
    if (!in) throw ConfigError("--offline", "cannot read '" + *off + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    const json::object o = json::parse(ss.str()).as_object();
    const double oa = json::value_to<double>(o.at("agreement"));
    const auto& oci = o.at("interval").as_array();
    const double lo = json::value_to<double>(oci[0]), hi = json::value_to<double>(oci[1]);
    const auto opos = json::value_to<std::uint64_t>(o.at("positions"));
    const auto osam = json::value_to<std::uint64_t>(o.at("samples"));
    const auto oag = json::value_to<std::uint64_t>(o.at("agree"));
    const bool overlap = lo <= g.interval.hi && g.interval.lo <= hi;
    const bool equal = opos == g.positions && osam == g.samples && oag == agree;
    std::snprintf(buf, sizeof buf, "   %.4f [%.4f, %.4f] (%llu req, %llu pos)   %s   %s", oa, lo,
                  hi, static_cast<unsigned long long>(osam), static_cast<unsigned long long>(opos),
                  overlap ? "yes" : "NO ", equal ? "equal" : "differ");
    line += buf;
    row["offline"] = o;
    row["overlap"] = overlap;
    row["equal"] = equal;
    if (!overlap) rc = 1;
  }
  std::printf("%s\n", line.c_str());
  if (auto out = a.get("out")) std::ofstream(*out) << json::serialize(row) << "\n";
  return rc;
}

int run(int argc, char** argv) {
  Args a(argc, argv, {"help", "guardrail-agreement", "guardrail-live"});
  if (a.flag("help")) {
    std::printf(
        "strata eval --model DIR [--backend cpu|cuda] [--contexts 512,1024] [--ratios 2,4,10,20]\n"
        "  [--policies window,snapkv,scored|none] [--full-layers 0,1,2] [--window 32] [--sinks 4]\n"
        "  [--pool max|avg] [--kernel 7] [--docs 4] [--retrieval 8] [--scored-tokens 128] [--seed "
        "1]\n"
        "  [--threads N] [--share-prefill on|off] [--max-batch N] [--out-dir DIR]\n"
        "  [--quantization none|fp8] [--kv-dtype bf16|fp8]\n"
        "  [--filler FILE|none] [--facts 4] [--full-layer-lists '6;6+11']\n"
        "  (--filler: text whose tokens fill the contexts; default MODEL/eval_filler.txt when\n"
        "   it exists — the evaluation model's held-out documents —, else word sentences;\n"
        "   --facts: facts about distinct held-out names per retrieval context, one asked)\n"
        "strata eval --from-json a.json[,b.json...] [--out-dir DIR]\n"
        "  (re-make the table, plots and quality_table.md from earlier eval.json files)\n"
        "strata eval --write-prompts FILE --model DIR [--context 2048] [--docs 16] [--seed 1]\n"
        "  (the evaluation documents' first --context tokens, as token ids, for the two below)\n"
        "strata eval --guardrail-agreement --prompts FILE [--config CFG] [--model DIR]\n"
        "  [--set key=value]... [--backend cpu|cuda] [--max-tokens 64] [--out FILE.json]\n"
        "  (the live guardrail's quantity offline: each prompt served greedily for N tokens\n"
        "   with the config's sparsity, then scored under the full cache as a replay is)\n"
        "strata eval --guardrail-live --prompts FILE [--host H] [--port P] [--max-tokens 64]\n"
        "  [--offline FILE.json] [--label L] [--out FILE.json] [--timeout 1800]\n"
        "  [--admin-token T]\n"
        "  (the prompts against a server with quality_monitor.sample_rate = 1, its\n"
        "   /admin/api/quality beside --offline's result; exit 1 when the intervals miss)\n"
        "strata eval --compare A.json,B.json [--out-dir DIR]\n"
        "  (B against A on the same inputs, row by row: Δppl, greedy agreement, retrieval\n"
        "   paired differences; e.g. --quantization fp8 against none)\n");
    return 0;
  }
  a.expect_only({"help",
                 "model",
                 "backend",
                 "contexts",
                 "ratios",
                 "policies",
                 "full-layers",
                 "window",
                 "sinks",
                 "pool",
                 "docs",
                 "retrieval",
                 "scored-tokens",
                 "seed",
                 "threads",
                 "out-dir",
                 "share-prefill",
                 "max-batch",
                 "from-json",
                 "filler",
                 "facts",
                 "kernel",
                 "full-layer-lists",
                 "quantization",
                 "kv-dtype",
                 "compare",
                 "write-prompts",
                 "guardrail-agreement",
                 "guardrail-live",
                 "prompts",
                 "config",
                 "set",
                 "max-tokens",
                 "out",
                 "offline",
                 "label",
                 "host",
                 "port",
                 "context",
                 "timeout",
                 "admin-token"});
  if (a.get("write-prompts")) return write_prompts(a);
  if (a.flag("guardrail-agreement")) return guardrail_offline(a);
  if (a.flag("guardrail-live")) return guardrail_live(a);
  std::string command = "strata eval";
  for (int i = 0; i < argc; ++i) command += std::string(" ") + argv[i];
  const auto out_dir = a.get_or("out-dir", "eval-results");

  if (a.get("compare")) {
    const auto paths = split(a.get_or("compare", ""));
    if (paths.size() != 2) throw ConfigError("--compare", "needs A.json,B.json");
    return compare(paths[0], paths[1], out_dir);
  }
  if (a.get("from-json")) {
    std::vector<Row> rows;
    std::string model;
    for (const auto& path : split(a.get_or("from-json", ""))) {
      const auto r = read_eval_json(path, "--from-json", &model);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    write_outputs(out_dir, model, rows, "");
    return 0;
  }

  const auto dir = a.get_or("model", "");
  if (dir.empty()) throw ConfigError("--model", "required: a model directory");
  auto weights = std::shared_ptr<const ModelWeights>(ModelWeights::load(dir));
  const ModelConfig model = weights->config();
  auto tok = Tokenizer::load(weights->tokenizer_json(), weights->tokenizer_config_json());
  const auto contexts = numbers(a.get_or("contexts", "512"), "--contexts");
  const auto ratios = numbers(a.get_or("ratios", "2,4,10,20"), "--ratios");
  // `none`: the full cache only (e.g. fp8 KV against bf16 KV on a backend without sparse
  // layers for e4m3 pages).
  auto policies = split(a.get_or("policies", "window,snapkv,scored"));
  if (policies.size() == 1 && policies[0] == "none") policies.clear();
  for (const auto& pol : policies)
    if (pol != "window" && pol != "snapkv" && pol != "scored")
      throw ConfigError("--policies",
                        "got '" + pol + "' (allowed: window, snapkv, scored; or none alone)");
  // Full-layer variants: leading counts (--full-layers), or explicit lists
  // (--full-layer-lists "6;6+11": layers 6, then layers 6 and 11), which replace the counts.
  struct FullVariant {
    int count = 0;
    std::vector<int> list;
    std::string label;
  };
  std::vector<FullVariant> full_variants;
  if (const auto lists = a.get_or("full-layer-lists", ""); !lists.empty()) {
    std::stringstream ss(lists);
    for (std::string item; std::getline(ss, item, ';');) {
      FullVariant v;
      v.label = item;
      std::stringstream is(item);
      for (std::string x; std::getline(is, x, '+');) {
        try {
          v.list.push_back(std::stoi(x));
        } catch (const std::exception&) {
          throw ConfigError("--full-layer-lists", "expected e.g. '6;6+11', got '" + lists + "'");
        }
      }
      if (v.list.empty()) throw ConfigError("--full-layer-lists", "empty list in '" + lists + "'");
      full_variants.push_back(v);
    }
  } else {
    for (double fl : numbers(a.get_or("full-layers", "0,1,2"), "--full-layers"))
      full_variants.push_back({static_cast<int>(fl), {}, ""});
  }
  const int window = static_cast<int>(a.get_int("window", 32)),
            sinks = static_cast<int>(a.get_int("sinks", 4));
  const int docs = static_cast<int>(a.get_int("docs", 4)),
            retr = static_cast<int>(a.get_int("retrieval", 8));
  const int scored = static_cast<int>(a.get_int("scored-tokens", 128));
  EvalFormat format;
  format.facts = static_cast<int>(a.get_int("facts", 4));
  if (format.facts < 1) throw ConfigError("--facts", "at least 1");
  std::string filler_path = a.get_or("filler", "");
  if (filler_path.empty() && fs::exists(fs::path(dir) / "eval_filler.txt"))
    filler_path = (fs::path(dir) / "eval_filler.txt").string();
  if (!filler_path.empty() && filler_path != "none") {
    std::ifstream in(filler_path, std::ios::binary);
    if (!in) throw ConfigError("--filler", "cannot read '" + filler_path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    format.filler = tok->encode(ss.str(), false);
    if (format.filler.size() < 1024)
      throw ConfigError("--filler", "'" + filler_path + "' holds under 1024 tokens");
    std::fprintf(stderr, "eval: filler %s (%zu tokens)\n", filler_path.c_str(),
                 format.filler.size());
  }
  const auto share = a.get_or("share-prefill", "on");
  if (share != "on" && share != "off")
    throw ConfigError("--share-prefill", "got '" + share + "' (allowed: on, off)");
  EvalRunOptions ro;
  ro.share_prefill = share == "on";
  ro.max_batch = static_cast<int>(a.get_int("max-batch", 0));
  const int kernel = static_cast<int>(a.get_int("kernel", 7));
  if (kernel < 1 || kernel % 2 == 0) throw ConfigError("--kernel", "an odd number >= 1");
  const auto pool = a.get_or("pool", "max");
  if (pool != "max" && pool != "avg")
    throw ConfigError("--pool", "got '" + pool + "' (allowed: max, avg)");

  // The backend: the full cache of the longest sequence plus every run's private pages of a
  // shared-prefill batch (bounded by --max-batch; the pool only reserves address space).
  const int longest =
      static_cast<int>(*std::max_element(contexts.begin(), contexts.end())) + scored + 64;
  const auto kind = a.get_or("backend", "cpu");
  const auto quant = a.get_or("quantization", "none");
  if (quant != "none" && quant != "fp8")
    throw ConfigError("--quantization", "got '" + quant + "' (allowed: none, fp8)");
  const Quantization q = quant == "fp8" ? Quantization::kFp8 : Quantization::kNone;
  const auto kvd = a.get_or("kv-dtype", "bf16");
  if (kvd != "bf16" && kvd != "fp8")
    throw ConfigError("--kv-dtype", "got '" + kvd + "' (allowed: bf16, fp8)");
  const KvDtype kv_dtype = kvd == "fp8" ? KvDtype::kFp8 : KvDtype::kBf16;
  CpuBackendOptions o;
  o.threads = static_cast<int>(a.get_int("threads", 0));
  o.quantization = q;
  o.kv_dtype = kv_dtype;  // fp8: e4m3 K/V with fixed scales (docs/kv-fp8.md)
  const std::uint64_t slot_bytes = 2ull * model.num_key_value_heads * model.head_dim * 4;
  o.kv_bytes = static_cast<std::uint64_t>(2.5 * longest * model.num_hidden_layers) * slot_bytes +
               (256ull << 20);
  Config cfg;
  cfg.model.path = dir;
  cfg.backend.cuda_graphs = false;
  cfg.model.quantization = q;  // fp8: W8A8, quantized at load (docs/cuda-backend.md "FP8")
  cfg.cache.kv_dtype = kv_dtype;
  // The profiles travel in the step plans; no request sets its own.
  cfg.sparsity_request_override = RequestOverride::kOff;
  // The shared prefill runs the longest context's prefix as one step.
  const auto backend = eval_backend(kind, weights, o, cfg, longest);
  if (!policies.empty() && !backend->info().sparse_refusal.empty())  // before any case runs
    throw ConfigError("--policies",
                      "this backend cannot run sparse layers: " + backend->info().sparse_refusal +
                          " (--policies none evaluates the full cache only)");

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<Row> rows;
  for (double ctxd : contexts) {
    const int ctx = static_cast<int>(ctxd);
    const auto set = make_eval_set(*tok, ctx, docs, retr, scored,
                                   static_cast<std::uint64_t>(a.get_int("seed", 1)), format);
    // Profiles: the full cache twice (the reference against itself: the harness's own
    // arithmetic must give zero change), then every sparse configuration.
    std::vector<SparsityProfile> profiles(2);  // enabled = false
    std::vector<Row> meta;
    for (const auto& pol : policies) {
      for (const auto& fv : full_variants) {
        for (double r : ratios) {
          SparsityProfile p;
          p.enabled = true;
          p.full_layers = fv.count;
          p.full_layer_list = fv.list;
          p.window = window;
          p.sinks = sinks;
          p.pool = pool == "avg" ? PoolKind::kAvg : PoolKind::kMax;
          p.pool_kernel = kernel;
          p.capacity = std::max(static_cast<int>(std::lround(ctx / r)), sinks + window + 1);
          p.policy = pol == "window"   ? Policy::kWindow
                     : pol == "snapkv" ? Policy::kSnapKv
                                       : Policy::kScored;
          profiles.push_back(p);
          Row m;
          m.policy = pol;
          m.full_layers = fv.list.empty() ? fv.count : static_cast<int>(fv.list.size());
          m.full_list = fv.label;
          m.ratio = r;
          m.capacity = p.capacity;
          meta.push_back(m);
        }
      }
    }
    const auto tc = Clock::now();
    ro.progress = [&](int done, int total) {
      const double s = std::chrono::duration<double>(Clock::now() - tc).count();
      std::fprintf(stderr, "eval: context %d: %d/%d cases, %.0f s (%.0f s left for this context)\n",
                   ctx, done, total, s, s / done * (total - done));
    };
    std::fprintf(stderr,
                 "eval: context %d: %zu profiles (full cache twice + %zu sparse), %s prefill\n",
                 ctx, profiles.size(), meta.size(), ro.share_prefill ? "shared" : "per-profile");
    const auto scores = evaluate_profiles(*backend, set, profiles, 0, ro);
    const auto& ref = scores[0];
    const auto& again = scores[1];
    if (std::abs(again.nll - ref.nll) > 1e-9 || again.agreement != 1.0 ||
        again.retrieval_window != ref.retrieval_window ||
        again.retrieval_followup != ref.retrieval_followup ||
        std::abs(again.compression - 1.0) > 1e-12 || std::abs(ref.compression - 1.0) > 1e-12)
      throw InternalError("eval: full cache vs itself is not a zero change");
    auto fill = [&](Row r, const EvalScores& s) {
      r.context = ctx;
      r.sparse_compression = s.sparse_compression;
      r.overall_compression = s.compression;
      r.ppl = s.ppl;
      r.ppl_change = s.ppl / ref.ppl - 1;
      r.agreement = s.agreement;
      r.retrieval_window = s.retrieval_window;
      r.retrieval_followup = s.retrieval_followup;
      r.loss_window = paired_loss(ref.window_ok, s.window_ok);
      r.loss_followup = paired_loss(ref.followup_ok, s.followup_ok);
      for (auto b : s.window_ok) r.window_bits.push_back(b ? '1' : '0');
      for (auto b : s.followup_ok) r.followup_bits.push_back(b ? '1' : '0');
      r.retrieval_n = retr;
      r.docs = docs;
      r.scored_tokens = scored;
      r.argmax = s.argmax;
      return r;
    };
    Row full;
    full.policy = "full";
    full.full_layers = model.num_hidden_layers;
    rows.push_back(fill(full, ref));
    for (std::size_t i = 0; i < meta.size(); ++i) rows.push_back(fill(meta[i], scores[i + 2]));
  }
  std::fprintf(stderr, "eval: %.0f s in all\n",
               std::chrono::duration<double>(Clock::now() - t0).count());
  write_outputs(out_dir, dir, rows, command);
  return 0;
}

}  // namespace
STRATA_COMMAND("eval", "quality under sparsity: perplexity, retrieval, agreement vs compression",
               run);
}  // namespace strata::cli

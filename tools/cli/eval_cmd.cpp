// strata eval: quality under sparsity (tools/bench/quality.h, docs/quality.md).
#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/config.h"
#include "runtime/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model_loader.h"
#include "runtime/tokenizer.h"
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

struct Row {
  std::string policy;
  int full_layers = 0;
  double ratio = 1;  // requested sparse-layer compression (context / capacity)
  int context = 0;
  EvalScores scores;
  double ppl_change = 0, window_loss = 0, followup_loss = 0;
};

int run(int argc, char** argv) {
  Args a(argc, argv, {"help"});
  if (a.flag("help")) {
    std::printf(
        "strata eval --model DIR [--backend cpu|cuda] [--contexts 512,1024] [--ratios 2,4,10,20]\n"
        "  [--policies window,snapkv,scored] [--full-layers 0,1,2] [--window 32] [--sinks 4]\n"
        "  [--pool max|avg] [--docs 4] [--retrieval 8] [--scored-tokens 128] [--seed 1]\n"
        "  [--threads N] [--out-dir DIR]\n");
    return 0;
  }
  a.expect_only({"help", "model", "backend", "contexts", "ratios", "policies", "full-layers",
                 "window", "sinks", "pool", "docs", "retrieval", "scored-tokens", "seed", "threads",
                 "out-dir"});
  const auto dir = a.get_or("model", "");
  if (dir.empty()) throw ConfigError("--model", "required: a model directory");
  auto weights = std::shared_ptr<const ModelWeights>(ModelWeights::load(dir));
  const ModelConfig model = weights->config();
  auto tok = Tokenizer::load(weights->tokenizer_json(), weights->tokenizer_config_json());
  const auto contexts = numbers(a.get_or("contexts", "512"), "--contexts");
  const auto ratios = numbers(a.get_or("ratios", "2,4,10,20"), "--ratios");
  const auto policies = split(a.get_or("policies", "window,snapkv,scored"));
  const auto fulls = numbers(a.get_or("full-layers", "0,1,2"), "--full-layers");
  const int window = static_cast<int>(a.get_int("window", 32)),
            sinks = static_cast<int>(a.get_int("sinks", 4));
  const int docs = static_cast<int>(a.get_int("docs", 4)),
            retr = static_cast<int>(a.get_int("retrieval", 8));
  const int scored = static_cast<int>(a.get_int("scored-tokens", 128));
  const auto out_dir = a.get_or("out-dir", "eval-results");
  fs::create_directories(out_dir);

  // The backend: sized for the longest sequence under the full cache.
  const int longest =
      static_cast<int>(*std::max_element(contexts.begin(), contexts.end())) + scored + 64;
  std::unique_ptr<Backend> backend;
  const auto kind = a.get_or("backend", "cpu");
  if (kind == "cpu") {
    CpuBackendOptions o;
    o.threads = static_cast<int>(a.get_int("threads", 0));
    o.kv_bytes = static_cast<std::uint64_t>(2.5 * longest * model.num_hidden_layers) *
                     (2ull * model.num_key_value_heads * model.head_dim * 4) +
                 (64ull << 20);
    backend = make_cpu_backend(weights, o);
  } else if (kind == "cuda") {
#ifdef STRATA_WITH_CUDA
    Config cfg;
    cfg.model.path = dir;
    cfg.backend.kind = "cuda";
    cfg.backend.cuda_graphs = false;
    auto all = cuda::make_cuda_backends(cfg);
    backend = std::move(all.at(0));
#else
    throw ConfigError("--backend", "this strata was built without CUDA");
#endif
  } else {
    throw ConfigError("--backend", "got '" + kind + "' (allowed: cpu, cuda)");
  }

  std::vector<Row> rows;
  json::array jrows;
  std::map<std::string, Series> plot;
  for (double ctxd : contexts) {
    const int ctx = static_cast<int>(ctxd);
    const auto set = make_eval_set(*tok, ctx, docs, retr, scored,
                                   static_cast<std::uint64_t>(a.get_int("seed", 1)));
    SparsityProfile full;  // enabled = false
    std::fprintf(stderr, "eval: context %d, full cache...\n", ctx);
    Row base{"full", model.num_hidden_layers, 1, ctx, evaluate(*backend, set, full, nullptr)};
    const auto ref = base.scores;
    // The reference against itself: the harness's own arithmetic must give zero change.
    const auto again = evaluate(*backend, set, full, &ref);
    if (std::abs(again.nll - ref.nll) > 1e-9 || again.agreement != 1.0 ||
        again.retrieval_window != ref.retrieval_window || std::abs(again.compression - 1.0) > 1e-12)
      throw InternalError("eval: full cache vs itself is not a zero change");
    rows.push_back(base);
    for (const auto& pol : policies) {
      for (double fl : fulls) {
        for (double r : ratios) {
          SparsityProfile p;
          p.enabled = true;
          p.full_layers = static_cast<int>(fl);
          p.window = window;
          p.sinks = sinks;
          p.pool = a.get_or("pool", "max") == "avg" ? PoolKind::kAvg : PoolKind::kMax;
          p.capacity = std::max(static_cast<int>(std::lround(ctx / r)), sinks + window + 1);
          p.policy = pol == "window"   ? Policy::kWindow
                     : pol == "snapkv" ? Policy::kSnapKv
                                       : Policy::kScored;
          if (pol != "window" && pol != "snapkv" && pol != "scored")
            throw ConfigError("--policies", "got '" + pol + "' (allowed: window, snapkv, scored)");
          std::fprintf(stderr, "eval: context %d, %s, %d full layers, %.0fx...\n", ctx, pol.c_str(),
                       p.full_layers, r);
          Row row{pol, p.full_layers, r, ctx, evaluate(*backend, set, p, &ref)};
          row.ppl_change = row.scores.ppl / ref.ppl - 1;
          row.window_loss = ref.retrieval_window - row.scores.retrieval_window;
          row.followup_loss = ref.retrieval_followup - row.scores.retrieval_followup;
          auto& s =
              plot[pol + " / " + std::to_string(p.full_layers) + " full / " + std::to_string(ctx)];
          s.name = pol + ", " + std::to_string(p.full_layers) + " full, ctx " + std::to_string(ctx);
          s.points.emplace_back(row.scores.compression, row.scores.retrieval_window);
          rows.push_back(row);
        }
      }
    }
  }
  std::printf("%-7s %5s %6s %7s %8s %8s %9s %9s %9s %9s %9s\n", "policy", "full", "ctx", "sparse×",
              "overall×", "ppl", "Δppl", "agree", "ret.win", "ret.f-up", "Δret.win");
  for (const auto& r : rows) {
    std::printf("%-7s %5d %6d %7.1f %8.2f %8.3f %+8.2f%% %8.1f%% %8.1f%% %8.1f%% %+8.1f%%\n",
                r.policy.c_str(), r.full_layers, r.context, r.scores.sparse_compression,
                r.scores.compression, r.scores.ppl, 100 * r.ppl_change, 100 * r.scores.agreement,
                100 * r.scores.retrieval_window, 100 * r.scores.retrieval_followup,
                -100 * r.window_loss);
    jrows.push_back(json::object{{"policy", r.policy},
                                 {"full_layers", r.full_layers},
                                 {"context", r.context},
                                 {"requested_sparse_compression", r.ratio},
                                 {"sparse_compression", r.scores.sparse_compression},
                                 {"overall_compression", r.scores.compression},
                                 {"ppl", r.scores.ppl},
                                 {"ppl_change", r.ppl_change},
                                 {"agreement", r.scores.agreement},
                                 {"retrieval_window", r.scores.retrieval_window},
                                 {"retrieval_followup", r.scores.retrieval_followup}});
  }
  std::ofstream(out_dir + "/eval.json")
      << json::serialize(json::object{{"model", dir}, {"rows", jrows}}) << "\n";
  std::vector<Series> series;
  for (auto& [k, s] : plot) series.push_back(s);
  std::ofstream(out_dir + "/retrieval_vs_compression.svg")
      << svg_line_chart("Retrieval (question in window) vs overall compression",
                        "overall KV compression (x)", "exact match", series);
  std::printf("results: %s/eval.json, %s/retrieval_vs_compression.svg\n", out_dir.c_str(),
              out_dir.c_str());
  return 0;
}

}  // namespace
STRATA_COMMAND("eval", "quality under sparsity: perplexity, retrieval, agreement vs compression",
               run);
}  // namespace strata::cli

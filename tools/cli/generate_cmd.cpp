// strata generate: one request through the Engine (intake -> batcher -> ranks), text streamed
// to stdout as it is produced; usage, timings and the measured KV compression on stderr.
// Teacher forcing (--force-ids ... --dump-logits FILE.npy) runs the ids through the backend
// (CPU; CUDA with --set backend.kind=cuda) with runtime/teacher_forcing.h instead and writes
// fp32 logits [n][vocab].
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "actors/engine.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/teacher_forcing.h"
#include "runtime/tp/tp_group.h"
#include "tools/cli/command.h"
#include "tools/cli/tp_flags.h"

#if defined(STRATA_WITH_CUDA) && __has_include("cuda/cuda_backend.h") && \
                                               __has_include(<cuda_runtime_api.h>)
#include "cuda/cuda_backend.h"
#define STRATA_GENERATE_CUDA 1
#endif

namespace strata::cli {
namespace {

// backend.kind cuda: tp_size 1 on one GPU, tp_size N on N GPUs of this process (NCCL).
BackendFactory cuda_factory() {
#ifdef STRATA_GENERATE_CUDA
  return [](const Config& c) { return cuda::make_cuda_backends(c); };
#else
  throw ConfigError("backend.kind", "cuda requested but this binary was built without CUDA");
#endif
}

std::vector<std::int32_t> parse_ids(const std::string& flag, const std::string& text) {
  std::vector<std::int32_t> ids;
  std::string tok;
  std::stringstream ss(text);
  while (std::getline(ss, tok, ',')) {
    if (tok.empty()) continue;
    try {
      std::size_t used = 0;
      const long v = std::stol(tok, &used);
      if (used != tok.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(tok);
      ids.push_back(static_cast<std::int32_t>(v));
    } catch (const std::exception&) {
      throw ConfigError(flag, "'" + tok + "' is not a token id (expected e.g. 1,2,3)");
    }
  }
  if (ids.empty()) throw ConfigError(flag, "no token ids given");
  return ids;
}

void write_npy(const std::string& path, const std::vector<float>& data, std::size_t rows,
               std::size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw ConfigError("--dump-logits", "cannot write '" + path + "'");
  f.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(le, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()),
          static_cast<std::streamsize>(data.size() * sizeof(float)));
}

int teacher_force(const Config& cfg, const std::string& ids_text, const std::string& out,
                  int prefill_len, const BackendFactory& tp_ranks) {
  const auto ids = parse_ids("--force-ids", ids_text);
  // --tp-size N: N ranks over the sharded weights, run together (logits gathered on rank 0);
  // with --tp-rank 0 the other ranks are processes of their own, reached through proxies.
  // A factory (CUDA, or separate processes) builds the ranks; else the CPU ranks run here.
  std::unique_ptr<Backend> backend;
  if (tp_ranks) {
    backend = make_tp_group(tp_ranks(cfg));
  } else {
    const CpuBackendOptions o = cpu_backend_options(cfg);
    backend = make_tp_group(
        make_cpu_tp_backends(ModelWeights::load(cfg.model.path), o, cfg.backend.tp_size));
  }
  const int vocab = backend->model().vocab_size;
  const auto t0 = std::chrono::steady_clock::now();
  const auto logits = teacher_forced_logits(*backend, ids, cfg.sparsity, prefill_len);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_npy(out, logits, ids.size(), static_cast<std::size_t>(vocab));
  std::fprintf(stderr,
               "teacher forcing: %zu tokens, logits [%zu][%d] -> %s (%.3f s, sparsity %s, tp %d)\n",
               ids.size(), ids.size(), vocab, out.c_str(), s, cfg.sparsity.enabled ? "on" : "off",
               cfg.backend.tp_size);
  return 0;
}

int run(int argc, char** argv) {
  const std::vector<std::string> flags = {"help", "chat", "ignore-eos"};
  Args a(argc, argv, flags);
  if (a.flag("help")) {
    std::printf(
        "strata generate --model DIR [--config FILE] [--sparsity FILE]\n"
        "  (--prompt TEXT | --ids 1,2,3) [--chat] [--max-tokens N] [--temperature T]\n"
        "  [--top-p P] [--top-k K] [--seed S] [--ignore-eos] [--stop S]... [--n N]\n"
        "  [--set section.key=value]...\n"
        "strata generate --model DIR --force-ids 1,2,3 --dump-logits FILE.npy [--sparsity FILE]\n"
        "  [--force-prefill P]\n"
        "Streams the generated text to stdout; usage, timings and the KV compression ratio\n"
        "go to stderr. --chat formats --prompt as one user message with the chat template.\n"
        "%s"
        "Teacher forcing writes fp32 logits [n][vocab] (.npy): a prefill of the first P ids\n"
        "(default all: sparsity then changes nothing), then one decode step per id.\n"
        "The CPU backend runs unless --set backend.kind=cuda (one GPU; with --tp-size N, N GPUs\n"
        "joined by NCCL).\n"
        "--tp-size N runs N tensor-parallel ranks in this process (docs/tensor-parallel.md).\n"
        "--tp-rank R --tp-master HOST:PORT runs rank R of N in this process, the others in their\n"
        "own (CPU, or CUDA: GPU backend.devices[R] or R modulo the visible GPUs): rank 0\n"
        "generates (or teacher-forces) and drives the group; a rank R > 0 only follows rank 0's\n"
        "steps (its prompt flags are unused) and exits when rank 0 stops. Rank 0 listens on\n"
        "PORT (rendezvous) and PORT+1 (rank links).\n",
        kTpFlagsHelp);
    return 0;
  }
  a.expect_only({"help",     "chat",      "ignore-eos",  "model",         "config",
                 "sparsity", "prompt",    "ids",         "max-tokens",    "temperature",
                 "top-p",    "top-k",     "seed",        "stop",          "set",
                 "n",        "force-ids", "dump-logits", "force-prefill", "tp-size",
                 "tp-rank",  "tp-master", "tp-timeout"});
  Config cfg;
  if (auto f = a.get("config")) cfg = load_config_file(*f);
  if (auto m = a.get("model")) cfg.model.path = *m;
  if (auto s = a.get("sparsity")) cfg.sparsity = load_sparsity_file(*s);
  for (const auto& kv : a.all("set")) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      throw ConfigError("--set", "expected section.key=value, got '" + kv + "'");
    cfg.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (cfg.model.path.empty()) throw ConfigError("--model", "required: the model directory");
  const TpFlags tp = read_tp_flags(a, cfg);
  // The CPU backend unless backend.kind is cuda (then CUDA ranks: one GPU each).
  const bool cuda = tp_use_cuda(cfg, /*auto_gpu=*/false);
  // Separate processes: a rank > 0 follows rank 0's plans (its prompt flags are unused);
  // rank 0 runs the request with its own rank plus one proxy per remote rank.
  if (tp.rank && *tp.rank > 0) return tp_follower_main(tp, cfg, cuda);
  BackendFactory factory;
  if (tp.rank)
    factory = tp_rank0_factory(tp, cuda);
  else if (cuda)
    factory = cuda_factory();

  const auto force = a.get("force-ids");
  const auto dump = a.get("dump-logits");
  if (force || dump) {
    if (!force || !dump) {
      throw ConfigError(force ? "--dump-logits" : "--force-ids",
                        "teacher forcing needs both --force-ids and --dump-logits");
    }
    const auto prefill = a.get_int("force-prefill", 0);
    if (prefill < 0) throw ConfigError("--force-prefill", "must be >= 0 (0: every id)");
    return teacher_force(cfg, *force, *dump, static_cast<int>(prefill), factory);
  }

  Request r;
  const auto prompt = a.get("prompt");
  const auto ids = a.get("ids");
  if (prompt.has_value() == ids.has_value()) {
    throw ConfigError("--prompt", "give exactly one of --prompt TEXT or --ids 1,2,3");
  }
  if (ids) {
    if (a.flag("chat")) throw ConfigError("--chat", "--chat formats --prompt text, not --ids");
    r.prompt_ids = parse_ids("--ids", *ids);
  } else if (a.flag("chat")) {
    r.messages = std::vector<ChatMessage>{{"user", *prompt}};
  } else {
    r.prompt_text = *prompt;
  }
  auto& p = r.params;
  p.max_tokens = static_cast<int>(a.get_int("max-tokens", 64));
  p.temperature = static_cast<float>(a.get_double("temperature", 1.0));
  p.top_p = static_cast<float>(a.get_double("top-p", 1.0));
  p.top_k = static_cast<int>(a.get_int("top-k", 0));
  p.ignore_eos = a.flag("ignore-eos");
  p.stop = a.all("stop");
  if (auto s = a.get("seed")) {
    p.seed = static_cast<std::uint64_t>(a.get_int("seed", 0));
  } else {
    r.random_seed = true;
  }
  r.n = static_cast<int>(a.get_int("n", 1));

  auto engine = Engine::create(cfg, factory);
  auto stream = engine->submit(std::move(r));
  std::optional<Usage> usage;
  std::string error;
  int last_index = 0;
  while (auto ev = stream->next_blocking()) {
    if (ev->index != last_index) {
      std::printf("\n--- choice %d ---\n", ev->index);
      last_index = ev->index;
    }
    std::fwrite(ev->text.data(), 1, ev->text.size(), stdout);
    std::fflush(stdout);
    if (ev->finish != FinishReason::kNone) {
      std::fprintf(stderr, "\n[choice %d finished: %s]\n", ev->index, to_string(ev->finish));
    }
    if (ev->usage) usage = ev->usage;
    if (!ev->error.empty()) error = ev->error;
  }
  std::printf("\n");
  const auto st = engine->stats();
  engine->shutdown(std::chrono::milliseconds(1000));
  if (!error.empty()) std::fprintf(stderr, "error: %s\n", error.c_str());
  if (usage) {
    std::fprintf(
        stderr,
        "usage: prompt %d tokens, completion %d tokens\n"
        "timings: queue %.2f ms, ttft %.2f ms, mean itl %.2f ms, e2e %.2f ms (%.1f tok/s)\n"
        "kv compression: %.2fx (this request), profile v%llu %s; steps %llu, host "
        "overhead %.1f%%\n",
        usage->prompt_tokens, usage->completion_tokens, usage->queue_ms, usage->ttft_ms,
        usage->mean_itl_ms, usage->e2e_ms,
        usage->e2e_ms > 0 ? usage->completion_tokens * 1000.0 / usage->e2e_ms : 0.0,
        usage->compression_ratio, static_cast<unsigned long long>(st.profile_version),
        st.profile.enabled ? "(sparse)" : "(full)", static_cast<unsigned long long>(st.steps),
        st.host_overhead * 100.0);
  }
  return error.empty() ? 0 : 1;
}

}  // namespace
STRATA_COMMAND("generate", "generate text for one prompt through the engine (streams to stdout)",
               run);
}  // namespace strata::cli

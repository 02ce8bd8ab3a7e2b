// Shared helpers of the actor tests: a tiny model on disk, engine configs, a backend
// decorator that can hold a step and records every plan, and stream draining.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "tests/runtime/cpu_test_util.h"

namespace strata::test {

// A small random Llama (3 layers) written once per test binary (tests/runtime/cpu_test_util.h).
inline const std::string& tiny_model_dir() {
  return tiny3_model_dir();
}

inline Config tiny_config() {
  Config c;
  c.model.path = tiny_model_dir();
  c.backend.threads = 1;
  c.cache.cpu_kv_bytes = 64ull << 20;
  c.scheduler.request_timeout_s = 0;
  return c;
}

// A CPU backend that records every plan and can hold one chosen step until released.
struct StepProbe {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<StepPlan> plans;  // copies (pointers in SeqSteps are not followed)
  std::uint64_t hold_step = 0;  // 0: none
  // Or hold the first step whose plan decodes at least this many sequences and nothing else
  // (0: off); held_index is that plan's index in `plans`.
  std::size_t hold_decoding = 0;
  std::size_t held_index = 0;
  // Step 1 waits until open_gate() (false: no gate): requests submitted before it all reach the
  // batcher before anything decodes, whatever the submitting thread's speed.
  bool gate = false;
  bool entered = false, released = false;

  void open_gate() {
    std::lock_guard<std::mutex> l(mu);
    gate = false;
    cv.notify_all();
  }

  void wait_entered() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return entered; });
  }
  void release() {
    std::lock_guard<std::mutex> l(mu);
    released = true;
    cv.notify_all();
  }
};

// A backend decorator: forwards everything to the wrapped backend; decorators override step().
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const BackendInfo& info() const override { return inner_->info(); }
  const ModelConfig& model() const override { return inner_->model(); }
  StepResult step(const StepPlan& plan) override { return inner_->step(plan); }

 private:
  std::unique_ptr<Backend> inner_;
};

// The engine's CPU backend for a config (cpu_backend_options, as the engine builds it) wrapped by
// the decorator D, constructed with the backend and `args`.
template <typename D, typename... Args>
BackendFactory decorated_cpu_factory(Args... args) {
  return [=](const Config& c) {
    std::vector<std::unique_ptr<Backend>> v;
    v.push_back(std::make_unique<D>(
        make_cpu_backend(ModelWeights::load(c.model.path), cpu_backend_options(c)), args...));
    return v;
  };
}

class ProbeBackend final : public ForwardingBackend {
 public:
  ProbeBackend(std::unique_ptr<Backend> inner, std::shared_ptr<StepProbe> probe)
      : ForwardingBackend(std::move(inner)), probe_(std::move(probe)) {}
  StepResult step(const StepPlan& plan) override {
    {
      std::unique_lock<std::mutex> l(probe_->mu);
      StepPlan copy = plan;
      for (auto& s : copy.seqs) s.params = nullptr, s.prompt = nullptr, s.output = nullptr;
      probe_->plans.push_back(std::move(copy));
      probe_->cv.wait(l, [&] { return !probe_->gate; });
      bool decoding_only = probe_->hold_decoding != 0 && !probe_->entered &&
                           plan.seqs.size() >= probe_->hold_decoding;
      for (const auto& sq : plan.seqs) decoding_only = decoding_only && !sq.prefill;
      if (decoding_only || (probe_->hold_step != 0 && probe_->plans.size() == probe_->hold_step)) {
        probe_->held_index = probe_->plans.size() - 1;
        probe_->entered = true;
        probe_->cv.notify_all();
        probe_->cv.wait(l, [&] { return probe_->released; });
      }
    }
    return ForwardingBackend::step(plan);
  }

 private:
  std::shared_ptr<StepProbe> probe_;
};

inline BackendFactory probe_factory(std::shared_ptr<StepProbe> probe) {
  return decorated_cpu_factory<ProbeBackend>(std::move(probe));
}

struct Collected {
  std::vector<std::vector<std::int32_t>> tokens;  // per choice
  std::vector<std::string> text;
  std::vector<FinishReason> finish;
  std::optional<Usage> usage;
  std::string error;
  int events = 0;
};

inline Collected drain(TokenStream& s, int n = 1) {
  Collected c;
  c.tokens.resize(n);
  c.text.resize(n);
  c.finish.assign(n, FinishReason::kNone);
  while (auto ev = s.next_blocking()) {
    ++c.events;
    auto& t = c.tokens.at(ev->index);
    t.insert(t.end(), ev->token_ids.begin(), ev->token_ids.end());
    c.text.at(ev->index) += ev->text;
    if (ev->finish != FinishReason::kNone) c.finish.at(ev->index) = ev->finish;
    if (ev->usage) c.usage = ev->usage;
    if (!ev->error.empty()) c.error = ev->error;
  }
  return c;
}

inline Request greedy_request(std::vector<std::int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

inline std::vector<std::int32_t> random_prompt(std::mt19937& rng, int len, int vocab) {
  std::uniform_int_distribution<int> d(10, vocab - 1);
  std::vector<std::int32_t> p(static_cast<std::size_t>(len));
  for (auto& t : p) t = d(rng);
  return p;
}

// Waits (bounded) until the published statistics satisfy `pred`; returns the last snapshot.
// Every caller waits for something that must happen: the bound (60 s) is a liveness bound for
// a loaded 2-core CI machine under TSan, not a timing assertion.
template <class Pred>
EngineStats wait_stats(const Engine& e, Pred pred) {
  EngineStats s = e.stats();
  for (int i = 0; i < 12000 && !pred(s); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = e.stats();
  }
  return s;
}

}  // namespace strata::test

// A fake asynchronous backend for the pipelined step loop's tests (scheduler.async_steps): it
// wraps the CPU backend and really defers: submit() only queues the plan, collect() runs the
// oldest one, so results arrive a step late, and it resolves pending inputs from its own
// previous results (PendingInputs), never from the host. It also checks the contract from the
// backend's side: no plan changes between its submit() and its collect(), step() is never
// called directly, and counts the submits made while another step was outstanding.
//
// With `sync_return_logits` it behaves as the CUDA backend does with a blocker
// (cuda/async_steps.h): a plan with a return_logits row runs at submit, after every step queued
// before it, and its result says StepStats::sync = kReturnLogits.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <exception>
#include <memory>
#include <optional>

#include "engine_fixture.h"
#include "runtime/pending_inputs.h"

namespace strata::test {

struct DeferredCounters {
  std::atomic<long> submits{0};
  std::atomic<long> overlapped{0};     // submits while another step was outstanding
  std::atomic<long> pending_rows{0};   // rows whose input the backend fed
  std::atomic<long> direct_steps{0};   // step() called by the engine (must stay 0)
  std::atomic<long> changed_plans{0};  // a plan (or an output it points to) changed in flight
  std::atomic<long> sync_steps{0};     // run at submit (sync_return_logits)
  bool sync_return_logits = false;     // (set before the engine starts)
};

class DeferredBackend final : public ForwardingBackend {
 public:
  DeferredBackend(std::unique_ptr<Backend> inner, std::shared_ptr<DeferredCounters> counters)
      : ForwardingBackend(std::move(inner)), n_(std::move(counters)) {}

  StepResult step(const StepPlan& plan) override {
    ++n_->direct_steps;
    return ForwardingBackend::step(plan);
  }
  void submit(const StepPlan& plan) override {
    ++n_->submits;
    if (!queue_.empty()) ++n_->overlapped;
    queue_.push_back({&plan, fingerprint(plan), std::nullopt, nullptr});
    if (n_->sync_return_logits && std::any_of(plan.seqs.begin(), plan.seqs.end(),
                                              [](const SeqStep& s) { return s.return_logits; })) {
      for (Queued& q : queue_)  // the steps in flight first, in order
        if (!q.result && !q.error) run(q);
      if (queue_.back().result) queue_.back().result->stats.sync = SyncReason::kReturnLogits;
      ++n_->sync_steps;
    }
  }
  StepResult collect() override {
    STRATA_CHECK(!queue_.empty(), "collect() without a submitted step");
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    if (!q.result && !q.error) run(q);
    if (q.error) std::rethrow_exception(q.error);
    return std::move(*q.result);
  }

 private:
  // What the step reads of the plan and of the histories it points to.
  static std::vector<std::uint64_t> fingerprint(const StepPlan& plan) {
    std::vector<std::uint64_t> v{plan.step_id, plan.seqs.size(), plan.released_pages.size()};
    for (const auto& s : plan.seqs) {
      v.push_back(s.seq_id);
      v.push_back(static_cast<std::uint64_t>(s.start) << 32 |
                  static_cast<std::uint32_t>(s.prompt_len));
      v.push_back(s.input_pending * 4u + s.sample * 2u + s.prefill);
      for (auto t : s.tokens) v.push_back(static_cast<std::uint32_t>(t));
      for (const auto& l : s.layers) {
        v.push_back(static_cast<std::uint64_t>(l.valid) << 32 |
                    static_cast<std::uint32_t>(l.ring_pos));
        for (auto p : l.pages) v.push_back(static_cast<std::uint32_t>(p));
        for (auto p : l.temp_pages) v.push_back(static_cast<std::uint32_t>(p));
      }
      if (s.output) {
        v.push_back(s.output->size());
        std::uint64_t h = 1469598103934665603ull;
        for (auto t : *s.output) h = (h ^ static_cast<std::uint32_t>(t)) * 1099511628211ull;
        v.push_back(h);
      }
    }
    return v;
  }
  struct Queued {
    const StepPlan* plan;
    std::vector<std::uint64_t> print;
    std::optional<StepResult> result;  // run (at collect, or at a synchronous submit)
    std::exception_ptr error;
  };
  void run(Queued& q) {
    if (fingerprint(*q.plan) != q.print) ++n_->changed_plans;
    for (const auto& s : q.plan->seqs) n_->pending_rows += s.input_pending ? 1 : 0;
    try {
      q.result = ForwardingBackend::step(pending_.resolve(*q.plan));
    } catch (...) {
      pending_.forget();
      q.error = std::current_exception();
      return;
    }
    pending_.record(*q.plan, *q.result);
  }
  std::shared_ptr<DeferredCounters> n_;
  std::deque<Queued> queue_;
  PendingInputs pending_;
};

inline BackendFactory deferred_factory(std::shared_ptr<DeferredCounters> counters) {
  return decorated_cpu_factory<DeferredBackend>(std::move(counters));
}

}  // namespace strata::test

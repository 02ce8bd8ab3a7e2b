// RankExecutor: one per tensor-parallel rank. It owns the rank's Backend and a thread of its
// own running a private io_context, so a blocking `Backend::step` never stalls the actors'
// threads. The batcher hands it a plan; the completion (result or error) is delivered through
// the callback, which the batcher makes post back onto its own strand.
//
// Threading: run()/stop() are called from the batcher's strand (run) and the engine (stop);
// the backend is touched only by the executor's thread (backend.h's one-thread contract),
// except info()/model(), which are immutable after construction.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

#include "runtime/backend.h"

namespace strata::actors {

struct RankCompletion {
  int rank = 0;
  StepResult result;
  std::exception_ptr error;  // set when step() threw; `result` is then empty
  double wall_ms = 0.0;      // time step() took on the executor thread
  std::chrono::steady_clock::time_point started, finished;  // of step() on the executor thread
};

class RankExecutor {
 public:
  RankExecutor(int rank, std::unique_ptr<Backend> backend);
  ~RankExecutor();  // stop()
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  int rank() const { return rank_; }
  const Backend& backend() const { return *backend_; }
  // Runs `plan` on the executor thread; `done` is called there with the completion.
  // The plan (and what its SeqSteps point to) must stay alive and unchanged until then; the
  // executor drops its reference to the plan before calling `done`.
  void run(std::shared_ptr<const StepPlan> plan, std::function<void(RankCompletion)> done);
  // Pipelined steps (scheduler.async_steps): submit() hands `plan` to Backend::submit on the
  // executor thread and keeps it alive until it is collected; collect() takes the completion
  // of the oldest submitted step not collected (Backend::collect, or the error submit() threw)
  // and calls `done` there with it. Commands run in the order they are given; the plan rules
  // of run() hold until the completion (the executor drops its reference before `done`).
  void submit(std::shared_ptr<const StepPlan> plan);
  void collect(std::function<void(RankCompletion)> done);
  // Finishes the queued steps and joins the thread. Idempotent.
  void stop();

 private:
  int rank_;
  std::unique_ptr<Backend> backend_;
  // Submitted, not collected (executor thread only).
  struct Submitted {
    std::shared_ptr<const StepPlan> plan;
    std::exception_ptr error;  // Backend::submit threw: nothing queued there
    std::chrono::steady_clock::time_point started;
    double submit_ms = 0.0;
  };
  std::deque<Submitted> submitted_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

}  // namespace strata::actors

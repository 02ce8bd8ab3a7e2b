#include "actors/rank_executor.h"

#include <boost/asio/post.hpp>
#include <chrono>

namespace strata::actors {

RankExecutor::RankExecutor(int rank, std::unique_ptr<Backend> backend)
    : rank_(rank),
      backend_(std::move(backend)),
      work_(boost::asio::make_work_guard(io_)),
      thread_([this] { io_.run(); }) {}

RankExecutor::~RankExecutor() {
  stop();
}

void RankExecutor::run(std::shared_ptr<const StepPlan> plan,
                       std::function<void(RankCompletion)> done) {
  boost::asio::post(io_, [this, plan = std::move(plan), done = std::move(done)]() mutable {
    RankCompletion c;
    c.rank = rank_;
    c.started = std::chrono::steady_clock::now();
    try {
      c.result = backend_->step(*plan);
    } catch (...) {
      c.error = std::current_exception();
    }
    c.finished = std::chrono::steady_clock::now();
    c.wall_ms = std::chrono::duration<double, std::milli>(c.finished - c.started).count();
    // Let go of the plan before reporting: the batcher recycles its buffers once every rank
    // has completed (the completion's message orders this release before that reuse).
    plan.reset();
    done(std::move(c));
  });
}

void RankExecutor::stop() {
  if (!thread_.joinable()) return;
  work_.reset();
  thread_.join();
}

}  // namespace strata::actors

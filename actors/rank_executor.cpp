#include "actors/rank_executor.h"

#include <boost/asio/post.hpp>
#include <chrono>
#include <stdexcept>

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

void RankExecutor::submit(std::shared_ptr<const StepPlan> plan) {
  boost::asio::post(io_, [this, plan = std::move(plan)]() mutable {
    Submitted e;
    e.started = std::chrono::steady_clock::now();
    try {
      backend_->submit(*plan);
    } catch (...) {
      e.error = std::current_exception();
    }
    e.submit_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e.started)
            .count();
    e.plan = std::move(plan);
    submitted_.push_back(std::move(e));
  });
}

void RankExecutor::collect(std::function<void(RankCompletion)> done) {
  boost::asio::post(io_, [this, done = std::move(done)]() {
    RankCompletion c;
    c.rank = rank_;
    if (submitted_.empty()) {
      c.error = std::make_exception_ptr(std::logic_error("collect() without a submitted step"));
      done(std::move(c));
      return;
    }
    Submitted e = std::move(submitted_.front());
    submitted_.pop_front();
    c.started = e.started;
    const auto t0 = std::chrono::steady_clock::now();
    if (e.error) {
      c.error = e.error;
    } else {
      try {
        c.result = backend_->collect();
      } catch (...) {
        c.error = std::current_exception();
      }
    }
    c.finished = std::chrono::steady_clock::now();
    c.wall_ms = e.submit_ms + std::chrono::duration<double, std::milli>(c.finished - t0).count();
    e.plan.reset();  // (as run(): before reporting)
    done(std::move(c));
  });
}

void RankExecutor::stop() {
  if (!thread_.joinable()) return;
  work_.reset();
  thread_.join();
}

}  // namespace strata::actors

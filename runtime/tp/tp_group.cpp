#include "runtime/tp/tp_group.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/error.h"

namespace strata {
namespace {

// One persistent thread per rank > 0 (a backend is driven by one thread: backend.h).
class TpGroup final : public Backend {
 public:
  explicit TpGroup(std::vector<std::unique_ptr<Backend>> ranks)
      : ranks_(std::move(ranks)), info_(ranks_.at(0)->info()) {
    // The pages every rank has (CUDA ranks size their pools from their own free memory).
    for (const auto& r : ranks_) info_.num_pages = std::min(info_.num_pages, r->info().num_pages);
    slots_.resize(ranks_.size());
    for (std::size_t r = 1; r < ranks_.size(); ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~TpGroup() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  const BackendInfo& info() const override { return info_; }
  const ModelConfig& model() const override { return ranks_[0]->model(); }

  StepResult step(const StepPlan& plan) override {
    {
      std::lock_guard lk(mu_);
      plan_ = &plan;
      ++generation_;
      pending_ = ranks_.size() - 1;
      for (auto& s : slots_) s = nullptr;
    }
    cv_.notify_all();
    StepResult res;
    std::exception_ptr err;
    try {
      res = ranks_[0]->step(plan);
    } catch (...) {
      err = std::current_exception();
    }
    std::unique_lock lk(mu_);
    done_.wait(lk, [&] { return pending_ == 0; });
    for (std::size_t r = 1; r < slots_.size() && !err; ++r) err = slots_[r];
    if (err) std::rethrow_exception(err);
    return res;
  }

 private:
  void loop(std::size_t r) {
    std::uint64_t seen = 0;
    for (;;) {
      const StepPlan* plan;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        plan = plan_;
      }
      std::exception_ptr err;
      try {
        ranks_[r]->step(*plan);
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard lk(mu_);
        slots_[r] = err;
        --pending_;
      }
      done_.notify_all();
    }
  }

  std::vector<std::unique_ptr<Backend>> ranks_;
  BackendInfo info_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const StepPlan* plan_ = nullptr;
  std::uint64_t generation_ = 0;
  std::size_t pending_ = 0;
  std::vector<std::exception_ptr> slots_;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_tp_group(std::vector<std::unique_ptr<Backend>> ranks) {
  if (ranks.empty()) throw InternalError("make_tp_group: no ranks");
  if (ranks.size() == 1) return std::move(ranks[0]);
  return std::make_unique<TpGroup>(std::move(ranks));
}

}  // namespace strata

#include "runtime/cpu/thread_pool.h"

#include <algorithm>
#include <exception>
#include <utility>

namespace strata::cpu {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i + 1 < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    std::int64_t b;
    {
      std::lock_guard lk(mu_);
      if (next_ >= n_) return;
      b = next_;
      next_ += chunk_;
    }
    try {
      (*fn_)(b, std::min(n_, b + chunk_));
    } catch (...) {
      std::lock_guard lk(mu_);
      if (!error_) error_ = std::current_exception();
      next_ = n_;  // skip the remaining chunks
    }
  }
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= participants_) continue;  // not needed for this job
    }
    run_chunks();
    {
      std::lock_guard lk(mu_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  const std::int64_t want = std::min<std::int64_t>(threads(), (n + grain - 1) / grain);
  if (want <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lk(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + want - 1) / want;
    next_ = 0;
    participants_ = static_cast<int>(want) - 1;
    active_ = participants_;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::unique_lock lk(mu_);
  done_.wait(lk, [&] { return active_ == 0; });
  fn_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace strata::cpu

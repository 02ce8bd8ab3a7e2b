// A small fork-join pool for the CPU backend: parallel_for splits [0, n) into contiguous
// chunks run by the workers and the calling thread, and returns when all are done.
// Results never depend on the thread count (work is split, reductions never are).
// Driven by one thread at a time (the backend's step()).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; 0 = hardware
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) over chunks of [0, n); `grain` = the fewest items worth a thread. The
  // first exception thrown by fn is rethrown here after every chunk has stopped.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::uint64_t generation_ = 0;  // bumped per job
  int active_ = 0;                // workers still inside the current job
  bool stop_ = false;
  // Current job (written under mu_ before generation_ changes).
  const std::function<void(std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0, chunk_ = 0, next_ = 0;  // next_: next chunk start (under mu_)
  int participants_ = 0;                       // workers taking part in this job
  std::exception_ptr error_;                   // first exception of the job, rethrown
};

}  // namespace strata::cpu

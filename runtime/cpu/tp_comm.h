// The in-process collectives of the CPU tensor-parallel backend: n ranks, each driven by its
// own thread (its RankExecutor), meet at every collective. It stands in for NCCL on the
// CPU: all_reduce_sum after O and down, gather of the vocabulary-split logits to rank 0.
//
// Determinism: the all-reduce adds the ranks' buffers in rank order (rank 0 + rank 1 + ...),
// so every rank ends with bit-identical sums.
// Failure: a rank that fails mid-step calls abort(); every rank waiting in (or later entering)
// a collective throws InternalError with the reason instead of hanging. A collective that
// waits longer than `timeout` for the other ranks aborts the communicator the same way.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace strata::cpu {

class TpComm {
 public:
  explicit TpComm(int size, std::chrono::milliseconds timeout = std::chrono::minutes(5));

  int size() const { return size_; }
  // data[0..n) := the sum over ranks of their data[0..n) (same n on every rank).
  void all_reduce_sum(int rank, float* data, std::size_t n);
  // Rank 0 gets every rank's data concatenated in rank order in *out (sizes may differ);
  // other ranks pass out = nullptr.
  void gather(int rank, const float* data, std::size_t n, std::vector<float>* out);
  // Every rank gets every rank's data concatenated in rank order in *out (sizes may differ).
  void all_gather(int rank, const float* data, std::size_t n, std::vector<float>& out);
  // Marks the communicator failed (first reason kept) and wakes every waiter.
  void abort(const std::string& why);
  bool aborted() const;

 private:
  void barrier(int rank, const char* what);  // throws InternalError once aborted / on timeout

  int size_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::string abort_reason_;
  std::vector<const float*> ptr_;
  std::vector<std::size_t> len_;
};

}  // namespace strata::cpu

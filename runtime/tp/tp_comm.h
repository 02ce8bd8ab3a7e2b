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

// What a CPU rank needs from its group, implemented in-process by TpComm (ranks on threads)
// and over TCP by TcpComm (runtime/tp/tcp_comm.h, ranks in separate processes). Both keep
// the semantics above: rank-ordered sums (bit-identical on every rank), abort wakes every
// waiting rank with the reason, a timeout on every collective.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int size() const = 0;
  // data[0..n) := the sum over ranks of their data[0..n) (same n on every rank).
  virtual void all_reduce_sum(int rank, float* data, std::size_t n) = 0;
  // Rank 0 gets every rank's data concatenated in rank order in *out (sizes may differ);
  // other ranks pass out = nullptr.
  virtual void gather(int rank, const float* data, std::size_t n, std::vector<float>* out) = 0;
  // Every rank gets every rank's data concatenated in rank order in *out (sizes may differ).
  virtual void all_gather(int rank, const float* data, std::size_t n, std::vector<float>& out) = 0;
  // Marks the communicator failed (first reason kept) and wakes every waiter.
  virtual void abort(const std::string& why) = 0;
  virtual bool aborted() const = 0;
};

class TpComm final : public Collectives {
 public:
  explicit TpComm(int size, std::chrono::milliseconds timeout = std::chrono::minutes(5));

  int size() const override { return size_; }
  void all_reduce_sum(int rank, float* data, std::size_t n) override;
  void gather(int rank, const float* data, std::size_t n, std::vector<float>* out) override;
  void all_gather(int rank, const float* data, std::size_t n, std::vector<float>& out) override;
  void abort(const std::string& why) override;
  bool aborted() const override;

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

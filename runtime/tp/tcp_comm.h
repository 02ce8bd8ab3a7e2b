// The CPU collectives over TCP, for tensor-parallel ranks in separate processes
// (docs/tensor-parallel.md "Separate processes"). A star through rank 0 over the data links
// of runtime/tp/tp_link.h, with the in-process TpComm's semantics:
//   all_reduce_sum  every rank sends its buffer to rank 0, which adds them in rank order
//                   (rank 0 + rank 1 + ...: the same float operations as TpComm, so the sums
//                   are bit-identical to the in-process group's) and sends the sum back;
//   gather          ranks > 0 send, rank 0 concatenates in rank order;
//   all_gather      a gather, then rank 0 sends the concatenation to every rank;
//   abort(reason)   marks the communicator failed and sends the reason to the peers (rank 0
//                   forwards one it receives to the others): every rank's waiting or next
//                   collective throws InternalError with it;
//   timeout         a collective that waits longer than `timeout` for a peer aborts the group
//                   ("rank r waited … ms for rank p in an all-reduce"); a closed connection
//                   aborts it at once.
// Values travel as raw host-order fp32. Called by the rank's backend thread; abort() and
// aborted() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/tp/tp_comm.h"
#include "runtime/tp/tp_link.h"

namespace strata::cpu {

class TcpComm final : public Collectives {
 public:
  // `data`: rank 0: data[r] is the link to rank r (data[0] unused); rank r > 0: data[0] is
  // the link to rank 0 (TpMesh::data).
  TcpComm(int rank, int size, std::vector<std::shared_ptr<TpLink>> data,
          std::chrono::milliseconds timeout);

  int size() const override { return size_; }
  void all_reduce_sum(int rank, float* data, std::size_t n) override;
  void gather(int rank, const float* data, std::size_t n, std::vector<float>* out) override;
  void all_gather(int rank, const float* data, std::size_t n, std::vector<float>& out) override;
  void abort(const std::string& why) override;
  bool aborted() const override { return aborted_.load(); }

 private:
  void check(int rank, const char* what);
  [[noreturn]] void fail(const char* what);
  void send_to(int peer, const float* data, std::size_t n, const char* what);
  // Appends peer's values to *out (or checks there are exactly `expect` of them into out).
  void recv_from(int peer, const char* what, std::chrono::steady_clock::time_point deadline,
                 std::vector<float>& out);

  int rank_, size_;
  std::vector<std::shared_ptr<TpLink>> links_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::string reason_;
  std::atomic<bool> aborted_{false};
};

}  // namespace strata::cpu

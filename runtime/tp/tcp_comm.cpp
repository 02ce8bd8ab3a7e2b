#include "runtime/tp/tcp_comm.h"

#include <cstring>

#include "runtime/error.h"

namespace strata::cpu {

using Clock = std::chrono::steady_clock;

TcpComm::TcpComm(int rank, int size, std::vector<std::shared_ptr<TpLink>> data,
                 std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), links_(std::move(data)), timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size)
    throw InternalError("TcpComm: rank " + std::to_string(rank) + " of " + std::to_string(size));
  const std::size_t want = rank == 0 ? static_cast<std::size_t>(size) : 1;
  if (size > 1 && links_.size() != want) throw InternalError("TcpComm: wrong number of links");
  for (std::size_t i = rank == 0 ? 1 : 0; size > 1 && i < want; ++i)
    if (!links_[i]) throw InternalError("TcpComm: missing link " + std::to_string(i));
}

void TcpComm::abort(const std::string& why) {
  std::string reason;
  {
    std::lock_guard lk(mu_);
    if (!reason_.empty()) return;
    reason_ = why.empty() ? "aborted" : why;
    reason = reason_;
    aborted_ = true;
  }
  // Tell the peers (best effort: a peer whose connection is gone learns it from that).
  for (auto& l : links_) {
    if (!l) continue;
    try {
      l->send(TpMsg::kAbort, reason.data(), reason.size());
    } catch (const std::exception&) {
    }
  }
}

void TcpComm::fail(const char* what) {
  std::lock_guard lk(mu_);
  throw InternalError(std::string("tensor-parallel ") + what + " on rank " + std::to_string(rank_) +
                      " of " + std::to_string(size_) + ": " + reason_);
}

void TcpComm::check(int rank, const char* what) {
  if (rank != rank_)
    throw InternalError("TcpComm of rank " + std::to_string(rank_) + " called as rank " +
                        std::to_string(rank));
  if (aborted_) fail(what);
}

void TcpComm::send_to(int peer, const float* data, std::size_t n, const char* what) {
  auto& l = links_[static_cast<std::size_t>(rank_ == 0 ? peer : 0)];
  try {
    l->send(TpMsg::kData, data, n * sizeof(float));
  } catch (const std::exception& e) {
    abort("rank " + std::to_string(rank_) + " lost its connection to rank " + std::to_string(peer) +
          ": " + e.what());
    fail(what);
  }
}

void TcpComm::recv_from(int peer, const char* what, Clock::time_point deadline,
                        std::vector<float>& out) {
  auto& l = links_[static_cast<std::size_t>(rank_ == 0 ? peer : 0)];
  TpMessage m;
  const auto st = l->recv(m, deadline, [this] { return aborted_.load(); });
  switch (st) {
    case TpLink::Recv::kOk:
      break;
    case TpLink::Recv::kClosed:
      abort("rank " + std::to_string(peer) + " is gone (" + l->error() + ")");
      fail(what);
    case TpLink::Recv::kTimeout:
      abort("rank " + std::to_string(rank_) + " waited " + std::to_string(timeout_.count()) +
            " ms for rank " + std::to_string(peer) + " in a " + what);
      fail(what);
    case TpLink::Recv::kStopped:
      fail(what);
  }
  if (m.type == TpMsg::kAbort) {
    abort(std::string(m.body.begin(), m.body.end()));
    fail(what);
  }
  if (m.type != TpMsg::kData || m.body.size() % sizeof(float) != 0) {
    abort("rank " + std::to_string(peer) + " sent an unexpected message in a " + what);
    fail(what);
  }
  const auto at = out.size();
  out.resize(at + m.body.size() / sizeof(float));
  if (!m.body.empty()) std::memcpy(out.data() + at, m.body.data(), m.body.size());
}

void TcpComm::all_reduce_sum(int rank, float* data, std::size_t n) {
  if (size_ == 1) return;
  const char* what = "all-reduce";
  check(rank, what);
  const auto deadline = Clock::now() + timeout_;
  if (rank_ != 0) {
    send_to(0, data, n, what);
    std::vector<float> sum;
    recv_from(0, what, deadline, sum);
    if (sum.size() != n) {
      abort("all-reduce sizes differ between ranks");
      fail(what);
    }
    std::memcpy(data, sum.data(), n * sizeof(float));
    return;
  }
  // Rank order: sum = rank 0's values, then + rank 1's, + rank 2's, ... (as TpComm adds).
  std::vector<float> sum(data, data + n), part;
  for (int r = 1; r < size_; ++r) {
    part.clear();
    recv_from(r, what, deadline, part);
    if (part.size() != n) {
      abort("all-reduce sizes differ between ranks");
      fail(what);
    }
    for (std::size_t i = 0; i < n; ++i) sum[i] += part[i];
  }
  for (int r = 1; r < size_; ++r) send_to(r, sum.data(), n, what);
  std::memcpy(data, sum.data(), n * sizeof(float));
}

void TcpComm::gather(int rank, const float* data, std::size_t n, std::vector<float>* out) {
  if (size_ == 1) {
    if (out) out->assign(data, data + n);
    return;
  }
  const char* what = "gather";
  check(rank, what);
  if (rank_ != 0) {
    send_to(0, data, n, what);
    return;
  }
  const auto deadline = Clock::now() + timeout_;
  std::vector<float> all(data, data + n);
  for (int r = 1; r < size_; ++r) recv_from(r, what, deadline, all);
  if (out) *out = std::move(all);
}

void TcpComm::all_gather(int rank, const float* data, std::size_t n, std::vector<float>& out) {
  if (size_ == 1) {
    out.assign(data, data + n);
    return;
  }
  const char* what = "all-gather";
  check(rank, what);
  const auto deadline = Clock::now() + timeout_;
  if (rank_ != 0) {
    send_to(0, data, n, what);
    out.clear();
    recv_from(0, what, deadline, out);
    return;
  }
  std::vector<float> all(data, data + n);
  for (int r = 1; r < size_; ++r) recv_from(r, what, deadline, all);
  for (int r = 1; r < size_; ++r) send_to(r, all.data(), all.size(), what);
  out = std::move(all);
}

}  // namespace strata::cpu

#include "runtime/tp/tp_comm.h"

#include <algorithm>

#include "runtime/error.h"

namespace strata::cpu {

TpComm::TpComm(int size, std::chrono::milliseconds timeout)
    : size_(size),
      timeout_(timeout),
      ptr_(static_cast<std::size_t>(size)),
      len_(static_cast<std::size_t>(size)) {
  if (size < 1) throw InternalError("TpComm: size " + std::to_string(size));
}

bool TpComm::aborted() const {
  std::lock_guard lk(mu_);
  return !abort_reason_.empty();
}

void TpComm::abort(const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (abort_reason_.empty()) abort_reason_ = why.empty() ? "aborted" : why;
  }
  cv_.notify_all();
}

void TpComm::barrier(int rank, const char* what) {
  std::unique_lock lk(mu_);
  auto failed = [&] {
    return InternalError(std::string("tensor-parallel ") + what + " on rank " +
                         std::to_string(rank) + " of " + std::to_string(size_) + ": " +
                         abort_reason_);
  };
  if (!abort_reason_.empty()) throw failed();
  const auto gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  if (!cv_.wait_for(lk, timeout_, [&] { return generation_ != gen || !abort_reason_.empty(); })) {
    abort_reason_ = "rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) +
                    " ms for the other ranks in a " + what;
    cv_.notify_all();
    throw failed();
  }
  if (generation_ == gen) throw failed();  // woken by abort
}

void TpComm::all_reduce_sum(int rank, float* data, std::size_t n) {
  if (size_ == 1) return;
  {
    std::lock_guard lk(mu_);
    ptr_[static_cast<std::size_t>(rank)] = data;
    len_[static_cast<std::size_t>(rank)] = n;
  }
  barrier(rank, "all-reduce");
  std::vector<float> sum(ptr_[0], ptr_[0] + n);
  for (int r = 1; r < size_; ++r) {
    if (len_[static_cast<std::size_t>(r)] != n) {
      abort("all-reduce sizes differ between ranks");
      break;
    }
    const float* p = ptr_[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < n; ++i) sum[i] += p[i];
  }
  barrier(rank, "all-reduce");  // every rank has read every buffer
  std::copy(sum.begin(), sum.end(), data);
}

void TpComm::gather(int rank, const float* data, std::size_t n, std::vector<float>* out) {
  if (size_ == 1) {
    if (out) out->assign(data, data + n);
    return;
  }
  {
    std::lock_guard lk(mu_);
    ptr_[static_cast<std::size_t>(rank)] = data;
    len_[static_cast<std::size_t>(rank)] = n;
  }
  barrier(rank, "gather");
  if (rank == 0 && out) {
    out->clear();
    for (int r = 0; r < size_; ++r)
      out->insert(out->end(), ptr_[static_cast<std::size_t>(r)],
                  ptr_[static_cast<std::size_t>(r)] + len_[static_cast<std::size_t>(r)]);
  }
  barrier(rank, "gather");
}

void TpComm::all_gather(int rank, const float* data, std::size_t n, std::vector<float>& out) {
  if (size_ == 1) {
    out.assign(data, data + n);
    return;
  }
  {
    std::lock_guard lk(mu_);
    ptr_[static_cast<std::size_t>(rank)] = data;
    len_[static_cast<std::size_t>(rank)] = n;
  }
  barrier(rank, "all-gather");
  out.clear();
  for (int r = 0; r < size_; ++r)
    out.insert(out.end(), ptr_[static_cast<std::size_t>(r)],
               ptr_[static_cast<std::size_t>(r)] + len_[static_cast<std::size_t>(r)]);
  barrier(rank, "all-gather");
}

}  // namespace strata::cpu

#include "cuda/tp/nccl_comm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "cuda/cuda_check.h"
#include "runtime/error.h"

#ifdef STRATA_HAVE_NCCL
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == strata::kTpIdBytes, "NCCL unique id size");
#endif

namespace strata::cuda::tp {

using Clock = std::chrono::steady_clock;

#ifdef STRATA_HAVE_NCCL

struct NcclCommImpl {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, device = 0;
  std::chrono::milliseconds timeout{120000};
  std::atomic<bool> aborted{false}, abort_requested{false};
  mutable std::mutex reason_mu;
  std::string abort_reason;  // under reason_mu: the requested reason or the failure

  // An abort asked for by another thread: carried out here, on the rank's thread.
  void check_request() {
    if (!abort_requested.load()) return;
    std::string why;
    {
      std::lock_guard lk(reason_mu);
      why = abort_reason;
    }
    fail("the group was aborted: " + why);
  }

  std::string who() const {
    return "NCCL rank " + std::to_string(rank) + " of " + std::to_string(size) + " (device " +
           std::to_string(device) + ")";
  }
  [[noreturn]] void fail(const std::string& what) {
    {
      std::lock_guard lk(reason_mu);
      if (abort_reason.empty()) abort_reason = what;
    }
    if (comm && !aborted) {
      ncclCommAbort(comm);
      aborted = true;
      comm = nullptr;
    }
    throw InternalError(who() + ": " + what);
  }
  // A non-blocking call returned `r`: poll until it completed (or failed / timed out).
  // `give_up` (optional) is asked every 10 ms while the call is in progress.
  void settle(ncclResult_t r, const char* call, Clock::time_point deadline,
              const std::function<bool()>& give_up = {}) {
    auto next_ask = Clock::now();
    while (r == ncclInProgress) {
      check_request();
      if (Clock::now() > deadline) fail(std::string(call) + " did not complete in time");
      if (give_up && Clock::now() >= next_ask) {
        if (give_up()) fail(std::string(call) + ": another rank gave up or went away");
        next_ask = Clock::now() + std::chrono::milliseconds(10);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess)
      fail(std::string(call) + ": " + ncclGetErrorString(r) + " (" +
           (comm ? ncclGetLastError(comm) : "") + ")");
  }
  void live() {
    check_request();
    if (aborted || !comm) throw InternalError(who() + ": the communicator was aborted");
  }
};

bool have_nccl() {
  return true;
}

TpUniqueId make_unique_id() {
  ncclUniqueId id;
  const auto r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    throw InternalError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  TpUniqueId out;
  std::memcpy(out.data(), &id, kTpIdBytes);
  return out;
}

NcclComm::NcclComm(const TpUniqueId& id, int rank, int size, int device,
                   std::chrono::milliseconds timeout, const std::function<bool()>& give_up)
    : impl_(std::make_unique<NcclCommImpl>()) {
  auto& m = *impl_;
  m.rank = rank;
  m.size = size;
  m.device = device;
  m.timeout = timeout;
  CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), kTpIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = Clock::now() + timeout;
  const auto r = ncclCommInitRankConfig(&m.comm, size, nid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    m.comm = nullptr;
    throw InternalError(m.who() + ": ncclCommInitRankConfig: " + ncclGetErrorString(r));
  }
  try {
    m.settle(r, "joining the communicator (are all ranks up?)", deadline, give_up);
  } catch (const InternalError& e) {
    throw ConfigError("backend.tp_size", e.what());
  }
}

NcclComm::~NcclComm() {
  // Abort, not destroy: ncclCommDestroy finalizes, which may wait on peers that are gone (a
  // follower whose rank 0 died between steps). Every step already waited for its collectives,
  // so nothing is cut short.
  if (impl_ && impl_->comm && !impl_->aborted) ncclCommAbort(impl_->comm);
}

int NcclComm::rank() const {
  return impl_->rank;
}
int NcclComm::size() const {
  return impl_->size;
}

void NcclComm::all_reduce_bf16(void* data, std::size_t count, cudaStream_t stream) {
  impl_->live();
  const auto r = ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, impl_->comm, stream);
  impl_->settle(r, "ncclAllReduce", Clock::now() + std::chrono::seconds(60));
}

void NcclComm::all_gather_f32(const float* send, float* recv, std::size_t count,
                              cudaStream_t stream) {
  impl_->live();
  const auto r = ncclAllGather(send, recv, count, ncclFloat32, impl_->comm, stream);
  impl_->settle(r, "ncclAllGather", Clock::now() + std::chrono::seconds(60));
}

void NcclComm::wait(cudaStream_t stream, std::chrono::milliseconds timeout) {
  impl_->live();
  timeout = std::min(timeout, impl_->timeout);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    impl_->check_request();
    const auto q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) CUDA_CHECK(q);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(impl_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      impl_->fail(std::string("collective failed: ") + ncclGetErrorString(async));
    if (Clock::now() > deadline)
      impl_->fail("a step's collectives did not finish within " + std::to_string(timeout.count()) +
                  " ms (another rank stopped?)");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclComm::abort() {
  {
    std::lock_guard lk(impl_->reason_mu);
    if (impl_->abort_reason.empty()) impl_->abort_reason = "aborted by its rank after a failure";
  }
  if (impl_->comm && !impl_->aborted) {
    ncclCommAbort(impl_->comm);
    impl_->aborted = true;
    impl_->comm = nullptr;
  }
}

void NcclComm::request_abort(const std::string& reason) {
  {
    std::lock_guard lk(impl_->reason_mu);
    if (!impl_->abort_requested.load()) impl_->abort_reason = reason;
  }
  impl_->abort_requested = true;
}

bool NcclComm::aborted() const {
  return impl_->aborted.load() || impl_->abort_requested.load();
}

std::string NcclComm::abort_reason() const {
  std::lock_guard lk(impl_->reason_mu);
  if (impl_->abort_reason.empty() && aborted()) return "aborted";
  return impl_->abort_reason;
}

#else  // no NCCL in this build

struct NcclCommImpl {};

namespace {
[[noreturn]] void no_nccl() {
  throw ConfigError("backend.tp_size",
                    "tensor parallelism on GPUs needs NCCL; this build has none");
}
}  // namespace

bool have_nccl() {
  return false;
}
TpUniqueId make_unique_id() {
  no_nccl();
}
NcclComm::NcclComm(const TpUniqueId&, int, int, int, std::chrono::milliseconds,
                   const std::function<bool()>&) {
  no_nccl();
}
NcclComm::~NcclComm() = default;
int NcclComm::rank() const {
  no_nccl();
}
int NcclComm::size() const {
  no_nccl();
}
void NcclComm::all_reduce_bf16(void*, std::size_t, cudaStream_t) {
  no_nccl();
}
void NcclComm::all_gather_f32(const float*, float*, std::size_t, cudaStream_t) {
  no_nccl();
}
void NcclComm::wait(cudaStream_t, std::chrono::milliseconds) {
  no_nccl();
}
void NcclComm::abort() {}
void NcclComm::request_abort(const std::string&) {}
bool NcclComm::aborted() const {
  return false;
}
std::string NcclComm::abort_reason() const {
  return {};
}

#endif

}  // namespace strata::cuda::tp

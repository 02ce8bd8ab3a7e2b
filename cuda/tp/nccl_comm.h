// One NCCL communicator per tensor-parallel rank (DESIGN.md §5, docs/tensor-parallel.md):
// the all-reduce of the partial O / down outputs (bf16, in place, on the rank's stream, so it
// can sit inside a captured decode graph) and the all-gather of the vocabulary-split logits.
//
// Communicators are non-blocking (ncclConfig_t::blocking = 0) so that nothing waits forever:
// joining polls ncclCommGetAsyncError until the group is complete or `timeout` passes, and
// wait() bounds a stream's completion the same way; on a timeout or an asynchronous NCCL
// error the communicator is aborted (ncclCommAbort) and InternalError names the rank and the
// reason, so a rank that died mid-step stops the server instead of hanging a collective.
//
// The unique id travels in-process (one thread per GPU) or over the TCP rendezvous of
// runtime/tp/tp_rendezvous.h (separate processes). Not yet run on a GPU.
//
// `timeout` bounds the join and every wait(): wait() uses the smaller of its argument and it
// (separate processes pass --tp-timeout). Another thread may ask for an abort
// (request_abort: rank 0's proxy when a remote rank's process is gone); the rank's own
// thread then aborts the communicator at its next call or inside a running wait().
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "cuda/tp/collectives.h"
#include "runtime/tp/tp_rendezvous.h"

namespace strata::cuda::tp {

// Whether this build has NCCL (STRATA_HAVE_NCCL); without it every call below throws
// ConfigError("backend.tp_size").
bool have_nccl();

// A fresh NCCL unique id (rank 0 creates it and hands it to the others).
TpUniqueId make_unique_id();

struct NcclCommImpl;

class NcclComm final : public Collectives {
 public:
  // Joins the group as `rank` of `size` on CUDA device `device` (made current here). The
  // ranks of one process call this concurrently, each from its own thread. `give_up`
  // (optional, asked every 10 ms while joining) ends the join early with ConfigError, e.g.
  // when a peer process reported that it cannot start or closed its connection.
  NcclComm(const TpUniqueId& id, int rank, int size, int device,
           std::chrono::milliseconds timeout = std::chrono::seconds(120),
           const std::function<bool()>& give_up = {});
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override;
  int size() const override;
  bool capturable() const override { return true; }
  // Enqueued on `stream` (capturable): data[0..count) := sum over ranks, bf16.
  void all_reduce_bf16(void* data, std::size_t count, cudaStream_t stream) override;
  // Enqueued on `stream`: recv[r * count .. (r+1) * count) := rank r's send[0..count), fp32.
  void all_gather_f32(const float* send, float* recv, std::size_t count,
                      cudaStream_t stream) override;
  // Blocks until `stream` has finished, at most `timeout`, watching for NCCL errors; aborts
  // the communicator and throws InternalError on a timeout or an error.
  void wait(cudaStream_t stream, std::chrono::milliseconds timeout) override;
  // Aborts the communicator (idempotent); every later call throws. The rank's thread only.
  void abort();
  // Any thread: the rank's thread aborts the communicator at its next call or inside a
  // running wait(), throwing InternalError with `reason`.
  void request_abort(const std::string& reason);
  // Any thread: aborted, or an abort was requested.
  bool aborted() const;
  // Any thread: why (the requested reason or the failure), empty while not aborted.
  std::string abort_reason() const;

 private:
  std::unique_ptr<NcclCommImpl> impl_;
};

}  // namespace strata::cuda::tp

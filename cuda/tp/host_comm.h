// Host-staged collectives for several tensor-parallel ranks in one process, possibly on ONE
// GPU (NCCL refuses two ranks on one device): every operation synchronizes the rank's
// stream, copies to the host, meets the other ranks in runtime/tp/tp_comm.h (rank-ordered
// fp32 sums, rounded to bf16 like a two-rank NCCL bf16 sum) and copies back. Not capturable:
// a backend on these runs eager. Used by tests/gpu/tp_test.cpp to check the sharded CUDA path
// (slices, local heads, vocabulary gather) on a single GPU.
#pragma once

#include <memory>

#include "cuda/tp/collectives.h"
#include "runtime/tp/tp_comm.h"

namespace strata::cuda::tp {

class HostComm final : public Collectives {
 public:
  HostComm(std::shared_ptr<cpu::TpComm> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  bool capturable() const override { return false; }
  void all_reduce_bf16(void* data, std::size_t count, cudaStream_t stream) override;
  void all_gather_f32(const float* send, float* recv, std::size_t count,
                      cudaStream_t stream) override;
  void wait(cudaStream_t stream, std::chrono::milliseconds timeout) override;

 private:
  std::shared_ptr<cpu::TpComm> group_;
  int rank_;
};

}  // namespace strata::cuda::tp

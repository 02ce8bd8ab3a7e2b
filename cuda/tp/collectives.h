// The collectives a tensor-parallel CUDA rank needs (docs/tensor-parallel.md), behind an
// interface so the same backend code runs over NCCL (cuda/tp/nccl_comm.h, one GPU per rank)
// or over host-staged copies (cuda/tp/host_comm.h: several ranks on ONE GPU, eager only — a
// single-GPU check of the sharded CUDA path).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>

namespace strata::cuda::tp {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether the operations may sit inside a captured CUDA graph (else the backend runs eager).
  virtual bool capturable() const = 0;
  // Stream-ordered: data[0..count) := sum over ranks (bf16).
  virtual void all_reduce_bf16(void* data, std::size_t count, cudaStream_t stream) = 0;
  // Stream-ordered: recv[r*count .. (r+1)*count) := rank r's send[0..count) (fp32).
  virtual void all_gather_f32(const float* send, float* recv, std::size_t count,
                              cudaStream_t stream) = 0;
  // Blocks until `stream` is done, at most `timeout`; InternalError (group aborted) otherwise.
  virtual void wait(cudaStream_t stream, std::chrono::milliseconds timeout) = 0;
};

}  // namespace strata::cuda::tp

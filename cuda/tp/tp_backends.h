// The CUDA tensor-parallel pieces outside cuda/backend/ (docs/tensor-parallel.md):
// sliced weight loading for a rank, the gather of vocabulary-split logits, and the
// creation of one CudaBackend per GPU joined by NCCL. Compiled for sm_90; not yet run on a
// GPU (the project had no multi-GPU time when this was written).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/model/model_config.h"
#include "runtime/tp/tp_rendezvous.h"
#include "runtime/tp/tp_shard.h"

namespace strata {
class ModelWeights;
}

namespace strata::cuda::tp {

class Collectives;
class NcclComm;

// Writes weight `name` (n elements of the rank's slice) to dst; scale/offset: random init.
using WeightFn = std::function<void(__nv_bfloat16* dst, const std::string& name, std::size_t n,
                                    float scale, float offset)>;

struct SliceContext {
  ModelConfig full;                       // the whole model
  TpShard shard;                          // this rank
  bool random = false;                    // random:<preset> weights (else a checkpoint)
  const ModelWeights* weights = nullptr;  // the checkpoint (memory-mapped), random == false
  cudaStream_t stream = nullptr;
  WeightFn random_whole;  // fills a whole tensor with the tp 1 random values
  std::function<void(const std::string&, const __nv_bfloat16*, std::size_t)> record;  // by name
};

// Wraps the tp 1 loader: replicated tensors go to `whole`; split ones are read from the
// checkpoint's byte ranges of the slice only (runtime/tp/tp_shard.h read_slice), or generated
// whole on the GPU (the same values as tp 1) and the slice copied out.
WeightFn sliced_weight_loader(WeightFn whole, SliceContext ctx);

// logits[rows][V] := the ranks' [rows][vocab_slice] lm_head outputs, all-gathered into
// parts ([tp][rows][vocab_slice]) and copied to their vocabulary columns (stream-ordered,
// capturable).
void gather_vocab_logits(Collectives& comm, const ModelConfig& full, const float* local,
                         float* parts, float* logits, int rows, cudaStream_t stream);

// One rank of a group joined by NCCL: joins the communicator (ncclCommInitRankConfig with
// `id`, waiting at most `timeout` for the other ranks) on `device`, then builds the rank's
// CudaBackend. `backend` owns the communicator (it outlives the CudaBackend); `comm` is for
// request_abort/aborted from other threads. A step that fails with anything but
// InvalidRequest (checked before any GPU work, or sampling after every collective of the
// step was enqueued) may leave this rank's collectives unmatched: the communicator is then
// aborted, so the group fails (the peers' bounded waits end) instead of hanging.
struct NcclRank {
  std::unique_ptr<Backend> backend;
  std::shared_ptr<NcclComm> comm;
};
NcclRank make_nccl_rank(const Config& config, const TpUniqueId& id, int rank, int size, int device,
                        std::chrono::milliseconds timeout,
                        const std::function<bool()>& give_up = {});  // NcclComm's

// backend.tp_size ranks in this process: one CudaBackend per GPU (backend.devices or
// 0..tp_size-1), each built on a thread of its own with its NCCL communicator (ncclCommInit
// RankConfig, id made here); rank 0 first. The engine drives each from its RankExecutor.
std::vector<std::unique_ptr<Backend>> make_cuda_tp_backends(const Config& config);

}  // namespace strata::cuda::tp

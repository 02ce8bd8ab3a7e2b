// The CUDA backend (runtime/backend.h) for Llama models on one device: bf16 weights
// (uploaded from a checkpoint via runtime/model/model_loader.h, or generated on the device for
// `random:<preset>[,layers=N,...]` (runtime/model/random_model.h)
// with the model seed, bit-identical to `strata make-model`), a paged bf16 KV pool sized at
// start-up from the memory left after weights and workspace, cuBLAS GEMMs, the kernels of
// cuda/kernels.h and cuda/attention.h, and CUDA graphs for decode-only steps per
// batch-size bucket (eager outside the buckets).
//
// Layers: full-cache and sparse (window/snapkv/scored) layers, the latter through the
// cuda/sparse/ kernels (docs/cuda-backend.md "Sparse layers"); sparse decode is captured in
// the graphs, kShrink runs eagerly.
// Sampling: greedy rows without penalties/logit_bias/logprobs/min_tokens bans use a device
// argmax; the device sampler (cuda/sampling.h) takes the others it covers; the rest are
// copied to the host and sampled by runtime/sampler.h (the contract's oracle).
// A step is planned on the host (cuda/step_layout.h) and then run (cuda/backend/);
// docs/cuda-backend.md "Files" maps the parts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/kv_scales.h"

namespace strata::cuda {

struct CudaBackendImpl;
class CudaBackendProbe;
namespace tp {
class Collectives;
}

// This backend as one rank of a tensor-parallel group (docs/tensor-parallel.md): it holds
// the rank's shard (runtime/tp/tp_shard.h) and all-reduces/all-gathers through `comm`.
struct CudaTpRank {
  int rank = 0, size = 1;
  tp::Collectives* comm = nullptr;  // size > 1 (NCCL or host-staged); outlives the backend
};

class CudaBackend : public Backend {
 public:
  // Throws ConfigError / ModelError / InternalError. `device`: CUDA ordinal.
  // cache.kv_dtype fp8 (docs/kv-fp8.md): `kv_scales` given (tests: the GPU-vs-CPU oracle runs
  // both backends on one set) are used as they are; empty, the scales are cpu_kv_scales of the
  // host checkpoint with cpu_backend_options(config) (the checkpoint's kv_cache_scheme, else the
  // CPU backend's calibration): the one place scales are made, so both backends get the same
  // bits. A `random:` model has no host weights: it needs given scales.
  CudaBackend(const Config& config, int device, CudaTpRank tp = {}, const KvScales& kv_scales = {});
  ~CudaBackend() override;

  const BackendInfo& info() const override;
  const ModelConfig& model() const override;
  StepResult step(const StepPlan& plan) override;
  // scheduler.async_steps on one GPU: native pipelined steps (docs/cuda-backend.md "Pipelined
  // steps"; not yet run on a GPU): submit() plans into one of two upload images and launches
  // without synchronizing, pending inputs are read on the device. Otherwise Backend's
  // defaults. Do not mix step() with steps in flight.
  void submit(const StepPlan& plan) override;
  StepResult collect() override;

 private:
  friend class CudaBackendProbe;  // test/benchmark hooks: cuda/testing/backend_probe.h
  std::unique_ptr<CudaBackendImpl> impl_;
};

// One backend per tensor-parallel rank: tp_size 1 is the single-GPU backend; tp_size > 1
// builds one sharded backend per GPU joined by NCCL (cuda/tp/tp_backends.h; compiled, not
// yet run on GPUs).
std::vector<std::unique_ptr<Backend>> make_cuda_backends(const Config& config);

}  // namespace strata::cuda

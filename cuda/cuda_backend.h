// The CUDA backend (runtime/backend.h) for Llama models on one device: bf16 weights
// (uploaded from a checkpoint via runtime/model_loader.h, or generated on the device for
// `random:<preset>[,layers=N,hidden=N,heads=N,kv_heads=N,intermediate=N,head_dim=N,vocab=N]`
// with the model seed, bit-identical to `strata make-model`), a paged bf16 KV pool sized at
// start-up from the memory left after weights and workspace, cuBLAS GEMMs, the kernels of
// cuda/kernels.h and cuda/attention.h, and CUDA graphs for decode-only steps per
// batch-size bucket (eager outside the buckets).
//
// Layers: full-cache and sparse (window/snapkv/scored) layers, the latter through the
// cuda/sparse/ kernels (docs/cuda-backend.md "Sparse layers"); sparse decode is captured in
// the graphs, kShrink runs eagerly.
// Sampling: greedy rows without penalties/logit_bias/logprobs/min_tokens bans use a device
// argmax; every other row is copied to the host and sampled by runtime/sampler.h (the
// contract's oracle), so the results are identical to the CPU backend's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/config.h"

namespace strata::cuda {

struct CudaBackendImpl;
namespace tp {
class Collectives;
}

// This backend as one rank of a tensor-parallel group (docs/tensor-parallel.md): it holds
// the rank's shard (runtime/tp_shard.h) and all-reduces/all-gathers through `comm`.
struct CudaTpRank {
  int rank = 0, size = 1;
  tp::Collectives* comm = nullptr;  // size > 1 (NCCL or host-staged); outlives the backend
};

class CudaBackend : public Backend {
 public:
  // Throws ConfigError / ModelError / InternalError. `device`: CUDA ordinal.
  CudaBackend(const Config& config, int device, CudaTpRank tp = {});
  ~CudaBackend() override;

  const BackendInfo& info() const override;
  const ModelConfig& model() const override;
  StepResult step(const StepPlan& plan) override;

  // Test/benchmark hooks (not part of the Backend contract).
  // fp32 copy of a weight by HF name (e.g. "model.layers.0.self_attn.q_proj.weight").
  std::vector<float> weight_to_host(const std::string& hf_name) const;
  void set_cuda_graphs(bool on);
  // Graphs also for decode steps touching sparse layers (backend.sparse_graphs).
  void set_sparse_graphs(bool on);
  // Decode attention split count for every later step, eager and graph (0: the backend's
  // choice; 1..kMaxDecodeSplits).
  void set_decode_splits(int n);
  int graphs_captured() const;
  // Issue 9 diagnostics (tests only). While layer taps are on, every step (eager, and graph
  // replays: graphs are keyed by the flag) copies each layer's post-RoPE qkv rows, attention
  // output rows and (sparse decode) decode LSE into device buffers; layer_taps() returns those
  // of the last step, rows in the backend's row order (decode rows first, graph padding rows
  // included).
  struct LayerTap {
    int rows = 0;
    std::vector<std::uint16_t> qkv;   // bf16 bits [rows][q + 2 kv dims]
    std::vector<std::uint16_t> attn;  // bf16 bits [rows][q dims]
    std::vector<float> dec_lse;       // [decode rows][heads]; empty without sparse decode
  };
  void set_layer_taps(bool on);
  std::vector<LayerTap> layer_taps() const;
  // Raw pool contents of `pages` (page ids; scratch pages too): K/V bf16 bits
  // [page][page_elems] and scores [page][kv_heads][16].
  std::vector<std::uint16_t> read_kv_pages(const std::vector<int>& pages) const;
  std::vector<float> read_score_pages(const std::vector<int>& pages) const;
  // Bytes measured at start-up: weights, activations + workspace, KV pool.
  std::size_t activation_bytes() const;
  std::size_t kv_pool_bytes() const;

 private:
  std::unique_ptr<CudaBackendImpl> impl_;
};

// One backend per tensor-parallel rank: tp_size 1 is the single-GPU backend; tp_size > 1
// builds one sharded backend per GPU joined by NCCL (cuda/tp/tp_backends.h; compiled, not
// yet run on GPUs).
std::vector<std::unique_ptr<Backend>> make_cuda_backends(const Config& config);

// Parses "random:<preset>[,key=value...]" into a model shape (ConfigError on bad input).
ModelConfig random_model_config(const std::string& spec);

}  // namespace strata::cuda

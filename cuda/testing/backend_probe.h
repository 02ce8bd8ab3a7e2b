// Test and benchmark hooks of the CUDA backend (not part of the Backend contract): used by
// tests/gpu/ and tools/gpu/gpu_bench.cpp only. A probe is a view of one backend and lives no
// longer than it; like the backend, it is driven by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"

namespace strata::cuda {

class CudaBackendProbe {
 public:
  explicit CudaBackendProbe(CudaBackend& be);

  // fp32 copy of a weight by HF name (e.g. "model.layers.0.self_attn.q_proj.weight").
  std::vector<float> weight_to_host(const std::string& hf_name) const;
  void set_cuda_graphs(bool on);
  // Graphs also for decode steps touching sparse layers (backend.sparse_graphs).
  void set_sparse_graphs(bool on);
  // Page tables resident on the device, updated by deltas (backend.device_tables), or whole
  // tables every step.
  void set_device_tables(bool on);
  // The device page tables, [max_seqs][layers][pages per table] (d_tables).
  std::vector<int> read_tables() const;
  // Decode attention split count for every later step, eager and graph (0: the backend's
  // choice; 1..kMaxDecodeSplits).
  void set_decode_splits(int n);
  // The sparse layers' score update from the decode attention's logits (default) or, off,
  // recomputed from q and the kept K (the path before issue 18; for A/B benchmarks). Drops
  // the captured graphs, which bake the choice in.
  void set_score_update_from_logits(bool on);
  // The `scored` layers' resolve and score update on a side stream beside the layer's GEMMs
  // or on the step's stream (the default; STRATA_SPARSE_SIDE; backend_impl.h sparse_side). Drops
  // the captured graphs, which bake the choice in.
  void set_sparse_side(bool on);
  bool sparse_side() const;
  // Benchmarks only: graphs captured from now on run with every kernel node whose name contains
  // `pattern` disabled ("" none, the default; backend_impl.h graph_skip); their results are
  // wrong. Drops the graphs. graph_skipped(): how many nodes the last capture disabled;
  // graph_kernels(): its kernel nodes by name (a pattern no name contains only lists them).
  void set_graph_skip(const std::string& pattern);
  int graph_skipped() const;
  std::map<std::string, int> graph_kernels() const;
  // The score update inside the decode attention kernel where it applies (the default;
  // STRATA_SCORE_IN_ATTN; backend_impl.h score_in_attention), or in its own kernel. Drops the
  // graphs.
  void set_score_in_attention(bool on);
  bool score_in_attention() const;
  // The `scored` layers' ring resolve inside the RoPE + K/V write (the default;
  // STRATA_RESOLVE_IN_ROPE; backend_impl.h resolve_in_rope) or in its own kernel. Drops the graphs.
  void set_resolve_in_rope(bool on);
  bool resolve_in_rope() const;
  int graphs_captured() const;
  // Pipelined steps (scheduler.async_steps, cuda/backend/pipeline.cpp): steps launched without
  // waiting, steps run synchronously (a blocker), pending rows fed on the device, and device
  // steps launched while an earlier one was not yet waited for.
  struct AsyncCounts {
    int device_steps = 0, host_steps = 0, fed_rows = 0, overlapped = 0;
  };
  AsyncCounts async_counts() const;
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
  // Raw pool contents of `pages` (page ids; scratch pages too): K/V bf16 bits (bf16 pool only; an
  // fp8 pool throws) [page][page_elems] and scores [page][kv_heads][16].
  std::vector<std::uint16_t> read_kv_pages(const std::vector<int>& pages) const;
  std::vector<float> read_score_pages(const std::vector<int>& pages) const;
  // Fills every K/V element of the bf16 pool (scratch pages too) with seeded random values of
  // standard deviation `scale` (launch_random_fill), so that benchmarks attend over non-zero
  // keys and values (the pool starts as zeros). Scores and positions are left as they are. An fp8
  // pool throws.
  void fill_kv_random(unsigned long long seed, float scale = 1.0f);
  // cache.kv_dtype fp8: the KV scales the backend resolved (empty for a bf16 pool).
  const KvScales& kv_scales() const;
  // Issue 19 item 2. The 16-byte RMSNorm, RoPE + K/V and SwiGLU kernels on or off for every
  // later step (default: STRATA_PREFILL_FUSION); drops the captured graphs, which bake it in.
  void set_prefill_fusion(bool on);
  bool prefill_fusion() const;
  // The residual add of prefill steps in the O / down GEMMs' epilogue (same switch by default,
  // CudaBackendImpl::residual_in_gemm) on or off for every later step, apart from the 16-byte
  // kernels (A/B). Graphs never use it (decode-only steps), so none are dropped.
  void set_residual_epilogue(bool on);
  bool residual_epilogue() const;
  // Issue 18 item 3. The decode fusion of 1-2 row decode steps (STRATA_DECODE_FUSION,
  // cuda/gemm_skinny_fused.h): 0 off, 1 the fused skinny kernels, 2 with programmatic dependent
  // launch, for every later step; drops the captured graphs, which bake it in.
  void set_decode_fusion(int mode);
  int decode_fusion() const;
  // The skinny GEMM kernel for 1-2 row linear layers (Gemm::set_skinny; default on). Off, every
  // row count goes through cuBLAS: a sequence's decode rows then take the same GEMM path alone
  // (1 row) and in a batch (3+ rows). Drops the captured graphs, which bake the choice in.
  void set_skinny_gemm(bool on);
  // Issue 19 item 3: decode attention beside prefill attention in mixed steps (0 one stream, 1
  // a high-priority side stream, 2 a default-priority one, 3 a green context's SMs;
  // CudaBackendImpl::mixed_overlap, default STRATA_MIXED_OVERLAP) for every later step. Graphs
  // hold no mixed step: none dropped.
  void set_mixed_overlap(int mode);
  int mixed_overlap() const;
  // Per-kernel-class device time of the eager forwards since set_forward_profile(true) (events
  // between launch groups, cuda/backend/forward_profile.h; graph replays are not profiled).
  // ms[i] is class i's time summed over `forwards` forwards, named by names[i]; step_ms the
  // summed device_ms of those steps (upload + forward + sampling). Off: no events recorded.
  struct ForwardBreakdown {
    std::vector<std::string> names;
    std::vector<double> ms;
    int forwards = 0;
    double step_ms = 0.0;
  };
  void set_forward_profile(bool on);
  ForwardBreakdown forward_profile() const;
  // Bytes measured at start-up: activations + workspace, KV pool (+ scores).
  std::size_t activation_bytes() const;
  std::size_t kv_pool_bytes() const;

 private:
  CudaBackendImpl& b_;
};

}  // namespace strata::cuda

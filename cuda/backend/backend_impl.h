// The CUDA backend's state and its parts, one file per concept (docs/cuda-backend.md
// "Files"): weights.cpp (weights on the device), workspace.cpp (start-up: activations, step
// buffers, KV pool, GEMM tuning), run.cpp (a step: plan with cuda/step_layout.h, upload,
// launch), graphs.cpp (capture and replay), forward.cpp (the layers), logits.cpp (chunked
// lm_head, sampling, results). Private to cuda/ (and cuda/testing/backend_probe.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/async_steps.h"
#include "cuda/attention.h"
#include "cuda/backend/forward_profile.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/fp8.h"
#include "cuda/gemm.h"
#include "cuda/gemm_skinny_fused.h"
#include "cuda/kernels.h"
#include "cuda/sampling.h"
#include "cuda/sparse/sparse_kernels.h"
#include "cuda/step_layout.h"
#include "runtime/kv_scales.h"
#include "runtime/pending_inputs.h"
#include "runtime/tp/tp_shard.h"

namespace strata::cuda {

// Most slots a sparse decode row may attend for the score update to read the attention's logits
// (CudaBackendImpl::dec_logits); larger capacities recompute q . k.
inline constexpr int kMaxFusedScoreSlots = 2048;

// STRATA_MIXED_OVERLAP (CudaBackendImpl::mixed_overlap): unset or empty 0; 0, 1, 2 or 3, anything
// else throws ConfigError. Read on every call (backends read it once, at start-up).
int mixed_overlap_from_env();
// STRATA_SPARSE_SIDE (CudaBackendImpl::sparse_side): 1 on; unset, empty or 0 off; else an error.
bool sparse_side_from_env();
// STRATA_SCORE_IN_ATTN (CudaBackendImpl::score_in_attention): 0 off; unset, empty or 1 on.
bool score_in_attention_from_env();
// STRATA_RESOLVE_IN_ROPE (CudaBackendImpl::resolve_in_rope): 0 off; unset, empty or 1 on.
bool resolve_in_rope_from_env();

using bf16 = __nv_bfloat16;

// Pinned host staging (metadata uploads and graph replays read from here).
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  explicit PinnedArray(std::size_t n) : n_(n) {
    if (n) CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), n * sizeof(T)));
  }
  ~PinnedArray() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedArray(PinnedArray&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const { return p_; }
  T& operator[](std::size_t i) const { return p_[i]; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

struct LayerDev {
  bf16 *input_norm, *post_norm, *qkv, *o, *gate_up, *down;
  // model.quantization fp8 (cuda/fp8.h): the four matrices in e4m3 with per-output-channel
  // scales; the bf16 pointers qkv, o, gate_up and down are then null.
  Fp8Rows qkv8, o8, gate_up8, down8;
  // Static activation scales of a pre-quantized checkpoint (the parts' largest for the fused
  // qkv and gate_up inputs, as the CPU backend); 0: per-token scales computed on the fly.
  float qkv_in = 0.0f, o_in = 0.0f, gate_up_in = 0.0f, down_in = 0.0f;
};

// Eager sparse work of one layer in one step (device pointers into the step workspace).
struct LayerSparseWork {
  sparse::PrefillParams pre;  // pre.num_seqs == 0: none
  sparse::ShrinkParams shr;   // shr.num_seqs == 0: none
};

// What forward() runs: sizes from the step layout (or the graph bucket while capturing).
struct ForwardArgs {
  int rows = 0;         // T
  int decode_rows = 0;  // S_dec: the first rows, decode kernel
  int tiles = 0;        // prefill tiles
  int splits = 1;       // decode attention splits
  int lm_rows = 0;      // rows of the first lm_head chunk (capped at logit_rows)
  bool argmax = true;
  const std::vector<LayerSparseWork>* work = nullptr;  // eager sparse work (never in a graph)
  bool sparse_decode = false;  // scored resolve/update kernels on the decode rows
  int dec_max_slots = 0;       // their grid bound
};

struct CudaBackendImpl {
  Config cfg;
  int device = 0;
  int num_sms = 0;  // cudaDevAttrMultiProcessorCount
  ModelConfig mc;
  BackendInfo binfo;
  cudaStream_t stream = nullptr;
  std::unique_ptr<Gemm> gemm;
  DeviceSampler sampler;  // non-greedy rows (cuda/sampling.h)

  // Weights (weights.cpp).
  bool fp8 = false;                               // model.quantization: fp8 (W8A8 linear layers)
  std::vector<DeviceArray<bf16>> owned;           // every weight allocation
  std::vector<DeviceArray<std::uint8_t>> owned8;  // fp8: e4m3 codes
  std::vector<DeviceArray<float>> owned_f32;      // fp8: their per-channel scales
  bf16 *embed = nullptr, *final_norm = nullptr, *lm_head = nullptr;
  std::vector<LayerDev> layers;
  std::map<std::string, std::pair<const bf16*, std::size_t>> by_name;  // HF name -> (ptr, elems)
  DeviceArray<double> inv_freq;
  // RoPE's (cos, sin) of every position of the context (RopeKvParams::cos_sin; allocate_workspace;
  // STRATA_ROPE_TABLE=0: none, the kernels' per-use sincos, for A/B runs).
  DeviceArray<float2> rope_table;
  int rope_table_positions = 0;

  // Limits.
  int max_tokens = 0, max_seqs = 0, pmax = 0, max_tiles = 0, logit_rows = 0;
  int q_dim = 0, kv_dim = 0, qkv_dim = 0;

  // Activations and metadata (fixed addresses: CUDA graphs replay against them).
  DeviceArray<float> resid;
  DeviceArray<bf16> normed, qkv, attn, delta, gu, act, lm_normed;
  DeviceArray<float> logits, part_o, part_ml;
  // fp8: the e4m3 input of the GEMM being run ([max_tokens][max(hidden, q_dim, intermediate)],
  // one scale per row), written by RMSNorm, quantize_rows (attention output) and SwiGLU.
  DeviceArray<std::uint8_t> x8;
  DeviceArray<float> x8_scale;
  DeviceArray<int> d_tokens, d_pos, d_seq_of, d_tables, d_row_start, d_nq, d_qpos0, d_tile_seq,
      d_tile_q0, d_q_row, d_seq_len, d_lm_rows, d_argmax;
  PinnedArray<int> h_argmax;
  DeviceArray<float> d_logz;  // [logit_rows] log-partition of greedy rows (their logprob)
  PinnedArray<float> h_logz;
  PinnedArray<float> h_logits;
  std::size_t activation_bytes = 0;

  // The plan half of a step (cuda/step_layout.h): planner, the layout of the step being run,
  // and the pinned upload image its sections are staged in.
  std::unique_ptr<StepPlanner> planner;
  StepLayout layout;
  PinnedArray<std::byte> image_mem;
  StepImage image;

  // KV pool: bf16 (kv_pool), or with cache.kv_dtype fp8 e4m3 codes (kv_pool8, same layout and
  // page_elems, 1 byte each; kv_pool then empty) with the fixed per-(layer, KV head) scales
  // (docs/kv-fp8.md): kv_scales on the host as resolved (resolve_kv_scales), d_kv_scales on the
  // device as [layers][kv_heads][2] (K, V), the layout the kernels' `scales` / `kv_scales` read
  // one layer of (layer_kv_scales).
  DeviceArray<bf16> kv_pool;
  std::size_t kv_bytes = 0;
  bool kv8 = false;  // cache.kv_dtype fp8
  DeviceArray<std::uint8_t> kv_pool8;
  KvScales kv_scales;
  DeviceArray<float> d_kv_scales;
  const float* layer_kv_scales(int l) const {
    return kv8 ? d_kv_scales.get() + static_cast<std::size_t>(l) * mc.num_key_value_heads * 2
               : nullptr;
  }
  // fp8 KV: the bf16 pages a prefill's context is dequantized into for the Hopper attention
  // kernels (attention.h fp8_stage; one layer at a time): pmax + max_tokens / 16 + max_seqs pages,
  // a table of max_seqs x pmax; empty with a bf16 pool or STRATA_FP8_PREFILL_STAGE=0 (then FA2
  // reads the codes). upload_step counts the step's prefill context (fp8_stage_params).
  DeviceArray<bf16> fp8_stage_pool;
  DeviceArray<int> fp8_stage_table;
  long long fp8_stage_pages = 0;
  int step_table_rows = 0;
  long long step_ctx_pages = 0;
  int step_ctx_max_pages = 0;
  PrefillAttentionParams::Fp8Stage fp8_stage_params() const {
    if (!kv8 || fp8_stage_pages == 0) return {};
    return {.pool = fp8_stage_pool.get(),
            .pages = fp8_stage_pages,
            .table = fp8_stage_table.get(),
            .stride = pmax,
            .num_seqs = step_table_rows,
            .ctx_pages = step_ctx_pages,
            .ctx_max_pages = step_ctx_max_pages};
  }
  // fp8: `given` (the constructor's) or cpu_kv_scales(host weights, cpu_backend_options(cfg))
  // into kv_scales and d_kv_scales. `host`: the checkpoint (null for `random:` models). A
  // `random:` model without given scales is calibrated on the device instead: kv8 stays off
  // (a bf16 pool) until calibrate_kv_on_device, at the end of the constructor, turns it on.
  void resolve_kv_scales(const std::shared_ptr<const ModelWeights>& host, const KvScales& given);
  bool kv_calibrate_on_device = false;
  // kv_scales -> d_kv_scales ([layers][kv_heads][2]).
  void upload_kv_scales();
  // kv_calibration.cpp: runtime/kv_scales.h's calibration prompts through this backend's bf16
  // path, amax of the K/V rows read back from the pool pages; then the bf16 pool is released,
  // kv8 set and the e4m3 pool planned in its place (scales source "calibrated on the device").
  void calibrate_kv_on_device();

  // Sparse layers (docs/cuda-backend.md "Sparse layers"). Pages [num_pages, num_pages +
  // scratch_pages) of kv_pool are the backend's prefill scratch (never handed out).
  int scratch_pages = 0;
  DeviceArray<float> score_pool;  // [page][kv_head][16] fp32 per-slot scores
  // [page][kv_head][16] int32: the token position each sparse slot holds, written by the
  // sparse kernels beside the scores; read only for a census (census.cpp).
  DeviceArray<std::int32_t> pos_pool;
  // The census's gather (grow-only; census steps only; one pair: steps use it in stream order).
  DeviceArray<std::int32_t> census_pages, census_out;
  // What a census step reads (census.cpp plan_census): per asked row its layers' states after
  // the step, and the distinct pages of its sparse layers' valid slots (page id -> row of the
  // gathered buffer).
  struct CensusWork {
    struct Row {
      std::size_t seq = 0;  // plan index
      std::vector<LayerSlots> after;
      std::int32_t tokens = 0;
    };
    std::vector<Row> todo;
    std::vector<std::int32_t> pages;
    std::unordered_map<std::int32_t, int> page_row;
  };
  CensusWork census_sync;  // step()'s (collect_kept)
  PinnedArray<std::int32_t> census_src_sync, census_host_sync;
  DeviceArray<float> pre_lse;  // [max_tokens, heads] prefill LSE of sparse layers
  DeviceArray<float> dec_lse;  // [max_seqs, heads] decode LSE
  // The decode attention's scaled logits for the score update of sparse layers (issue 18):
  // [max_seqs, heads, dec_logits_cols]. Steps whose sparse rows attend more slots than the
  // columns (capacities above kMaxFusedScoreSlots) recompute q . k instead.
  DeviceArray<float> dec_logits;
  int dec_logits_cols = 0;
  bool score_from_logits = true;  // test/bench hook (CudaBackendProbe): false = always q . k
  // Issue 18 item 1: where the logits path applies and decode_attention_updates_scores holds
  // (one split, the kept logits fit beside the ring without costing a block per SM), the score
  // update runs inside the tensor-core decode attention kernel (attention.h upd_*) instead of
  // the logits buffer + update kernel; the same bits (the rule's arithmetic is spelled with
  // rounding intrinsics, sparse_common.cuh, so no call site contracts it differently). On by
  // default since its bitwise tests passed on an H100 (sixteenth session; docs/gpu-validation.md);
  // STRATA_SCORE_IN_ATTN=0 turns it off (score_in_attention_from_env);
  // CudaBackendProbe::set_score_in_attention for A/B.
  bool score_in_attention = score_in_attention_from_env();
  // Issue 18 item 1: the `scored` layers' ring resolve inside the RoPE + K/V write (each decode
  // row's block resolves its KV heads before writing its K/V; RopeKvParams::resolve) instead of
  // its own launch; the same bits. On by default (STRATA_RESOLVE_IN_ROPE=0 turns it off;
  // CudaBackendProbe::set_resolve_in_rope for A/B). With the side stream the resolve stays there.
  bool resolve_in_rope = resolve_in_rope_from_env();
  // Per layer, per decode batch index (fixed addresses, read by the graphs): [L][max_seqs].
  DeviceArray<int> d_slots;
  DeviceArray<sparse::DecodeSeq> d_dec_seqs;
  // Eager per-step sparse workspace (metadata + kernel scratch), grow-only.
  DeviceArray<unsigned char> sp_ws;
  PinnedArray<unsigned char> sp_meta;

  // ---- Resident page tables (issue 24 item 2; cuda/backend/tables.cpp) ----
  bool device_tables = true;         // backend.device_tables: d_tables kept, deltas uploaded
  DeviceArray<TableOp> d_table_ops;  // [TableStore::max_ops] one round's ops
  DeviceArray<int> d_table_data;     // [TableStore::delta_entries] one round's page ids
  void allocate_device_tables();     // start-up (allocate_workspace)
  void upload_tables();              // run.cpp: whole tables, or the delta rounds + their kernel
  void run_layout(const StepPlan& plan, StepResult& result);  // run.cpp: step() after the plan
  // run.cpp: the step's forward — graph replay of layout.graph.bucket or the eager forward
  // over `work` — and the tap_* extents sample_and_collect reads (step() and the pipeline).
  void launch_forward(const std::vector<LayerSparseWork>& work);
  // ---- end resident page tables ----

  // ---- Pipelined steps (scheduler.async_steps; pipeline.cpp, docs/cuda-backend.md "Pipelined
  // steps"). Off: none of this is allocated or touched and step() is the whole story. ----
  // What one in-flight step owns on the host: its upload image, sparse metadata staging, the
  // pinned outputs its async copies write, the feed index lists, its device sampler, its layout.
  struct AsyncSlot {
    PinnedArray<std::byte> image_mem;
    StepImage image;
    PinnedArray<unsigned char> sp_meta;
    PinnedArray<int> h_argmax;      // [logit_rows]
    PinnedArray<float> h_logz;      // [logit_rows]
    PinnedArray<std::int32_t> aux;  // [5 * max_seqs] the host side of d_aux
    std::unique_ptr<DeviceSampler> sampler;
    StepLayout layout;
    // A census step's work, its page list and gathered positions (census.cpp, queued with the
    // step, counted at collect).
    CensusWork census;
    PinnedArray<std::int32_t> census_src, census_host;
    bool busy = false;  // submitted and not finished
  };
  // One submitted step, oldest first. done: its result (or error) is on the host.
  struct AsyncStep {
    bool done = false;
    StepResult result;
    std::exception_ptr error;
    int slot = -1, ev = -1;
    cudaEvent_t prev_end = nullptr;  // the previous submitted step's end (device_gap_ms)
    const StepPlan* plan = nullptr;  // the engine's plan (alive until collect: the contract)
    std::vector<SampleRowDesc> dev_rows;
    std::vector<int> dev_index;  // plan index -> device sampler request, -1
    bool fed = false;            // its input rows read the previous step's tokens on the device
    bool census = false;         // its slot's census work is queued: counted in finish()
    double host_ms = 0.0;
  };
  enum class LastStep : std::uint8_t { kNone, kDevice, kHost };
  bool native_async = false;  // cfg.scheduler.async_steps and one rank
  bool async_ready = false;   // ensure_async() ran
  std::array<AsyncSlot, 2> aslots;
  int next_slot = 0;
  // Start/end events of steps, a ring of three: a step's gap reads the previous step's end,
  // which is recorded again only two submissions later (after this step was collected).
  std::array<std::array<cudaEvent_t, 2>, 3> aev{};
  int next_ev = 0;
  std::deque<AsyncStep> inflight;
  PendingFeed feed;            // pending rows of the next step, fed on the device
  PendingInputs host_pending;  // ... or resolved on the host after a synchronous step
  LastStep last_kind = LastStep::kNone;
  cudaEvent_t last_end = nullptr;
  bool last_failed = false;
  // [max_seqs] the last pipelined step's sampled token per plan index (cuda/async_steps.h).
  DeviceArray<std::int32_t> d_fed;
  // [5 * max_seqs] token feed pairs | history feed pairs | feed sources (AsyncSlot::aux).
  DeviceArray<std::int32_t> d_aux;
  // Counts for tests (CudaBackendProbe::async_counts; written by the backend's thread).
  std::atomic<int> async_device_steps{0}, async_host_steps{0}, async_fed_rows{0},
      async_overlapped{0};
  void ensure_async();
  void submit(const StepPlan& plan);
  StepResult collect();
  void submit_device(const StepPlan& plan);
  // The synchronous step, after the steps in flight; `why` becomes its StepStats::sync.
  void submit_host(const StepPlan& plan, SyncReason why);
  void finish(AsyncStep& st);  // waits for its end event, builds its result
  void finish_all();
  // ---- end pipelined steps ----

  bool use_graphs = true;
  // Graphs also for decode steps with sparse layers (backend.sparse_graphs; off by default:
  // their replay disagrees with eager, issue 9 in docs/cuda-backend.md).
  bool sparse_graphs = false;
  std::vector<int> buckets;
  // Key: every host scalar forward() bakes into a capture: (bucket size, sparse decode slot
  // bucket or 0, decode attention splits, layer taps on).
  std::map<std::tuple<int, int, int, bool>, cudaGraphExec_t> graphs;
  // Benchmark hook (CudaBackendProbe::set_graph_skip, gpu_bench sparse's leave-one-out): kernel
  // nodes whose name contains this string are disabled in every graph captured from now on
  // (cudaGraphNodeSetEnabled), so a replay's time less the full replay's is what those kernels
  // cost inside the graph. Empty (the default): nothing disabled. `graph_skipped` counts the
  // nodes the last capture disabled and `graph_kernels` its kernel nodes by name (a pattern no
  // name contains only lists them). The step's values are wrong while it is set: timing only.
  std::string graph_skip;
  int graph_skipped = 0;
  std::map<std::string, int> graph_kernels;
  int forced_splits = 0;  // test hook: decode attention splits (0: pick_decode_splits)
  // Layer taps (test hook, issue 9): per layer [max_tokens][qkv_dim] / [max_tokens][q_dim]
  // bf16 and [max_seqs][heads] fp32 copies of the last step's qkv, attention output and
  // decode LSE.
  bool taps = false;
  DeviceArray<bf16> tap_qkv, tap_attn;
  DeviceArray<float> tap_lse;
  int tap_rows = 0, tap_dec_rows = 0;
  bool tap_has_lse = false;
  // Issue 19 item 2: the 16-byte RMSNorm, RoPE + K/V and SwiGLU kernels (STRATA_PREFILL_FUSION,
  // cuda/kernels.h); graphs bake the choice in (CudaBackendProbe::set_prefill_fusion drops them).
  bool vec_kernels = prefill_fusion_from_env() >= 1;
  // Issue 19 item 2, STRATA_PREFILL_FUSION=2: the residual add of prefill steps in the O and down
  // GEMMs' epilogue (Gemm::linear_residual: resid += x . W^T in fp32), so the following RMSNorm
  // reads resid once and writes only its bf16 output. Decode-only steps (graphs included), 1-2 row
  // steps (the skinny kernel), FP8 layers and tp > 1 (the all-reduce of delta) keep the bf16
  // delta + the RMSNorm's add. resid_in_gemm: what the current step's forward chose
  // (residual_in_gemm); lm_chunk reads it. CudaBackendProbe::set_residual_epilogue for A/B.
  bool resid_epilogue = prefill_fusion_from_env() >= 2;
  bool resid_in_gemm = false;
  bool residual_in_gemm(const ForwardArgs& a) const {
    return resid_epilogue && !fp8 && !tp.comm && a.tiles > 0 && a.rows > kSkinnyMaxRows;
  }
  // Issue 18 item 3, STRATA_DECODE_FUSION (cuda/gemm_skinny_fused.h): decode-only steps of
  // 1..kSkinnyMaxRows rows (graphs included: bucket 1 and 2) run each layer as 4 fused skinny
  // kernels beside RoPE and attention: RMSNorm + qkv, o + residual, RMSNorm + gate_up, SwiGLU +
  // down + residual (forward.cpp). bf16 layers only, tp 1, the skinny GEMM on. The residual is
  // then added inside the GEMMs (resid_in_gemm set for the step, lm_chunk reads it). 2: the
  // fused kernels with programmatic dependent launch. CudaBackendProbe::set_decode_fusion for
  // A/B (drops the graphs, which bake it in).
  int decode_fusion = decode_fusion_from_env();
  bool decode_fused(int rows, int tiles) const {
    return decode_fusion > 0 && !fp8 && !tp.comm && tiles == 0 && rows >= 1 &&
           rows <= kSkinnyMaxRows && gemm && gemm->skinny();
  }
  bool dec_fused = false;  // this step's forward: decode_fused(rows, tiles)
  // Issue 19 item 3: in a step with decode rows and prefill tiles, each layer's decode attention
  // (and the sparse score update after it) runs on a side stream beside the prefill attention
  // on `stream`, forked and joined with events inside the layer (forward.cpp; capturable). Same
  // kernels, same inputs, disjoint outputs: the same bits. STRATA_MIXED_OVERLAP (read at
  // start-up, mixed_overlap_from_env; CudaBackendProbe::set_mixed_overlap for A/B): 0 off, one
  // stream (the default until measured on the H200); 1 the side stream at the highest priority
  // (the decode blocks take each SM a prefill block leaves); 2 at the default priority (they
  // fill the prefill's tail); 3 the side stream of a green context over
  // STRATA_MIXED_OVERLAP_SMS SMs (default 40; driver API, created on first use, mode 1 where it
  // cannot be: said once), so that the decode runs on its own SMs at the copy ceiling while the
  // prefill keeps the others.
  int mixed_overlap = mixed_overlap_from_env();
  cudaStream_t side_hi = nullptr, side_lo = nullptr;
  cudaEvent_t ev_fork = nullptr, ev_join = nullptr;  // timing off; re-recorded every layer
  void* green_ctx = nullptr;                         // CUgreenCtx of mode 3 (workspace.cpp)
  cudaStream_t side_green = nullptr;  // its stream; side_hi when it could not be made
  bool green_tried = false;
  cudaStream_t mixed_side_stream();  // the side stream of mixed_overlap (1..3)
  // Issue 18: the `scored` layers' two small kernels off the step's critical path (forward.cpp).
  // Layer l's ring resolve (it reads and writes only layer l's pool rows, scores and positions)
  // runs on side_sparse beside the qkv GEMM (forked after the input norm) and is joined before the
  // RoPE + K/V write, which overwrites the slot it moves; the score update (layer l's scores and
  // positions from dec_logits and dec_lse) runs there beside the rest of the layer and is
  // joined with layer l + 1's resolve (queued behind it on the same stream) before that
  // layer's RoPE, hence before its decode attention rewrites dec_logits / dec_lse, or at the
  // end of the forward. Work of the layer that touches the same rows (sparse prefill, live
  // shrink, layer taps) joins first. Same kernels, same inputs: the same bits. Off with
  // tp > 1, under mixed_overlap's side stream (the update stays there) and in profiled
  // forwards (per-class events). Off by default: measured slower on an H100 (+0.12 ms per
  // sparse b64 step, fourteenth session); STRATA_SPARSE_SIDE=1 turns it on
  // (sparse_side_from_env); CudaBackendProbe::set_sparse_side for A/B (drops the graphs).
  bool sparse_side = sparse_side_from_env();
  cudaStream_t side_sparse = nullptr;
  cudaEvent_t ev_sp_fork = nullptr, ev_sp_join = nullptr;  // timing off; re-recorded per layer
  bool sp_pending = false;  // this forward: work on side_sparse not yet joined into `stream`
  void sparse_side_fork();  // side_sparse waits for `stream`'s work so far
  void sparse_side_join();  // `stream` waits for side_sparse's work so far (if any is pending)
  // Per-kernel-class timing of eager forwards (forward_profile.h; CudaBackendProbe): null = off.
  // prof_on: this forward is profiled (profile set and the stream not capturing).
  std::unique_ptr<ForwardProfile> profile;
  bool prof_on = false;
  void prof(KernelClass c) {
    if (prof_on) profile->mark(c, stream);
  }
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;
  // The previous step's ev1 (the two are swapped at each step): the device gap before ev0.
  cudaEvent_t ev1_prev = nullptr;
  bool have_prev_end = false;

  // Tensor parallelism (docs/tensor-parallel.md): this rank's shard; `mc` holds the rank's
  // LOCAL head and intermediate counts (full vocabulary and hidden size), full_mc the model.
  CudaTpRank tp;
  TpShard shard;
  ModelConfig full_mc;
  DeviceArray<float> logits_local, logits_parts;  // tp > 1: [rows][vocab_slice], [tp][rows][slice]

  CudaBackendImpl(const Config& c, int dev, CudaTpRank tp_rank, const KvScales& given_kv_scales);
  ~CudaBackendImpl();

  // weights.cpp
  bf16* alloc_weight(std::size_t n) {
    owned.emplace_back(n);
    return owned.back().get();
  }
  void build_weights(const KvScales& given_kv_scales);
  // fp8: rows x cols e4m3 weights with their scales, owned by the backend.
  Fp8Rows alloc_fp8(std::size_t rows, std::size_t cols) {
    owned8.emplace_back(rows * cols);
    owned_f32.emplace_back(rows);
    return {owned8.back().get(), owned_f32.back().get()};
  }
  // fp8: the GEMM input buffer x8 (none without fp8: kernels then write bf16).
  Fp8Rows x8_rows() const { return fp8 ? Fp8Rows{x8.get(), x8_scale.get()} : Fp8Rows{}; }
  // One linear layer: y[T, N] = x[T, K] . W^T, bf16 (x, w) or, with fp8, the e4m3 input already
  // in x8 (w8).
  void linear(const bf16* x, const bf16* w, Fp8Rows w8, bf16* y, int T, int N, int K) {
    if (fp8)
      gemm->linear_fp8({x8.get(), x8_scale.get()}, w8, y, T, N, K);
    else
      gemm->linear(x, w, y, T, N, K);
  }
  void random_tensor(bf16* dst, const std::string& name, std::size_t n, float scale, float offset);
  // workspace.cpp
  void allocate_workspace();
  void plan_kv_pool();
  void tune_decode_gemms();
  // The planner's limits (num_pages and scratch_pages once the KV pool is planned).
  StepLimits step_limits() const;
  // run.cpp
  StepResult step(const StepPlan& plan);
  void upload_step();
  std::vector<LayerSparseWork> upload_sparse_work();
  // graphs.cpp: replays (capturing on first use) the graph of layout.graph.
  void replay_graph();
  // forward.cpp: the layers over the metadata already in the device buffers.
  void forward(const ForwardArgs& a);
  void forward_layer(int l, const ForwardArgs& a);
  void decode_sparse_params(int l, int S_dec, int dec_max_slots, sparse::DecodeParams& dp) const;
  // Whether the sparse layers' score update of a step whose sparse decode rows attend at most
  // dec_max_slots slots reads the attention's logits (a function of host values a graph keys).
  bool fused_score_update(int dec_max_slots) const {
    return score_from_logits && dec_max_slots > 0 && dec_max_slots <= dec_logits_cols;
  }
  void copy_layer_taps(int l, int T, int S_dec, bool sp_dec);
  // logits.cpp
  void lm_logits(int n);  // lm_head rows -> logits[n][V] (all-gathered when tp > 1)
  // One lm chunk: the final RMSNorm of lm rows [base, base + n) (residual + the last layer's MLP
  // output), lm_logits(n), and with `argmax` the greedy argmax and log-partition of each row.
  void lm_chunk(int base, int n, bool argmax);
  void sample_and_collect(const StepPlan& plan, StepResult& result);
  // census.cpp: SeqResult::kept of the rows with report_kept (after sample_and_collect: the
  // step's work is done). One gather and one device -> host copy, only on such steps.
  void collect_kept(const StepPlan& plan, StepResult& result);
  // Its parts. plan_census: false when no row asks. queue_census: on the stream after the step's
  // work, the page list through `src` and the positions into `dst` (pinned, grown as needed; the
  // caller's, untouched by any step in flight). count_census: once that copy completed.
  bool plan_census(const StepPlan& plan, CensusWork& w) const;
  void queue_census(const CensusWork& w, PinnedArray<std::int32_t>& src,
                    PinnedArray<std::int32_t>& dst);
  void count_census(const CensusWork& w, const std::int32_t* host, StepResult& result) const;
};

}  // namespace strata::cuda

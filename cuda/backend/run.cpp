// The run half of a CUDA step: the plan (cuda/step_layout.h) stages everything in the pinned
// upload image; this file uploads it, launches the forward pass or replays its graph, and
// hands over to logits.cpp for the lm_head, sampling and results.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "cuda/backend/backend_impl.h"

namespace strata::cuda {

// Eager sparse work: the metadata image into the workspace (one upload) and the kernels'
// params pointing into it and its scratch (docs/cuda-backend.md "Sparse layers").
std::vector<LayerSparseWork> CudaBackendImpl::upload_sparse_work() {
  const SparseWorkLayout& sw = layout.sparse;
  std::vector<LayerSparseWork> work;
  if (!sw.any) return work;
  const int L = mc.num_hidden_layers;
  const std::vector<unsigned char>& meta = sw.meta;
  if (sp_ws.size() < sw.scratch.bytes) {
    sp_ws = DeviceArray<unsigned char>();  // no work in flight: step() syncs before returning
    sp_ws = DeviceArray<unsigned char>(sw.scratch.bytes + sw.scratch.bytes / 4);
  }
  if (sp_meta.size() < meta.size()) sp_meta = PinnedArray<unsigned char>(meta.size() * 2);
  if (!meta.empty()) std::memcpy(sp_meta.get(), meta.data(), meta.size());
  unsigned char* base = sp_ws.get();
  auto f32 = [&](std::size_t off) { return reinterpret_cast<float*>(base + off); };
  auto i32 = [&](std::size_t off) { return reinterpret_cast<std::int32_t*>(base + off); };
  const SparseScratch& sc = sw.scratch;
  work.resize(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    const SparseLayerWork& o = sw.layers[static_cast<std::size_t>(l)];
    sparse::PrefillParams& p = work[static_cast<std::size_t>(l)].pre;
    p.seqs = reinterpret_cast<const sparse::PrefillSeq*>(base + o.prefill_seqs);
    p.num_seqs = o.prefill_num_seqs;
    p.max_len = o.prefill_max_len;
    p.max_kept = o.prefill_max_kept;
    p.q_heads = mc.num_attention_heads;
    p.kv_heads = mc.num_key_value_heads;
    p.head_dim = mc.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
    p.q = qkv.get();
    p.q_stride = qkv_dim;
    p.lse = pre_lse.get();
    p.src_pool = kv_pool.get();
    p.scratch_pool = kv_pool.get();  // unused: scratch pages are pool pages (src_scratch 0)
    p.src_pages = i32(o.src_pages);
    p.dst_pool = kv_pool.get();
    p.dst_pages = i32(o.dst_pages);
    p.dst_scores = score_pool.get();
    p.dst_positions = pos_pool.get();
    p.page_elems = binfo.layout.page_elems();
    p.raw = f32(sc.raw);
    p.pooled = f32(sc.pooled);
    p.kept_idx = i32(sc.kept_idx);
    p.kept_score = f32(sc.kept_score);
    if (kv8) {  // FP8 KV: e4m3 pages (temp pages and scratch are pool pages too), fixed scales
      p.src_pool8 = kv_pool8.get();
      p.scratch_pool8 = kv_pool8.get();
      p.dst_pool8 = kv_pool8.get();
      p.kv_scales = layer_kv_scales(l);
    }
    sparse::ShrinkParams& q = work[static_cast<std::size_t>(l)].shr;
    q.seqs = reinterpret_cast<const sparse::ShrinkSeq*>(base + o.shrink_seqs);
    q.num_seqs = o.shrink_num_seqs;
    q.kv_heads = mc.num_key_value_heads;
    q.head_dim = mc.head_dim;
    q.pool = kv_pool.get();
    q.scores = score_pool.get();
    q.positions = pos_pool.get();
    q.pages = i32(o.shrink_pages);
    q.page_elems = binfo.layout.page_elems();
    q.stage_idx = i32(sc.stage_idx);
    q.stage_kv = reinterpret_cast<bf16*>(base + sc.stage_kv);
    q.stage_score = f32(sc.stage_score);
    q.stage_pos = i32(sc.stage_pos);
    if (kv8) {  // the bf16-sized staging holds the codes (half of it)
      q.pool8 = kv_pool8.get();
      q.stage_kv8 = base + sc.stage_kv;
    }
  }
  if (!meta.empty())
    CUDA_CHECK(cudaMemcpyAsync(base, sp_meta.get(), meta.size(), cudaMemcpyHostToDevice, stream));
  return work;
}

// The image's sections into the fixed device buffers the kernels (and graphs) read.
void CudaBackendImpl::upload_step() {
  const StepLayout& s = layout;
  const int L = mc.num_hidden_layers;
  const int T_run = s.run_rows, S_run = s.run_decode_rows;
  auto upload = [&](DeviceArray<int>& d, const std::int32_t* h, int n) {
    if (n > 0)
      CUDA_CHECK(cudaMemcpyAsync(d.get(), h, n * sizeof(int), cudaMemcpyHostToDevice, stream));
  };
  upload(d_tokens, image.tokens(), T_run);
  upload(d_pos, image.pos(), T_run);
  upload(d_seq_of, image.seq_of(), T_run);
  upload(d_q_row, image.q_row(), S_run);
  // Per-layer decode metadata: L rows of S_run entries, row pitch max_seqs.
  auto upload_layers = [&](void* d, const void* h, std::size_t elem) {
    if (S_run > 0)
      CUDA_CHECK(cudaMemcpy2DAsync(d, elem * max_seqs, h, elem * max_seqs, elem * S_run,
                                   static_cast<std::size_t>(L), cudaMemcpyHostToDevice, stream));
  };
  upload_layers(d_seq_len.get(), image.seq_len(), sizeof(int));
  upload_layers(d_slots.get(), image.slots(), sizeof(int));
  upload_layers(d_dec_seqs.get(), image.dec_seqs(), sizeof(sparse::DecodeSeq));
  upload(d_lm_rows, image.lm_rows(), s.run_lm_rows);
  // By table row (the order index without device tables).
  upload(d_row_start, image.row_start(), s.table_rows);
  upload(d_nq, image.nq(), s.table_rows);
  upload(d_qpos0, image.qpos0(), s.table_rows);
  upload(d_tile_seq, image.tile_seq(), s.tiles);
  upload(d_tile_q0, image.tile_q0(), s.tiles);
  upload_tables();  // tables.cpp
  // The prefill context an fp8 stage must hold this step (fp8_stage_params).
  step_table_rows = s.table_rows;
  step_ctx_pages = 0;
  step_ctx_max_pages = 0;
  if (kv8 && s.tiles > 0)
    for (int i = 0; i < s.table_rows; ++i) {
      const int n = image.nq()[i];
      if (n <= 0) continue;
      const int pages = (image.qpos0()[i] + n + kBlockSize - 1) / kBlockSize;
      step_ctx_pages += pages;
      step_ctx_max_pages = std::max(step_ctx_max_pages, pages);
    }
}

StepResult CudaBackendImpl::step(const StepPlan& plan) {
  const auto wall0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaSetDevice(device));
  StepResult result;
  result.step_id = plan.step_id;
  result.seqs.resize(plan.seqs.size());
  planner->build(plan,
                 StepOptions{.graphs = use_graphs,
                             .sparse_graphs = sparse_graphs,
                             .forced_splits = forced_splits,
                             .device_tables = device_tables},
                 image, layout);
  if (layout.num_seqs == 0) return result;
  try {
    run_layout(plan, result);
  } catch (...) {
    planner->forget_tables();  // the device tables may not hold what the plan assumed
    throw;
  }
  const double wall =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  result.stats.host_ms = std::max(0.0, wall - result.stats.device_ms);
  return result;
}

void CudaBackendImpl::launch_forward(const std::vector<LayerSparseWork>& work) {
  const int bucket = layout.graph.bucket;
  if (bucket > 0) {
    // decode graphs are captured with tiles = 0: no prefill epilogue (residual_in_gemm), the
    // decode fusion at buckets 1-2 (decode_fused)
    resid_in_gemm = decode_fused(bucket, 0);
    replay_graph();
  } else {
    forward({.rows = layout.rows,
             .decode_rows = layout.decode_rows,
             .tiles = layout.tiles,
             .splits = layout.eager_splits,
             .lm_rows = layout.lm_rows,
             .argmax = true,
             .work = work.empty() ? nullptr : &work,
             .sparse_decode = layout.sparse_decode,
             .dec_max_slots = layout.dec_max_slots});
  }
  tap_rows = bucket > 0 ? bucket : layout.rows;
  tap_dec_rows = bucket > 0 ? bucket : layout.decode_rows;
  tap_has_lse = layout.sparse_decode && tap_dec_rows > 0;
}

void CudaBackendImpl::run_layout(const StepPlan& plan, StepResult& result) {
  const std::vector<LayerSparseWork> work = upload_sparse_work();
  std::swap(ev1, ev1_prev);  // ev1_prev: the previous step's last device work
  CUDA_CHECK(cudaEventRecord(ev0, stream));
  upload_step();
  launch_forward(work);
  sample_and_collect(plan, result);
  collect_kept(plan, result);  // census.cpp: only rows with report_kept (none: no work)
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
  result.stats.device_ms = ms;
  if (prof_on) {  // ev1 completed, so did every event of this step's forward
    profile->collect(ms);
    prof_on = false;
  }
  if (have_prev_end) {  // both events completed: the previous step synchronised, this one too
    float gap = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&gap, ev1_prev, ev0));
    result.stats.device_gap_ms = std::max(0.0f, gap);
  }
  have_prev_end = true;
  result.stats.tokens = layout.rows;
  result.stats.table_bytes = layout.table_bytes;
}

}  // namespace strata::cuda

// The layers of one step over the metadata already in the device buffers (eager, or inside a
// graph capture), and the lm_head.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "cuda/attention.h"
#include "cuda/backend/backend_impl.h"
#include "cuda/env_switch.h"
#include "cuda/fp8.h"
#include "cuda/gemm_skinny_fused.h"
#include "cuda/kernels.h"
#include "cuda/kv_fp8.h"
#include "cuda/tp/collectives.h"
#include "cuda/tp/tp_backends.h"
#include "runtime/error.h"

namespace strata::cuda {

// cuda/step_layout.cpp caps its split counts with a copy of the limit (it includes no CUDA
// header).
static_assert(kMaxDecodeSplits == 64, "update kMaxSplits in cuda/step_layout.cpp");

int mixed_overlap_from_env() {
  const char* v = std::getenv("STRATA_MIXED_OVERLAP");
  const std::string s = v ? v : "";
  if (s.empty() || s == "0") return 0;
  if (s == "1") return 1;
  if (s == "2") return 2;
  if (s == "3") return 3;
  throw ConfigError("STRATA_MIXED_OVERLAP",
                    "'" + s +
                        "' is not one of: 0 (one stream), 1 (decode attention on a high-priority "
                        "side stream), 2 (on a default-priority side stream), 3 (on a green "
                        "context's SMs)");
}

bool sparse_side_from_env() {
  return env_switch("STRATA_SPARSE_SIDE", false,
                    "the scored layers' resolve and score update on a side stream",
                    "on the step's stream");
}

bool score_in_attention_from_env() {
  return env_switch("STRATA_SCORE_IN_ATTN", true,
                    "the score update inside the decode attention kernel where it applies",
                    "the update kernel");
}

bool resolve_in_rope_from_env() {
  return env_switch("STRATA_RESOLVE_IN_ROPE", true,
                    "the scored layers' ring resolve inside the RoPE + K/V write",
                    "its own kernel before it");
}

void CudaBackendImpl::sparse_side_fork() {
  CUDA_CHECK(cudaEventRecord(ev_sp_fork, stream));
  CUDA_CHECK(cudaStreamWaitEvent(side_sparse, ev_sp_fork, 0));
  sp_pending = true;
}

void CudaBackendImpl::sparse_side_join() {
  if (!sp_pending) return;
  CUDA_CHECK(cudaEventRecord(ev_sp_join, side_sparse));
  CUDA_CHECK(cudaStreamWaitEvent(stream, ev_sp_join, 0));
  sp_pending = false;
}

// Decode of sparse layers (docs/cuda-sparsity.md step 4): per-sequence DecodeSeqs of layer l
// (policy 0 for full layers and padding rows) in the decode batch order.
void CudaBackendImpl::decode_sparse_params(int l, int S_dec, int dec_max_slots,
                                           sparse::DecodeParams& dp) const {
  const std::size_t lrow = static_cast<std::size_t>(l) * max_seqs;
  dp.seqs = d_dec_seqs.get() + lrow;
  dp.num_seqs = S_dec;
  dp.max_slots = dec_max_slots;
  dp.q_heads = mc.num_attention_heads;
  dp.kv_heads = mc.num_key_value_heads;
  dp.head_dim = mc.head_dim;
  dp.scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
  dp.pool = kv_pool.get();
  dp.scores = score_pool.get();
  dp.positions = pos_pool.get();
  dp.pages = d_tables.get();
  dp.page_elems = static_cast<std::size_t>(binfo.layout.page_elems());
  dp.q = qkv.get();
  dp.q_stride = qkv_dim;
  dp.lse = dec_lse.get();
  if (kv8) {  // FP8 KV: the resolve moves codes, the update (without logits) reads them
    dp.pool8 = kv_pool8.get();
    dp.kv_scales = layer_kv_scales(l);
  }
}

// Test hook: layer l's attention inputs and outputs (capturable copies).
void CudaBackendImpl::copy_layer_taps(int l, int T, int S_dec, bool sp_dec) {
  const std::size_t lt = static_cast<std::size_t>(l) * max_tokens;
  CUDA_CHECK(cudaMemcpyAsync(tap_qkv.get() + lt * qkv_dim, qkv.get(),
                             static_cast<std::size_t>(T) * qkv_dim * sizeof(bf16),
                             cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(tap_attn.get() + lt * q_dim, attn.get(),
                             static_cast<std::size_t>(T) * q_dim * sizeof(bf16),
                             cudaMemcpyDeviceToDevice, stream));
  if (sp_dec)
    CUDA_CHECK(cudaMemcpyAsync(
        tap_lse.get() + static_cast<std::size_t>(l) * max_seqs * mc.num_attention_heads,
        dec_lse.get(), static_cast<std::size_t>(S_dec) * mc.num_attention_heads * sizeof(float),
        cudaMemcpyDeviceToDevice, stream));
}

// Layer l of the step: norm, QKV, RoPE + K/V write, decode and/or prefill attention (with the
// sparse work of the layer), O, norm, MLP; all-reduces when tp > 1.
void CudaBackendImpl::forward_layer(int l, const ForwardArgs& a) {
  const int T = a.rows, S_dec = a.decode_rows;
  const int H = mc.hidden_size, I = mc.intermediate_size, L = mc.num_hidden_layers;
  const float eps = static_cast<float>(mc.rms_norm_eps);
  const long long page_elems = static_cast<long long>(binfo.layout.page_elems());
  const float scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
  const LayerDev& w = layers[static_cast<std::size_t>(l)];
  const int* table = d_tables.get() + static_cast<std::size_t>(l) * pmax;
  const int table_stride = L * pmax;
  // dec_fused (1-2 row decode steps, STRATA_DECODE_FUSION): the four GEMMs of the layer carry
  // the norms, the SwiGLU and the residual adds (cuda/gemm_skinny_fused.h); the input norm runs
  // inside the qkv GEMM, which reads the fp32 residual.
  const bool pdl = decode_fusion >= 2;
  auto fused_gemm = [&](SkinnyFusedParams p) {
    p.T = T;
    p.eps = eps;
    p.pdl = pdl;
    launch_skinny_fused(p, stream);
  };
  const std::size_t lrow = static_cast<std::size_t>(l) * max_seqs;
  sparse::DecodeParams dp;
  const bool sp_dec = a.sparse_decode && S_dec > 0;
  // The resolve and the score update on side_sparse (backend_impl.h sparse_side).
  const bool side = sp_dec && sparse_side && !tp.comm && !prof_on;
  // `scored` with a full ring: the oldest ring token moves (or is dropped) BEFORE the new token
  // overwrites its slot. Reads only the pool, not this step's qkv: on the side stream beside the
  // qkv GEMM (forked after the input norm, which is on the critical path; after the previous
  // layer's update if one is queued there).
  auto side_resolve = [&] {
    if (!side) return;
    decode_sparse_params(l, S_dec, a.dec_max_slots, dp);
    sparse_side_fork();
    CUDA_CHECK(sparse::launch_scored_resolve(dp, side_sparse));
  };
  if (dec_fused) {
    side_resolve();
    fused_gemm({.w = w.qkv,
                .N = qkv_dim,
                .K = H,
                .in = SkinnyIn::kNorm,
                .resid_in = resid.get(),
                .gamma = w.input_norm,
                .y = qkv.get()});
    prof(KernelClass::kGemmQkv);
  } else {
    // resid_in_gemm: the previous layer's down GEMM already added its output to resid.
    launch_rmsnorm({.resid = resid.get(),
                    .delta = l == 0 || resid_in_gemm ? nullptr : delta.get(),
                    .weight = w.input_norm,
                    .out = normed.get(),
                    .rows = nullptr,
                    .num_rows = T,
                    .hidden = H,
                    .eps = eps,
                    .out8 = x8_rows(),
                    .out8_static = w.qkv_in,
                    .vec = vec_kernels},
                   stream);
    prof(KernelClass::kNorm);
    side_resolve();
    linear(normed.get(), w.qkv, w.qkv8, qkv.get(), T, qkv_dim, H);
    prof(KernelClass::kGemmQkv);
  }
  // The score update reads the attention's own logits (no pass over the kept K) when the
  // sparse rows fit the logits buffer; full-cache rows of the same layer write only its first
  // dec_logits_cols columns, which nothing reads.
  const bool fused = sp_dec && fused_score_update(a.dec_max_slots);
  // The resolve inside the RoPE + K/V write below (backend_impl.h resolve_in_rope).
  const bool rope_resolve = sp_dec && !side && resolve_in_rope;
  if (sp_dec) {
    if (!side) {
      decode_sparse_params(l, S_dec, a.dec_max_slots, dp);
      // `scored` with a full ring: the oldest ring token moves (or is dropped) BEFORE the new
      // token overwrites its slot. Reads only the pool, not this step's qkv.
      if (!rope_resolve) {
        CUDA_CHECK(sparse::launch_scored_resolve(dp, stream));
        prof(KernelClass::kSparse);
      }
    }
    if (fused) {
      dp.logits = dec_logits.get();
      dp.logits_stride = dec_logits_cols;
    }
  }
  // The resolve (and the previous layer's score update) before the K/V write.
  sparse_side_join();
  // Decode rows write K/V at LayerSlots::decode_slot() (= position on full layers). An fp8
  // pool (cache.kv_dtype fp8) takes e4m3 codes with this layer's scales (cuda/kv_fp8.h).
  const float* kvs = layer_kv_scales(l);  // fp8: [kv_heads][2]; else null
  const RopeKvParams rope{.qkv = qkv.get(),
                          .positions = d_pos.get(),
                          .seq_of = d_seq_of.get(),
                          .block_table = table,
                          .table_stride = table_stride,
                          .inv_freq = inv_freq.get(),
                          .kv_pool = kv_pool.get(),
                          .page_elems = page_elems,
                          .num_tokens = T,
                          .heads = mc.num_attention_heads,
                          .kv_heads = mc.num_key_value_heads,
                          .head_dim = mc.head_dim,
                          .slots = d_slots.get() + lrow,
                          .num_slot_rows = S_dec,
                          .vec = vec_kernels,
                          .resolve = {.seqs = rope_resolve ? dp.seqs : nullptr,
                                      .scores = dp.scores,
                                      .positions = dp.positions,
                                      .pages = dp.pages},
                          .cos_sin = rope_table.get(),
                          .table_positions = rope_table_positions};
  if (kv8)
    launch_rope_kv_write_fp8(rope, kv_pool8.get(), kvs, stream);
  else
    launch_rope_kv_write(rope, stream);
  prof(KernelClass::kRopeKv);
  const LayerSparseWork* lw = a.work ? &(*a.work)[static_cast<std::size_t>(l)] : nullptr;
  // Attention of layer l. Decode rows attend seq_len[l][b] slots: position + 1 on full
  // layers, the sparse layer's attended slots (C when the ring is full, else valid + 1).
  // Prefill rows attend through this layer's table: own pages (full / direct), temp pages
  // or scratch (sparse layer, prompt longer than C).
  // A mixed step (decode rows and prefill tiles) may run the decode attention and its score
  // update on a side stream beside the prefill attention (mixed_overlap, backend_impl.h): the
  // prefill is launched first; the two read the qkv and pool written above and write disjoint
  // rows of attn (and dec_lse / dec_logits / the decode rows' scores vs pre_lse).
  const bool overlap = mixed_overlap > 0 && S_dec > 0 && a.tiles > 0;
  cudaStream_t dec_stream = stream;
  if (overlap) {
    dec_stream = mixed_side_stream();
    CUDA_CHECK(cudaEventRecord(ev_fork, stream));
    CUDA_CHECK(cudaStreamWaitEvent(dec_stream, ev_fork, 0));
  }
  const bool sp_pre = lw && lw->pre.num_seqs > 0;
  const bool sp_shr = lw && lw->shr.num_seqs > 0;
  auto prefill_attention = [&] {
    launch_prefill_attention({.q = qkv.get(),
                              .q_stride = qkv_dim,
                              .kv_pool = kv_pool.get(),
                              .page_elems = page_elems,
                              .block_table = table,
                              .table_stride = table_stride,
                              .row_start = d_row_start.get(),
                              .nq = d_nq.get(),
                              .q_pos0 = d_qpos0.get(),
                              .tile_seq = d_tile_seq.get(),
                              .tile_q0 = d_tile_q0.get(),
                              .num_tiles = a.tiles,
                              .out = attn.get(),
                              .out_stride = q_dim,
                              .lse = sp_pre ? pre_lse.get() : nullptr,
                              .heads = mc.num_attention_heads,
                              .kv_heads = mc.num_key_value_heads,
                              .head_dim = mc.head_dim,
                              .scale = scale,
                              // fp8: the Hopper kernels over the bf16 stage of the context
                              // (attention.h fp8_stage), FA2 on the codes where it does not fit
                              .kv_pool8 = kv_pool8.get(),
                              .kv_scales = kvs,
                              .fp8_stage = fp8_stage_params()},
                             stream);
  };
  if (overlap) prefill_attention();
  DecodeAttentionParams dap{.q = qkv.get(),
                            .q_stride = qkv_dim,
                            .q_row = d_q_row.get(),
                            .kv_pool = kv_pool.get(),
                            .page_elems = page_elems,
                            .block_table = table,
                            .table_stride = table_stride,
                            .seq_len = d_seq_len.get() + lrow,
                            .batch = S_dec,
                            .num_splits = a.splits,
                            .part_o = part_o.get(),
                            .part_ml = part_ml.get(),
                            .out = attn.get(),
                            .out_stride = q_dim,
                            .lse = sp_dec ? dec_lse.get() : nullptr,
                            .logits = fused ? dec_logits.get() : nullptr,
                            .logits_stride = fused ? dec_logits_cols : 0,
                            .heads = mc.num_attention_heads,
                            .kv_heads = mc.num_key_value_heads,
                            .head_dim = mc.head_dim,
                            .scale = scale,
                            // fp8: the tensor-core kernel on e4m3 pages (attention.h)
                            .kv_pool8 = kv_pool8.get(),
                            .kv_scales = kvs};
  // The score update inside the attention kernel (backend_impl.h score_in_attention): its
  // logits stay in shared memory and no update kernel runs.
  const bool upd_in_attn =
      fused && score_in_attention && decode_attention_updates_scores(dap, a.dec_max_slots);
  if (upd_in_attn) {
    dap.logits = nullptr;
    dap.logits_stride = 0;
    dap.upd_seqs = dp.seqs;
    dap.upd_pages = dp.pages;
    dap.upd_scores = dp.scores;
    dap.upd_positions = dp.positions;
    dap.upd_cols = a.dec_max_slots;
  }
  if (S_dec > 0) launch_decode_attention(dap, dec_stream);
  if (S_dec > 0 && !overlap) prof(KernelClass::kAttnDecode);
  if (sp_dec && !upd_in_attn) {  // the update kernel (else the attention kernel did it)
    if (side && !overlap && !sp_pre && !sp_shr && !taps) {
      sparse_side_fork();  // after the decode attention's logits and LSE
      CUDA_CHECK(sparse::launch_scored_update(dp, side_sparse));
    } else {
      CUDA_CHECK(sparse::launch_scored_update(dp, dec_stream));
      if (!overlap) prof(KernelClass::kSparse);
    }
  }
  if (overlap) {  // the rest of the layer after both
    CUDA_CHECK(cudaEventRecord(ev_join, dec_stream));
    CUDA_CHECK(cudaStreamWaitEvent(stream, ev_join, 0));
    prof(KernelClass::kAttnMixed);
  } else if (a.tiles > 0) {
    prefill_attention();
    prof(KernelClass::kAttnPrefill);
  }
  // Sparse prefill (docs/cuda-sparsity.md steps 1-3): kSelect scores the window queries of
  // this chunk against the prompt in temp pages / scratch, selects and compacts into the
  // layer's pages; direct chunks advance the score averages.
  // Work on the rows the update writes: the update then ran on `stream` (above); a join in case.
  if (sp_pre || sp_shr || taps) sparse_side_join();
  if (sp_pre) CUDA_CHECK(sparse::launch_sparse_prefill(lw->pre, stream));
  // Live shrink after the layer's own work (step 5).
  if (sp_shr) CUDA_CHECK(sparse::launch_sparse_shrink(lw->shr, stream));
  if (sp_pre || sp_shr) prof(KernelClass::kSparse);
  if (taps) {
    copy_layer_taps(l, T, S_dec, sp_dec);
    prof(KernelClass::kTaps);
  }
  if (fp8) {
    launch_quantize_rows(attn.get(), q_dim, T, q_dim, x8_rows(), stream, w.o_in);
    prof(KernelClass::kQuantize);
  }
  if (dec_fused)  // resid += attn . W_o^T (fp32, in the skinny kernel's epilogue)
    fused_gemm({.w = w.o,
                .N = H,
                .K = q_dim,
                .in = SkinnyIn::kBf16,
                .x = attn.get(),
                .resid_out = resid.get()});
  else if (resid_in_gemm)  // the prefill epilogue (no tp, no fp8: residual_in_gemm)
    gemm->linear_residual(attn.get(), w.o, resid.get(), T, H, q_dim);
  else
    linear(attn.get(), w.o, w.o8, delta.get(), T, H, q_dim);
  prof(KernelClass::kGemmO);
  if (tp.comm) {
    tp.comm->all_reduce_bf16(delta.get(), static_cast<std::size_t>(T) * H, stream);
    prof(KernelClass::kAllReduce);
  }
  if (dec_fused) {  // post-attention norm + gate_up, then SwiGLU + down + residual
    fused_gemm({.w = w.gate_up,
                .N = 2 * I,
                .K = H,
                .in = SkinnyIn::kNorm,
                .resid_in = resid.get(),
                .gamma = w.post_norm,
                .y = gu.get()});
    prof(KernelClass::kGemmGateUp);
    fused_gemm({.w = w.down,
                .N = H,
                .K = I,
                .in = SkinnyIn::kSwiglu,
                .gu = gu.get(),
                .resid_out = resid.get()});
    prof(KernelClass::kGemmDown);
    return;
  }
  launch_rmsnorm({.resid = resid.get(),
                  .delta = resid_in_gemm ? nullptr : delta.get(),
                  .weight = w.post_norm,
                  .out = normed.get(),
                  .rows = nullptr,
                  .num_rows = T,
                  .hidden = H,
                  .eps = eps,
                  .out8 = x8_rows(),
                  .out8_static = w.gate_up_in,
                  .vec = vec_kernels},
                 stream);
  prof(KernelClass::kNorm);
  linear(normed.get(), w.gate_up, w.gate_up8, gu.get(), T, 2 * I, H);
  prof(KernelClass::kGemmGateUp);
  launch_swiglu({.gu = gu.get(),
                 .out = act.get(),
                 .num_tokens = T,
                 .inter = I,
                 .out8 = x8_rows(),
                 .out8_static = w.down_in,
                 .vec = vec_kernels},
                stream);
  prof(KernelClass::kSwiglu);
  if (resid_in_gemm)
    gemm->linear_residual(act.get(), w.down, resid.get(), T, H, I);
  else
    linear(act.get(), w.down, w.down8, delta.get(), T, H, I);
  prof(KernelClass::kGemmDown);
  if (tp.comm) {
    tp.comm->all_reduce_bf16(delta.get(), static_cast<std::size_t>(T) * H, stream);
    prof(KernelClass::kAllReduce);
  }
}

void CudaBackendImpl::forward(const ForwardArgs& a) {
  const int T = a.rows;
  const int H = mc.hidden_size, L = mc.num_hidden_layers;
  // One choice for every layer and the lm_head's final norm (lm_chunk) of this step.
  dec_fused = decode_fused(a.rows, a.tiles);
  resid_in_gemm = residual_in_gemm(a) || dec_fused;
  prof_on = false;
  if (profile) {  // never inside a graph capture (graphs.cpp runs forward() there too)
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
    prof_on = cs == cudaStreamCaptureStatusNone;
    if (prof_on) profile->begin(stream);
  }
  launch_embedding({.tokens = d_tokens.get(),
                    .embed = embed,
                    .resid = resid.get(),
                    .num_tokens = T,
                    .hidden = H},
                   stream);
  prof(KernelClass::kEmbedding);
  for (int l = 0; l < L; ++l) forward_layer(l, a);
  // Final norm only for the rows whose logits are needed (first chunk; logits.cpp runs the
  // others).
  lm_chunk(0, std::min(a.lm_rows, logit_rows), a.argmax);
  prof(KernelClass::kLmHead);
  sparse_side_join();  // the last layer's score update (beside the lm_head)
  // run.cpp collects once the step's last event completed; prof_on stays set until then.
}

}  // namespace strata::cuda

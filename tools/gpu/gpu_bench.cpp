// gpu_bench: microbenchmarks of the CUDA backend on the H200, as ratios to the measured
// ceilings (4.27 TB/s device copy, 769 TFLOP/s bf16 GEMM). Prints "FIGURE name value"
// lines (collected by tools/gpu/run.sh into figures.json) and a readable line per figure.
// Timing: CUDA events after warm-up, median of the runs. Not a test: it asserts nothing.
#include <cuda_bf16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "cache/kv_planner.h"
#include "cuda/attention.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/fp8.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/sampling.h"
#include "cuda/sparse/sparse_kernels.h"
#include "cuda/testing/backend_probe.h"
#include "cuda/testing/stream_probe.h"
#include "runtime/config.h"
#include "runtime/kv_layout.h"
#include "runtime/model/make_model.h"
#include "runtime/sparsity_profile.h"
#include "tools/gpu/bench_gemm_decode.h"
#include "tools/gpu/bench_mixed.h"

using namespace strata;
using namespace strata::cuda;

namespace {

constexpr double kCopyBw = 4.27e12, kBf16Flops = 769e12;

void figure(const std::string& name, double v) {
  std::printf("FIGURE %s %.6g\n", name.c_str(), v);
  std::fflush(stdout);
}

double median_ms(const std::function<void()>& f, int warm, int runs, cudaStream_t s = nullptr) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < runs; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

// Median ms of one replay of a graph captured from f() on the non-blocking stream s (f runs
// once eagerly first: plans and workspaces are made outside the capture).
double graph_median_ms(cudaStream_t s, const std::function<void()>& f, int warm, int runs) {
  f();
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  f();
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = median_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, s)); }, warm, runs, s);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return ms;
}

// Median ms of one launch when `reps` launches run back to back from one graph (f(s) captured
// `reps` times on the non-blocking stream s): the cost a kernel has inside the decode graphs,
// without the host's launch call and the GPU's launch latency that an event pair around a single
// eager launch also times.
double graph_per_launch_ms(const std::function<void(cudaStream_t)>& f, int reps, int warm,
                           int runs) {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double ms = graph_median_ms(
      s,
      [&] {
        for (int i = 0; i < reps; ++i) f(s);
      },
      warm, runs);
  CUDA_CHECK(cudaStreamDestroy(s));
  return ms / reps;
}

// STRATA_BENCH_NCU=tag[,tag...]: run f once more between cudaProfilerStart and cudaProfilerStop
// when `tag` is one of the listed tags, so that `ncu --profile-from-start off` profiles exactly
// those kernels (one decode step, one layer's GEMMs) and nothing of the set-up or the timing loops.
void ncu_window(const std::string& tag, const std::function<void()>& f) {
  const char* e = std::getenv("STRATA_BENCH_NCU");
  if (e == nullptr) return;
  const std::string list = std::string(",") + e + ",";
  if (list.find("," + tag + ",") == std::string::npos) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaProfilerStart());
  f();
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaProfilerStop());
  std::printf("ncu window: %s\n", tag.c_str());
}

// Median StepStats::device_ms of `runs` steps of the same plan after `warm` untimed ones.
double median_step_ms(Backend& be, const StepPlan& plan, int warm, int runs) {
  std::vector<double> t;
  for (int i = 0; i < warm + runs; ++i) {
    const StepResult r = be.step(plan);
    if (i >= warm) t.push_back(r.stats.device_ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void fill_random(bf16* p, std::size_t n, unsigned long long seed) {
  launch_random_fill({p, static_cast<long long>(n), seed, 0x1234567ull, 1.0f, 0.0f}, nullptr);
}

// with_logits: also write the scaled logits and the LSE, as a sparse layer's decode does for
// its fused score update (the bytes counted stay K + V).
void bench_decode_attention(int B, int len, bool with_logits = false) {
  const int heads = 32, kvh = 8, hd = 128;
  const KvLayout lay{kvh, hd, 2};
  const int ppseq = pages_for_slots(len);
  DeviceArray<bf16> pool(static_cast<std::size_t>(B) * ppseq * lay.page_elems());
  fill_random(pool.get(), pool.size(), 1);
  std::vector<int> table(static_cast<std::size_t>(B) * ppseq),
      lens(static_cast<std::size_t>(B), len), rows(static_cast<std::size_t>(B));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
  for (int b = 0; b < B; ++b) rows[static_cast<std::size_t>(b)] = b;
  DeviceArray<int> d_table(table.size()), d_len(lens.size()), d_rows(rows.size());
  CUDA_CHECK(cudaMemcpy(d_table.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_len.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_rows.get(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
  DeviceArray<bf16> q(static_cast<std::size_t>(B) * heads * hd), out(q.size());
  DeviceArray<float> logits(with_logits ? static_cast<std::size_t>(B) * heads * len : 0),
      lse(with_logits ? static_cast<std::size_t>(B) * heads : 0);
  fill_random(q.get(), q.size(), 2);
  // Two-pass kernel at 8 keys in flight (unroll), the pipelined kernel (-1), then the
  // tensor-core kernel in each (warps, stages) shape (-10 - mma_shape).
  for (int unroll : {8, -1, -10, -11, -12, -13, -14})
    for (int splits : {1, 2, 4}) {
      DeviceArray<float> po(static_cast<std::size_t>(B) * heads * splits * hd),
          pml(static_cast<std::size_t>(B) * heads * splits * 2);
      DecodeAttentionParams p{q.get(),
                              heads * hd,
                              d_rows.get(),
                              pool.get(),
                              static_cast<long long>(lay.page_elems()),
                              d_table.get(),
                              ppseq,
                              d_len.get(),
                              B,
                              splits,
                              po.get(),
                              pml.get(),
                              out.get(),
                              heads * hd,
                              with_logits ? lse.get() : nullptr,
                              with_logits ? logits.get() : nullptr,
                              with_logits ? len : 0,
                              heads,
                              kvh,
                              hd,
                              1.0f / std::sqrt(128.0f),
                              unroll > 0 ? unroll : 0};
      p.kernel = unroll == -1 ? kDecodePipelined : unroll < -1 ? kDecodeMma : kDecodeTwoPass;
      p.mma_shape = unroll < -1 ? -10 - unroll : 0;
      const std::string name = unroll == -1  ? std::string("pipelined")
                               : unroll < -1 ? "mma shape " + std::to_string(p.mma_shape)
                                             : "two-pass unroll=" + std::to_string(unroll);
      const std::string tag = unroll == -1  ? std::string("_pipe")
                              : unroll < -1 ? "_mma" + std::to_string(p.mma_shape)
                                            : "_u" + std::to_string(unroll);
      const double ms = median_ms([&] { launch_decode_attention(p, nullptr); }, 3, 20);
      // The same launch 8 times from one graph: its cost inside the decode graphs.
      const double gms =
          graph_per_launch_ms([&](cudaStream_t s) { launch_decode_attention(p, s); }, 8, 3, 20);
      const double bytes = static_cast<double>(B) * len * kvh * hd * 2 * 2;
      const double bw = bytes / (ms * 1e-3), gbw = bytes / (gms * 1e-3);
      std::printf(
          "decode attention B=%d len=%d 32/8 hd128 splits=%d %s%s: %.3f ms, %.3g GB KV, %.2f "
          "TB/s = %.1f%% of 4.27; in a graph of 8: %.4f ms, %.1f%% of 4.27\n",
          B, len, splits, name.c_str(), with_logits ? " +logits" : "", ms, bytes / 1e9, bw / 1e12,
          100 * bw / kCopyBw, gms, 100 * gbw / kCopyBw);
      const std::string key = "bench_decode_attn_b" + std::to_string(B) + "_s" +
                              std::to_string(splits) + tag + (with_logits ? "_logits" : "");
      figure(key + "_frac_copy_bw", bw / kCopyBw);
      figure(key + "_graph_frac_copy_bw", gbw / kCopyBw);
    }
}

// Issue 18 item 1 at a sparse layer's shape: a `scored` layer's decode attention with its score
// update (full ring of 32, window 32, every slot attended), one split, the tensor-core kernel
// in each (warps, stages) shape: (a) the logits written by the attention and read by the update
// kernel (two launches, timed together), (b) the update inside the attention kernel (the logits
// kept in shared memory; where decode_attention_updates_scores allows it). Bytes counted: K + V.
void bench_decode_attention_update(int B, int len) {
  const int heads = 32, kvh = 8, hd = 128, ring = 32;
  const KvLayout lay{kvh, hd, 2};
  const int ppseq = pages_for_slots(len);
  const std::size_t pages = static_cast<std::size_t>(B) * ppseq;
  DeviceArray<bf16> pool(pages * lay.page_elems());
  fill_random(pool.get(), pool.size(), 1);
  std::vector<int> table(pages), lens(static_cast<std::size_t>(B), len),
      rows(static_cast<std::size_t>(B));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
  std::vector<sparse::DecodeSeq> seqs(static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) {
    rows[static_cast<std::size_t>(b)] = b;
    sparse::DecodeSeq& d = seqs[static_cast<std::size_t>(b)];
    d.policy = 3;  // scored
    d.capacity = len, d.ring = ring, d.sinks = 4, d.window = 32, d.valid = len;
    d.ring_pos = b % ring, d.table = b * ppseq, d.q_row = b, d.position = 4096 + b;
  }
  auto up = [](const auto& v) {
    DeviceArray<std::remove_cvref_t<decltype(v[0])>> d(v.size());
    CUDA_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice));
    return d;
  };
  auto d_table = up(table), d_len = up(lens), d_rows = up(rows);
  auto d_seqs = up(seqs);
  DeviceArray<float> scores(pages * lay.score_elems()),
      logits(static_cast<std::size_t>(B) * heads * len), lse(static_cast<std::size_t>(B) * heads);
  DeviceArray<std::int32_t> positions(scores.size());
  CUDA_CHECK(cudaMemset(scores.get(), 0, scores.bytes()));
  CUDA_CHECK(cudaMemset(positions.get(), 0, positions.bytes()));
  DeviceArray<bf16> q(static_cast<std::size_t>(B) * heads * hd), out(q.size());
  fill_random(q.get(), q.size(), 2);
  DeviceArray<float> po(static_cast<std::size_t>(B) * heads * hd),
      pml(static_cast<std::size_t>(B) * heads * 2);
  const double bytes = static_cast<double>(B) * len * kvh * hd * 2 * 2;
  for (int shape = 0; shape <= 4; ++shape)
    for (const bool in_attn : {false, true}) {
      DecodeAttentionParams p{};
      p.q = q.get(), p.q_stride = heads * hd, p.q_row = d_rows.get(), p.kv_pool = pool.get();
      p.page_elems = static_cast<long long>(lay.page_elems());
      p.block_table = d_table.get(), p.table_stride = ppseq, p.seq_len = d_len.get();
      p.batch = B, p.num_splits = 1, p.part_o = po.get(), p.part_ml = pml.get();
      p.out = out.get(), p.out_stride = heads * hd, p.lse = lse.get();
      p.heads = heads, p.kv_heads = kvh, p.head_dim = hd, p.scale = 1.0f / std::sqrt(128.0f);
      p.kernel = kDecodeMma, p.mma_shape = shape;
      sparse::DecodeParams dp;
      dp.seqs = d_seqs.get(), dp.num_seqs = B, dp.max_slots = len, dp.q_heads = heads;
      dp.kv_heads = kvh, dp.head_dim = hd, dp.scale = p.scale, dp.pool = pool.get();
      dp.scores = scores.get(), dp.positions = positions.get(), dp.pages = d_table.get();
      dp.page_elems = lay.page_elems(), dp.q = q.get(), dp.lse = lse.get();
      dp.logits = logits.get(), dp.logits_stride = len;
      if (in_attn) {
        if (!decode_attention_updates_scores(p, len)) {
          std::printf(
              "decode attention B=%d len=%d mma shape %d: no in-kernel update (shared "
              "memory)\n",
              B, len, shape);
          continue;
        }
        p.upd_seqs = d_seqs.get(), p.upd_pages = d_table.get(), p.upd_scores = scores.get();
        p.upd_positions = positions.get(), p.upd_cols = len;
      } else {
        p.logits = logits.get(), p.logits_stride = len;
      }
      const auto run = [&](cudaStream_t s) {
        launch_decode_attention(p, s);
        if (!in_attn) CUDA_CHECK(sparse::launch_scored_update(dp, s));
      };
      // Eager (an event pair around one launch, the figure of the earlier sessions), then 8
      // launches back to back from one graph (the decode graphs' cost per launch).
      const double ms = median_ms([&] { run(nullptr); }, 3, 20);
      const double gms = graph_per_launch_ms(run, 8, 3, 20);
      const double bw = bytes / (ms * 1e-3), gbw = bytes / (gms * 1e-3);
      std::printf(
          "decode attention B=%d len=%d 32/8 hd128 splits=1 mma shape %d + score update %s: "
          "%.3f ms, %.3g GB KV, %.2f TB/s = %.1f%% of 4.27; in a graph of 8: %.4f ms, %.2f TB/s "
          "= %.1f%% of 4.27\n",
          B, len, shape, in_attn ? "in the attention kernel" : "(logits + update kernel)", ms,
          bytes / 1e9, bw / 1e12, 100 * bw / kCopyBw, gms, gbw / 1e12, 100 * gbw / kCopyBw);
      const std::string key = "bench_decode_attn_b" + std::to_string(B) + "_s1_mma" +
                              std::to_string(shape) +
                              (in_attn ? "_update_in_attn" : "_update_kernel");
      figure(key + "_frac_copy_bw", bw / kCopyBw);
      figure(key + "_graph_frac_copy_bw", gbw / kCopyBw);
    }
}

// FP8 KV (cache.kv_dtype fp8): decode attention over e4m3 pages of random finite codes (both
// signs; scales 1/64), the tensor-core kernel in each (warps, stages) shape and the two-pass
// kernel for A/B, 1/2/4 splits; bytes counted are the FP8 K + V bytes (1 per element).
void bench_decode_attention_fp8(int B, int len) {
  const int heads = 32, kvh = 8, hd = 128;
  const KvLayout lay{kvh, hd, 1};
  const int ppseq = pages_for_slots(len);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(B) * ppseq * lay.page_bytes());
  unsigned long long x = 0x9E3779B97F4A7C15ull;
  for (std::size_t i = 0; i < codes.size(); i += 8) {  // splitmix64, 8 codes per draw
    unsigned long long z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (std::size_t k = 0; k < 8 && i + k < codes.size(); ++k) {
      const auto c = static_cast<std::uint8_t>(z >> (8 * k));
      codes[i + k] = (c & 0x7F) == 0x7F ? static_cast<std::uint8_t>(c ^ 1) : c;  // no NaN code
    }
  }
  DeviceArray<std::uint8_t> pool(codes.size());
  CUDA_CHECK(cudaMemcpy(pool.get(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
  const std::vector<float> scales(static_cast<std::size_t>(kvh) * 2, 1.0f / 64);
  std::vector<int> table(static_cast<std::size_t>(B) * ppseq),
      lens(static_cast<std::size_t>(B), len), rows(static_cast<std::size_t>(B));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
  for (int b = 0; b < B; ++b) rows[static_cast<std::size_t>(b)] = b;
  DeviceArray<int> d_table(table.size()), d_len(lens.size()), d_rows(rows.size());
  DeviceArray<float> d_scales(scales.size());
  CUDA_CHECK(cudaMemcpy(d_table.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_len.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_rows.get(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_scales.get(), scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
  DeviceArray<bf16> q(static_cast<std::size_t>(B) * heads * hd), out(q.size());
  fill_random(q.get(), q.size(), 2);
  for (int shape : {0, 1, 2, 3, 4, -1})  // -1: the two-pass kernel
    for (int splits : {1, 2, 4}) {
      DeviceArray<float> po(static_cast<std::size_t>(B) * heads * splits * hd),
          pml(static_cast<std::size_t>(B) * heads * splits * 2);
      DecodeAttentionParams p{};
      p.q = q.get();
      p.q_stride = heads * hd;
      p.q_row = d_rows.get();
      p.page_elems = static_cast<long long>(lay.page_elems());
      p.block_table = d_table.get();
      p.table_stride = ppseq;
      p.seq_len = d_len.get();
      p.batch = B;
      p.num_splits = splits;
      p.part_o = po.get();
      p.part_ml = pml.get();
      p.out = out.get();
      p.out_stride = heads * hd;
      p.heads = heads;
      p.kv_heads = kvh;
      p.head_dim = hd;
      p.scale = 1.0f / std::sqrt(128.0f);
      p.kernel = shape < 0 ? kDecodeTwoPass : kDecodeMma;
      p.mma_shape = shape < 0 ? 0 : shape;
      p.kv_pool8 = pool.get();
      p.kv_scales = d_scales.get();
      const double ms = median_ms([&] { launch_decode_attention(p, nullptr); }, 3, 20);
      const double bytes = static_cast<double>(B) * len * kvh * hd * 2;  // K + V, 1 byte each
      const double bw = bytes / (ms * 1e-3);
      const std::string name =
          shape < 0 ? std::string("two-pass") : "mma shape " + std::to_string(shape);
      std::printf(
          "decode attention fp8 KV B=%d len=%d 32/8 hd128 splits=%d %s: %.3f ms, %.3g GB KV, "
          "%.2f TB/s = %.1f%% of 4.27\n",
          B, len, splits, name.c_str(), ms, bytes / 1e9, bw / 1e12, 100 * bw / kCopyBw);
      figure("bench_decode_attn_fp8_b" + std::to_string(B) + "_s" + std::to_string(splits) +
                 (shape < 0 ? std::string("_two_pass") : "_mma" + std::to_string(shape)) +
                 "_frac_copy_bw",
             bw / kCopyBw);
    }
}

// Causal prefill attention, Llama-3-8B heads (32/8, hd128): B sequences of `len` query tokens
// after `prior` tokens of paged context (chunked prefill when prior > 0), every kernel.
// FLOPs: 4 * heads * hd * len * (prior + len / 2) per sequence (causal inside the chunk).
// STRATA_ATTN_KERNELS=name,name,... (prefill_kernel_name's names) restricts which prefill
// kernels run here (unset or empty: all) - e.g. to rerun without a variant that failed or hung.
bool prefill_kernel_selected(PrefillKernel k) {
  const char* v = std::getenv("STRATA_ATTN_KERNELS");
  if (!v || !*v) return true;
  const std::string list = std::string(",") + v + ",";
  return list.find(std::string(",") + prefill_kernel_name(k) + ",") != std::string::npos;
}

void bench_prefill_attention(int B, int len, int prior = 0) {
  const int heads = 32, kvh = 8, hd = 128;
  const KvLayout lay{kvh, hd, 2};
  const int ppseq = pages_for_slots(prior + len);
  DeviceArray<bf16> pool(static_cast<std::size_t>(B) * ppseq * lay.page_elems());
  fill_random(pool.get(), pool.size(), 3);
  std::vector<int> table(static_cast<std::size_t>(B) * ppseq), rs(static_cast<std::size_t>(B)),
      nq(static_cast<std::size_t>(B), len), p0(static_cast<std::size_t>(B), prior), ts, tq;
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int>(i);
  for (int b = 0; b < B; ++b) {
    rs[static_cast<std::size_t>(b)] = b * len;
    for (int q0 = 0; q0 < len; q0 += 64) ts.push_back(b), tq.push_back(q0);
  }
  auto up = [](const std::vector<int>& v) {
    DeviceArray<int> d(v.size());
    CUDA_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return d;
  };
  auto d_table = up(table), d_rs = up(rs), d_nq = up(nq), d_p0 = up(p0), d_ts = up(ts),
       d_tq = up(tq);
  const std::size_t T = static_cast<std::size_t>(B) * len;
  DeviceArray<bf16> q(T * heads * hd), out(q.size());
  DeviceArray<float> lse(T * heads);
  fill_random(q.get(), q.size(), 4);
  PrefillAttentionParams p{q.get(),
                           heads * hd,
                           pool.get(),
                           static_cast<long long>(lay.page_elems()),
                           d_table.get(),
                           ppseq,
                           d_rs.get(),
                           d_nq.get(),
                           d_p0.get(),
                           d_ts.get(),
                           d_tq.get(),
                           static_cast<int>(ts.size()),
                           out.get(),
                           heads * hd,
                           lse.get(),
                           heads,
                           kvh,
                           hd,
                           1.0f / std::sqrt(128.0f)};
  const double flops = 4.0 * B * heads * hd * static_cast<double>(len) * (prior + len / 2.0);
  for (const PrefillKernel kern :
       {PrefillKernel::kFa2, PrefillKernel::kFa2Single, PrefillKernel::kWmma,
        PrefillKernel::kHopper, PrefillKernel::kHopperV5, PrefillKernel::kHopperV6}) {
    if (!prefill_kernel_selected(kern)) continue;
    const double ms = median_ms([&] { launch_prefill_attention(p, nullptr, kern); }, 2, 10);
    const double tf = flops / (ms * 1e-3);
    std::printf(
        "prefill attention (%s) causal B=%d len=%d prior=%d 32/8 hd128: %.3f ms, %.3g TFLOP, "
        "%.1f TFLOP/s = %.1f%% of 769\n",
        prefill_kernel_name(kern), B, len, prior, ms, flops / 1e12, tf / 1e12,
        100 * tf / kBf16Flops);
    // The FA2 kernel (the default) keeps the historical figure name.
    const std::string suffix =
        kern == PrefillKernel::kFa2 ? "" : std::string("_") + prefill_kernel_name(kern);
    const std::string shape = prior > 0 ? "chunk" + std::to_string(len) + "_prior" +
                                              std::to_string(prior) + "_b" + std::to_string(B)
                                        : "b" + std::to_string(B);
    figure("bench_prefill_attn_" + shape + suffix + "_tflops", tf / 1e12);
  }
}

// skinny: Gemm's own kernel for 1..kSkinnyMaxRows rows (cuda/gemm_skinny.cu) or cuBLAS.
void bench_gemm(int T, bool skinny = false) {
  const int H = 4096, I = 14336;
  struct Shape {
    int N, K;
  };
  const Shape shapes[] = {{6144, H}, {H, H}, {2 * I, H}, {H, I}};
  cudaStream_t s = nullptr;
  Gemm g(s);
  g.set_skinny(skinny);
  double bytes = 0;
  std::vector<DeviceArray<bf16>> ws;
  DeviceArray<bf16> x(static_cast<std::size_t>(T) * I), y(static_cast<std::size_t>(T) * 2 * I);
  fill_random(x.get(), x.size(), 5);
  for (const auto& sh : shapes) {
    ws.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
    fill_random(ws.back().get(), ws.back().size(), 6);
    bytes += 2.0 * sh.N * sh.K;
  }
  const double ms = median_ms(
      [&] {
        for (std::size_t i = 0; i < 4; ++i)
          g.linear(x.get(), ws[i].get(), y.get(), T, shapes[i].N, shapes[i].K);
      },
      3, 20);
  const double bw = bytes / (ms * 1e-3);
  std::printf("layer GEMMs (%s) T=%d: %.3f ms for %.3g GB of weights, %.2f TB/s = %.1f%% of 4.27\n",
              skinny ? "skinny" : "cuBLAS", T, ms, bytes / 1e9, bw / 1e12, 100 * bw / kCopyBw);
  figure("bench_layer_gemms_t" + std::to_string(T) + (skinny ? "_skinny" : "") + "_frac_copy_bw",
         bw / kCopyBw);
}

// FP8 (W8A8, issue 20) layer GEMMs of the 8B shape through Gemm::linear_fp8 beside bf16's
// Gemm::linear at the same rows: weights read (e4m3 codes + fp32 scales) against the copy
// ceiling, and TFLOP/s (2 T N K) for the prefill-sized rows. Random weights and activations,
// quantized on the device.
void bench_gemm_fp8() {
  const int H = 4096, I = 14336;
  struct Shape {
    int N, K;
  };
  const Shape shapes[] = {{6144, H}, {H, H}, {2 * I, H}, {H, I}};
  cudaStream_t s = nullptr;
  Gemm g(s);
  g.enable_fp8();
  const int max_t = 4000;
  DeviceArray<bf16> xb(static_cast<std::size_t>(max_t) * I),
      y(static_cast<std::size_t>(max_t) * 2 * I);
  fill_random(xb.get(), xb.size(), 5);
  DeviceArray<std::uint8_t> xc(xb.size());
  DeviceArray<float> xs(static_cast<std::size_t>(max_t));
  launch_quantize_rows(xb.get(), I, max_t, I, {xc.get(), xs.get()}, s);
  std::vector<DeviceArray<bf16>> wb;
  std::vector<DeviceArray<std::uint8_t>> wc;
  std::vector<DeviceArray<float>> wsc;
  double bytes8 = 0, bytes16 = 0, nk = 0;
  for (const auto& sh : shapes) {
    wb.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
    fill_random(wb.back().get(), wb.back().size(), 6);
    wc.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
    wsc.emplace_back(static_cast<std::size_t>(sh.N));
    launch_quantize_rows(wb.back().get(), sh.K, sh.N, sh.K, {wc.back().get(), wsc.back().get()}, s);
    bytes8 += 1.0 * sh.N * sh.K + 4.0 * sh.N;
    bytes16 += 2.0 * sh.N * sh.K;
    nk += 1.0 * sh.N * sh.K;
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto time4 = [&](int T, Gemm::Fp8Path path) {
    g.set_fp8_path(path);
    const double ms = median_ms(
        [&] {
          for (std::size_t i = 0; i < 4; ++i)
            g.linear_fp8({xc.get(), xs.get()}, {wc[i].get(), wsc[i].get()}, y.get(), T, shapes[i].N,
                         shapes[i].K);
        },
        3, T >= 1000 ? 10 : 20);
    g.set_fp8_path(Gemm::Fp8Path::kAuto);
    return ms;
  };
  for (int T : {1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 4000}) {
    const double ms16 = median_ms(
        [&] {
          for (std::size_t i = 0; i < 4; ++i)
            g.linear(xb.get(), wb[i].get(), y.get(), T, shapes[i].N, shapes[i].K);
        },
        3, T >= 1000 ? 10 : 20);
    const double bw16 = bytes16 / (ms16 * 1e-3), tf16 = 2.0 * T * nk / (ms16 * 1e-3);
    std::printf("layer GEMMs T=%d bf16: %.3f ms, %.1f%% of 4.27, %.0f TFLOP/s\n", T, ms16,
                100 * bw16 / kCopyBw, tf16 / 1e12);
    double best = 1e30;
    for (auto [path, label] :
         {std::pair{Gemm::Fp8Path::kCores, "cores"}, std::pair{Gemm::Fp8Path::kMma, "mma"},
          std::pair{Gemm::Fp8Path::kMmaWide, "mma-wide"}, std::pair{Gemm::Fp8Path::kLt, "cublasLt"},
          std::pair{Gemm::Fp8Path::kWgmma, "wgmma"}, std::pair{Gemm::Fp8Path::kWarpK, "warpk"},
          std::pair{Gemm::Fp8Path::kAuto, "warpk-nopdl"}}) {
      // warpk-nopdl: the split-K-in-block kernel launched without programmatic dependent launch
      // (the A/B of what PDL's overlap of consecutive GEMMs wins); kAuto is only its label here.
      const bool nopdl = path == Gemm::Fp8Path::kAuto;
      if (nopdl) path = Gemm::Fp8Path::kWarpK;
      if (path == Gemm::Fp8Path::kWarpK &&
          (T > kWarpKFp8MaxRows ||
           !warpk_fp8_applies(xc.get(), wc[0].get(), T, shapes[0].N, shapes[0].K)))
        continue;
      if (path == Gemm::Fp8Path::kCores && T > kSkinnyFp8MaxRows) continue;
      // The Hopper decode GEMM's e4m3 variant (1..256 rows; not yet run on a GPU when written):
      // its own line and figure, kept out of `best` until it has been validated.
      const bool wg = path == Gemm::Fp8Path::kWgmma;
      if (wg && (T > kDecodeGemmMaxRows ||
                 !decode_gemm_fp8_applies(xc.get(), wc[0].get(), T, shapes[0].N, shapes[0].K)))
        continue;
      if ((path == Gemm::Fp8Path::kMma || path == Gemm::Fp8Path::kMmaWide) && T > kSmallFp8MaxRows)
        continue;
      g.set_fp8_pdl(!nopdl);
      const double ms8 = time4(T, path);
      g.set_fp8_pdl(true);
      if (!wg) best = std::min(best, ms8);
      const double bw8 = bytes8 / (ms8 * 1e-3), tf8 = 2.0 * T * nk / (ms8 * 1e-3);
      std::printf(
          "layer GEMMs T=%d fp8 %-8s: %.3f ms, weights %.2f TB/s = %.1f%% of 4.27, %.0f TFLOP/s, "
          "%.2fx bf16%s\n",
          T, label, ms8, bw8 / 1e12, 100 * bw8 / kCopyBw, tf8 / 1e12, ms16 / ms8,
          path == Gemm::Fp8Path::kLt && !g.fp8_outer_vec() ? " (fallback)" : "");
      figure("bench_fp8_layer_gemms_t" + std::to_string(T) + "_" + label + "_frac_copy_bw",
             bw8 / kCopyBw);
    }
    const std::string key = "bench_fp8_layer_gemms_t" + std::to_string(T);
    figure(key + "_best_frac_copy_bw", bytes8 / (best * 1e-3) / kCopyBw);
    figure(key + "_best_tflops", 2.0 * T * nk / (best * 1e-3) / 1e12);
    figure(key + "_best_speedup_vs_bf16", ms16 / best);
  }
  std::printf("cuBLASLt outer-vector FP8 scales: %s\n",
              g.fp8_outer_vec() ? "yes" : "no (fallback)");
}

// gpu_bench copy: the device-to-device copy ceiling of this GPU (bytes read + written per
// second, 1 GiB copies, median of 20): 4.27 TB/s on the H200 of GPU.md; the ratio figures of the
// other benches stay against that number, so a run on another card prints its own here.
void bench_copy() {
  const std::size_t n = std::size_t{1} << 30;
  DeviceArray<std::uint8_t> a(n), b(n);
  CUDA_CHECK(cudaMemset(a.get(), 1, n));
  const double ms = median_ms(
      [&] { CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice)); }, 3, 20);
  const double tbs = 2.0 * static_cast<double>(n) / (ms * 1e-3) / 1e12;
  std::printf("device copy 1 GiB: %.3f ms, %.3f TB/s (read + write) = %.1f%% of the H200's 4.27\n",
              ms, tbs, 100 * tbs * 1e12 / kCopyBw);
  figure("bench_copy_tbs", tbs);
}

// gpu_bench stream-probe (issue 20 item 2, issue 18): the small-row GEMMs' weight access
// patterns with no arithmetic (cuda/testing/stream_probe.h), as % of the 4.27 TB/s copy ceiling,
// over the 8B gate_up shape (117 MB of e4m3 codes: one launch reads more than the L2 holds) and
// over 8 distinct o_proj-sized matrices (16.8 MB each) read in turn, each launch from a graph of
// back-to-back launches: what a GEMM's W stream can reach, and what a short GEMM loses to its
// start and its tail.
void bench_stream_probe() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int H = 4096, I = 14336;
  const std::size_t big = static_cast<std::size_t>(2 * I) * H,
                    small = static_cast<std::size_t>(H) * H;
  const int nsmall = 8;
  DeviceArray<std::uint8_t> wbig(big), wsmall(small * nsmall);
  DeviceArray<unsigned> sink(static_cast<std::size_t>(2 * I));
  launch_random_fill({reinterpret_cast<bf16*>(wbig.get()), static_cast<long long>(big / 2), 11,
                      0x1234567ull, 1.0f, 0.0f},
                     s);
  launch_random_fill({reinterpret_cast<bf16*>(wsmall.get()),
                      static_cast<long long>(small * nsmall / 2), 12, 0x1234567ull, 1.0f, 0.0f},
                     s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  const auto report = [&](const std::string& label,
                          const std::function<void(const std::uint8_t*, int, int)>& run) {
    const double ms_big = graph_median_ms(
                              s,
                              [&] {
                                for (int i = 0; i < 4; ++i) run(wbig.get(), 2 * I, H);
                              },
                              2, 7) /
                          4;
    const double ms_small = graph_median_ms(
                                s,
                                [&] {
                                  for (int i = 0; i < 2 * nsmall; ++i)
                                    run(wsmall.get() + small * (i % nsmall), H, H);
                                },
                                2, 7) /
                            (2 * nsmall);
    const double f_big = big / (ms_big * 1e-3) / kCopyBw,
                 f_small = small / (ms_small * 1e-3) / kCopyBw;
    std::printf("stream %-16s 117 MB: %7.2f us %5.1f%% of 4.27 | 16.8 MB: %6.2f us %5.1f%%\n",
                label.c_str(), 1e3 * ms_big, 100 * f_big, 1e3 * ms_small, 100 * f_small);
    std::string key = label;
    for (char& c : key)
      if (c == ' ') c = '_';
    figure("bench_stream_" + key + "_big_frac_copy_bw", f_big);
    figure("bench_stream_" + key + "_small_frac_copy_bw", f_small);
  };
  for (int f : {2, 4, 8})
    report("ldg f" + std::to_string(f), [&](const std::uint8_t* w, int N, int K) {
      testing::launch_ldg_probe(w, N, K, f, sink.get(), s);
    });
  const testing::TmaProbeShape shapes[] = {{128, 1, 8}, {128, 1, 12}, {128, 1, 4}, {128, 2, 4},
                                           {128, 2, 6}, {64, 4, 4},   {64, 2, 8},  {256, 1, 6}};
  for (const auto& sh : shapes) {
    report(testing::tma_probe_name(sh), [&](const std::uint8_t* w, int N, int K) {
      testing::launch_tma_probe(w, N, K, sh, 0, sink.get(), s);
    });
    if (testing::tma_probe_blocks_per_sm(sh) == 1)  // the same shape with 2 x SMs blocks: 2 waves
      continue;
    report(testing::tma_probe_name(sh) + " 1/sm", [&](const std::uint8_t* w, int N, int K) {
      testing::launch_tma_probe(w, N, K, sh, 132, sink.get(), s);
    });
  }
  CUDA_CHECK(cudaStreamDestroy(s));
}

// gpu_bench gemm-fp8-graph (issue 20 item 2): one 8B layer's four GEMMs per FP8 path and row
// count as the decode step runs them, from a CUDA graph (4 layers' worth per replay: no launch
// gaps from the host, PDL edges kept), beside bf16 through the same Gemm. The eager figures are
// gemm-fp8's.
void bench_gemm_fp8_graph() {
  const int H = 4096, I = 14336;
  struct Shape {
    int N, K;
  };
  const Shape shapes[] = {{6144, H}, {H, H}, {2 * I, H}, {H, I}};
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    Gemm g(s);
    g.enable_fp8();
    const int max_t = 256;
    DeviceArray<bf16> xb(static_cast<std::size_t>(max_t) * I),
        y(static_cast<std::size_t>(max_t) * 2 * I);
    launch_random_fill({xb.get(), static_cast<long long>(xb.size()), 5, 0x1234567ull, 1.0f, 0.0f},
                       s);
    DeviceArray<std::uint8_t> xc(xb.size());
    DeviceArray<float> xs(static_cast<std::size_t>(max_t));
    launch_quantize_rows(xb.get(), I, max_t, I, {xc.get(), xs.get()}, s);
    std::vector<DeviceArray<bf16>> wb;
    std::vector<DeviceArray<std::uint8_t>> wc;
    std::vector<DeviceArray<float>> wsc;
    double bytes8 = 0, bytes16 = 0;
    for (const auto& sh : shapes) {
      wb.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
      launch_random_fill(
          {wb.back().get(), static_cast<long long>(wb.back().size()), 6, 0x1234567ull, 1.0f, 0.0f},
          s);
      wc.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
      wsc.emplace_back(static_cast<std::size_t>(sh.N));
      launch_quantize_rows(wb.back().get(), sh.K, sh.N, sh.K, {wc.back().get(), wsc.back().get()},
                           s);
      bytes8 += 1.0 * sh.N * sh.K + 4.0 * sh.N;
      bytes16 += 2.0 * sh.N * sh.K;
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    constexpr int kLayers = 4;
    for (int T : {1, 8, 16, 32, 64, 128, 256}) {
      // One layer's four GEMMs; a graph replays kLayers of them (the same matrices: 218 MB of
      // e4m3 / 436 MB of bf16 between two reads of one, far above the 50 MB L2).
      const auto layer16 = [&] {
        for (std::size_t i = 0; i < 4; ++i)
          g.linear(xb.get(), wb[i].get(), y.get(), T, shapes[i].N, shapes[i].K);
      };
      const auto layer8 = [&] {
        for (std::size_t i = 0; i < 4; ++i)
          g.linear_fp8({xc.get(), xs.get()}, {wc[i].get(), wsc[i].get()}, y.get(), T, shapes[i].N,
                       shapes[i].K);
      };
      const auto layers = [&](const std::function<void()>& layer) {
        return graph_median_ms(
                   s,
                   [&] {
                     for (int l = 0; l < kLayers; ++l) layer();
                   },
                   2, 7) /
               kLayers;
      };
      const double ms16 = layers(layer16);
      ncu_window("fp8g_t" + std::to_string(T) + "_bf16", layer16);
      std::printf("graph layer GEMMs T=%d bf16       : %.3f ms, %.1f%% of 4.27\n", T, ms16,
                  100 * bytes16 / (ms16 * 1e-3) / kCopyBw);
      figure("bench_fp8g_layer_gemms_t" + std::to_string(T) + "_bf16_frac_copy_bw",
             bytes16 / (ms16 * 1e-3) / kCopyBw);
      for (auto [path, label] :
           {std::pair{Gemm::Fp8Path::kCores, "cores"}, std::pair{Gemm::Fp8Path::kMma, "mma"},
            std::pair{Gemm::Fp8Path::kLt, "cublasLt"}, std::pair{Gemm::Fp8Path::kWgmma, "wgmma"},
            std::pair{Gemm::Fp8Path::kWarpK, "warpk"},
            std::pair{Gemm::Fp8Path::kAuto, "wgmma-nopdl"}}) {
        // wgmma-nopdl: the decode GEMM launched without programmatic dependent launch (kAuto is
        // only its label here).
        const bool nopdl = path == Gemm::Fp8Path::kAuto;
        if (nopdl) path = Gemm::Fp8Path::kWgmma;
        if (path == Gemm::Fp8Path::kCores && T > kSkinnyFp8MaxRows) continue;
        if (path == Gemm::Fp8Path::kMma && T > kSmallFp8MaxRows) continue;
        if (path == Gemm::Fp8Path::kWarpK && T > kWarpKFp8MaxRows) continue;
        if (path == Gemm::Fp8Path::kWgmma &&
            !decode_gemm_fp8_applies(xc.get(), wc[0].get(), T, shapes[0].N, shapes[0].K))
          continue;
        g.set_fp8_path(path);
        g.set_fp8_pdl(!nopdl);
        const double ms8 = layers(layer8);
        ncu_window("fp8g_t" + std::to_string(T) + "_" + label, layer8);
        g.set_fp8_path(Gemm::Fp8Path::kAuto);
        g.set_fp8_pdl(true);
        const double f8 = bytes8 / (ms8 * 1e-3) / kCopyBw;
        std::printf("graph layer GEMMs T=%d fp8 %-8s: %.3f ms, %.1f%% of 4.27, %.2fx bf16\n", T,
                    label, ms8, 100 * f8, ms16 / ms8);
        figure("bench_fp8g_layer_gemms_t" + std::to_string(T) + "_" + label + "_frac_copy_bw", f8);
      }
    }
  }
  CUDA_CHECK(cudaStreamDestroy(s));
}

// Device sampler (cuda/sampling.h): one launch over batch-64 rows of the Llama-3 vocabulary,
// per parameter set (the rows are re-uploaded before each run: the sampler edits in place).
void bench_sampling() {
  const int B = 64, V = 128256;
  std::vector<float> h(static_cast<std::size_t>(B) * V);
  std::uint64_t z = 88172645463325252ull;
  for (auto& v : h) {  // xorshift + Box-Muller-free approximation: sum of uniforms, std ~2
    double acc = 0;
    for (int k = 0; k < 4; ++k) {
      z ^= z << 13, z ^= z >> 7, z ^= z << 17;
      acc += static_cast<double>(z >> 11) * 0x1.0p-53;
    }
    v = static_cast<float>((acc - 2.0) * 3.46);
  }
  DeviceArray<float> d(h.size()), src(h.size());
  CUDA_CHECK(cudaMemcpy(src.get(), h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  std::vector<std::int32_t> prompt(2000), output(200);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((i * 7919) % V);
  for (std::size_t i = 0; i < output.size(); ++i) output[i] = static_cast<int>((i * 104729) % V);
  struct Cfg {
    const char* name;
    SamplingParams p;
  };
  std::vector<Cfg> cfgs(5);
  cfgs[0].name = "temp1", cfgs[0].p.temperature = 1.0f;
  cfgs[1].name = "topk50", cfgs[1].p.top_k = 50;
  cfgs[2].name = "topp09", cfgs[2].p.top_p = 0.9f;
  cfgs[3].name = "topk50_topp09_minp005_logprobs5", cfgs[3].p.top_k = 50, cfgs[3].p.top_p = 0.9f,
  cfgs[3].p.min_p = 0.05f, cfgs[3].p.logprobs = 5;
  cfgs[4].name = "penalties_topp09_logprobs20", cfgs[4].p.top_p = 0.9f,
  cfgs[4].p.repetition_penalty = 1.1f, cfgs[4].p.frequency_penalty = 0.5f,
  cfgs[4].p.presence_penalty = 0.5f, cfgs[4].p.logprobs = 20;
  DeviceSampler sampler;
  for (const Cfg& c : cfgs) {
    std::vector<SampleRequest> reqs(B);
    for (int r = 0; r < B; ++r)
      reqs[static_cast<std::size_t>(r)] = {r, &c.p, &prompt, &output, nullptr};
    const SampleBatch batch = prepare_samples(reqs, V);
    const double ms = median_ms(
        [&] {
          CUDA_CHECK(cudaMemcpyAsync(d.get(), src.get(), d.bytes(), cudaMemcpyDeviceToDevice));
          sampler.run(d.get(), V, batch, nullptr);
        },
        2, 10);
    const double copy_ms = median_ms(
        [&] {
          CUDA_CHECK(cudaMemcpyAsync(d.get(), src.get(), d.bytes(), cudaMemcpyDeviceToDevice));
        },
        2, 10);
    std::printf("device sampler, 64 rows x 128256, %s: %.3f ms\n", c.name, ms - copy_ms);
    figure(std::string("bench_sampling_b64_") + c.name + "_ms", ms - copy_ms);
  }
}

// Decode GEMM autotuning (cuda/gemm.h) on the 8B layer shapes + lm_head: default cuBLAS vs
// the kept choice per row count, and the layer's four GEMMs as a fraction of copy bandwidth.
void bench_gemm_tune() {
  const int H = 4096, I = 14336, V = 128256;
  struct Shape {
    const char* name;
    int N, K;
    bool f32;
  };
  const Shape shapes[] = {{"qkv", 6144, H, false},
                          {"o", H, H, false},
                          {"gate_up", 2 * I, H, false},
                          {"down", H, I, false},
                          {"lm_head", V, H, true}};
  std::vector<DeviceArray<bf16>> ws;
  std::vector<GemmShape> gs;
  for (const auto& sh : shapes) {
    ws.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
    fill_random(ws.back().get(), ws.back().size(), 6);
    gs.push_back({sh.name, sh.N, sh.K, sh.f32, ws.back().get()});
  }
  Gemm g(nullptr);
  const std::vector<int> rows = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = g.autotune(gs, rows, 5000.0);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("decode GEMM autotune: %.0f ms for %zu (shape, rows), %d use cublasLt\n", ms,
              res.size(), g.tuned_count());
  figure("bench_gemm_tune_startup_ms", ms);
  std::map<int, double> layer_def, layer_best;
  for (const auto& r : res) {
    std::printf(
        "  %-8s N=%-6d K=%-6d T=%-4d default %8.1f us -> %8.1f us  %s (%d cand, %d rej, skinny "
        "%.1f us)\n",
        r.name.c_str(), r.N, r.K, r.T, r.default_us, r.best_us, r.chosen.c_str(), r.candidates,
        r.rejected, r.skinny_us);
    const std::string key = "bench_gemm_tune_" + r.name + "_t" + std::to_string(r.T);
    figure(key + "_default_us", r.default_us);
    figure(key + "_best_us", r.best_us);
    if (r.name != "lm_head") layer_def[r.T] += r.default_us, layer_best[r.T] += r.best_us;
  }
  const double bytes = 2.0 * (6144.0 * H + 1.0 * H * H + 2.0 * I * H + 1.0 * H * I);
  for (int T : {1, 2, 4, 8, 64, 128, 256}) {
    if (!layer_def.count(T)) continue;
    const double d = bytes / (layer_def[T] * 1e-6), b = bytes / (layer_best[T] * 1e-6);
    std::printf("layer GEMMs T=%d: default %.1f%% of 4.27 TB/s, tuned %.1f%%\n", T,
                100 * d / kCopyBw, 100 * b / kCopyBw);
    figure("bench_layer_gemms_t" + std::to_string(T) + "_tuned_frac_copy_bw", b / kCopyBw);
  }
}

// The 8B-shaped random model with 90 % of free memory as KV pool (bench_model, bench_sparse).
Config llama8b_bench_config() {
  Config c;
  c.model.path = "random:llama3-8b";
  c.model.seed = 1;
  // STRATA_BENCH_MODEL=random:llama3-70b (say): another shape under the same benchmarks.
  if (const char* m = std::getenv("STRATA_BENCH_MODEL"); m && *m) c.model.path = m;
  // STRATA_BENCH_QUANT=fp8: the same benchmarks with FP8 (W8A8) linear layers (issue 20).
  if (const char* q = std::getenv("STRATA_BENCH_QUANT"); q && std::string(q) == "fp8")
    c.model.quantization = Quantization::kFp8;
  c.model.max_model_len = 8192;
  c.scheduler.max_num_seqs = 64;
  c.scheduler.max_num_batched_tokens = 4096;
  c.cache.kv_fraction = 0.9;
  return c;
}

// Random K/V in a bf16 pool (it starts as zeros; an e4m3 pool keeps them): the decode steps
// below then attend over non-zero keys and values, as serving does.
void fill_kv_pool(CudaBackend& be, unsigned long long seed) {
  CudaBackendProbe probe(be);
  if (probe.kv_scales().empty()) probe.fill_kv_random(seed);
  std::printf("KV pool: %s\n", probe.kv_scales().empty() ? "random bf16" : "e4m3 (not filled)");
}

// Whole 8B-shaped model: decode step (batch 64, ctx 4096, full cache) and a 4000-token prefill.
void bench_model() {
  CudaBackend be(llama8b_bench_config(), 0);
  fill_kv_pool(be, 0x6d6f64656cull);
  const ModelConfig& mc = be.model();
  const int L = mc.num_hidden_layers, B = 64, ctx = 4096;
  std::printf(
      "8B model%s: weights %.2f GB, activations+workspace %.2f GB, KV pool %.2f GB (%d pages)\n",
      llama8b_bench_config().model.quantization == Quantization::kFp8 ? " (fp8)" : "",
      be.info().weight_bytes / 1e9, CudaBackendProbe(be).activation_bytes() / 1e9,
      CudaBackendProbe(be).kv_pool_bytes() / 1e9, be.info().num_pages);
  figure("bench_8b_weight_gb", be.info().weight_bytes / 1e9);
  figure("bench_8b_kv_pool_gb", CudaBackendProbe(be).kv_pool_bytes() / 1e9);
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<std::int32_t> empty;
  // Decode step at batch B (B = 1: a single stream's time per token, issue 18). `mode`: the
  // figure's suffix (the decode fusion's setting at batch 1-2; empty = as configured).
  auto decode_step = [&](int B, const std::string& mode = "") {
    const int pps = pages_for_slots(ctx + 1);
    if (static_cast<long long>(B) * pps * L > be.info().num_pages) {
      std::printf("KV pool too small for the decode benchmark\n");
      return;
    }
    StepPlan plan;
    int next = 0;
    for (int b = 0; b < B; ++b) {
      SeqStep s;
      s.seq_id = static_cast<std::uint64_t>(b);
      s.tokens = {b + 1};
      s.start = ctx - 1;  // attends over ctx slots (the pool's contents stand in for a prompt)
      s.prompt_len = ctx - 1;
      s.prefill = false;
      s.sample = true;
      s.params = &greedy;
      s.prompt = &empty;
      s.output = &empty;
      for (int l = 0; l < L; ++l) {
        LayerSlots ls;
        ls.valid = ctx - 1;
        for (int i = 0; i < pps; ++i) ls.pages.push_back(next++);
        s.layers.push_back(ls);
      }
      plan.seqs.push_back(s);
    }
    const double ms = median_step_ms(be, plan, 3, 10);
    ncu_window("step_b" + std::to_string(B) + mode, [&] { be.step(plan); });
    const double kv =
        static_cast<double>(B) * ctx * L * mc.num_key_value_heads * mc.head_dim * 2 * 2;
    const double wbytes =
        static_cast<double>(be.info().weight_bytes) -
        static_cast<double>(mc.vocab_size) * mc.hidden_size * 2;  // embed: B rows only
    const double floor_ms = (kv + wbytes) / kCopyBw * 1e3;
    std::printf(
        "decode step 8B B=%d ctx=4096 (graphs)%s: %.3f ms; HBM floor %.3f ms (%.3g GB weights + "
        "%.3g GB KV) -> %.2fx floor\n",
        B, mode.c_str(), ms, floor_ms, wbytes / 1e9, kv / 1e9, ms / floor_ms);
    const std::string tag = "bench_decode_step_8b_b" + std::to_string(B) + "_ctx4096" + mode;
    figure(tag + "_ms", ms);
    figure(tag + "_x_floor", ms / floor_ms);
  };
  decode_step(B);
  decode_step(1);
  // Issue 18 item 3: the single-stream step with the decode fusion (STRATA_DECODE_FUSION) off,
  // on, and on with programmatic dependent launch, in one process (the saving in one call).
  CudaBackendProbe probe(be);
  const int dmode = probe.decode_fusion();
  for (const int m : {0, 1, 2}) {
    probe.set_decode_fusion(m);
    decode_step(1, "_dfusion" + std::to_string(m));
  }
  probe.set_decode_fusion(dmode);

  // Prefill of one 4000-token prompt.
  StepPlan pp;
  SeqStep s;
  s.seq_id = 1000;
  for (int i = 0; i < 4000; ++i) s.tokens.push_back((i * 7919) % mc.vocab_size);
  s.start = 0, s.prompt_len = 4000, s.prefill = true, s.sample = true, s.params = &greedy,
  s.prompt = &empty, s.output = &empty;
  int next = 0;
  for (int l = 0; l < L; ++l) {
    LayerSlots ls;
    for (int i = 0; i < pages_for_slots(4000); ++i) ls.pages.push_back(next++);
    s.layers.push_back(ls);
  }
  pp.seqs.push_back(s);
  const double pms = median_step_ms(be, pp, 1, 4);
  const double n = 4000;
  const double lin_params = static_cast<double>(L) *
                            (static_cast<double>(mc.hidden_size) * (mc.q_dim() + 2 * mc.kv_dim()) +
                             static_cast<double>(mc.q_dim()) * mc.hidden_size +
                             3.0 * mc.hidden_size * mc.intermediate_size);
  const double flops = 2 * n * lin_params +
                       2.0 * mc.vocab_size * mc.hidden_size /* last row only */ +
                       L * 2.0 * n * n * mc.head_dim * mc.num_attention_heads;
  const double tf = flops / (pms * 1e-3);
  std::printf("prefill 4000 tokens 8B: %.2f ms, %.3g TFLOP, %.1f TFLOP/s = %.1f%% of 769\n", pms,
              flops / 1e12, tf / 1e12, 100 * tf / kBf16Flops);
  figure("bench_prefill_4000_8b_tflops", tf / 1e12);
  figure("bench_prefill_4000_8b_frac_peak", tf / kBf16Flops);
}

// Sparse decode step on the Llama-3-8B shape (issue 9): batch 64, each sequence at
// 4096 prompt + 500 decoded tokens (the step writes position 4595 and attends 4596 slots on
// full layers), default profile (configs/sparsity-default.yaml: 3 full layers, 29 `scored`
// layers of C = 512 with a full ring, so every step runs the ring resolve and the score
// update). Reports the step time against its own HBM floor (weights + the KV the step
// reads: 3 full layers x 4596 slots + 29 x 512 slots), the speed-up over the full-cache step
// of the same batch and context, and, from the memory planner, the KV bytes of one
// 4000 + 500-token sequence and how many fit in this pool, sparse vs full.
// The pool's contents stand in for the prompt (random K/V, fill_kv_pool; before the sixteenth
// session zeros). leave_one_out (`gpu_bench sparse-loo`): instead of the variants, the default
// path's graph replayed with each kind of kernel left out in turn (CudaBackendProbe::
// set_graph_skip): the time a kind saves is what it costs inside the graph.
void bench_sparse(bool leave_one_out = false) {
  CudaBackend be(llama8b_bench_config(), 0);
  fill_kv_pool(be, 0x7370617273ull);
  const ModelConfig& mc = be.model();
  const int L = mc.num_hidden_layers, B = 64, prompt = 4096, decoded = 500;
  const int pos = prompt + decoded - 1;  // the token fed in this step
  SparsityProfile prof;                  // = configs/sparsity-default.yaml
  prof.enabled = true;
  prof.full_layers = 3;
  prof.policy = Policy::kScored;
  prof.capacity = 512;
  prof.window = 32;
  prof.sinks = 4;
  prof.pool = PoolKind::kMax;
  prof.pool_kernel = 7;
  const std::vector<LayerRule> rules = prof.resolve(L);
  const std::vector<LayerRule> full_rules(static_cast<std::size_t>(L));
  const KvLayout lay = be.info().layout;
  const double slot_bytes = 2.0 * lay.kv_heads * lay.head_dim * lay.elem_bytes;  // K + V
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<std::int32_t> empty;

  // One decode step of B sequences under `rs`; returns the median device time (graphs). `tag`:
  // the step's name for STRATA_BENCH_NCU (ncu_window).
  auto run = [&](const std::vector<LayerRule>& rs, double* kv_read_bytes, const char* tag) {
    StepPlan plan;
    int next = 0;
    double kv = 0;
    for (int b = 0; b < B; ++b) {
      SeqStep s;
      s.seq_id = static_cast<std::uint64_t>(b);
      s.tokens = {b + 1};
      s.start = pos;
      s.prompt_len = prompt;
      s.prefill = false;
      s.sample = true;
      s.params = &greedy;
      s.prompt = &empty;
      s.output = &empty;
      for (int l = 0; l < L; ++l) {
        LayerSlots ls;
        ls.rule = rs[static_cast<std::size_t>(l)];
        if (ls.rule.sparse()) {
          ls.valid = ls.rule.capacity;  // selected at prefill, ring full
          ls.ring_pos = (decoded - 1) % std::max(1, ls.rule.ring);
        } else {
          ls.valid = pos;
        }
        const int att = ls.rule.sparse() ? ls.rule.capacity : pos + 1;
        kv += att * slot_bytes;
        for (int i = 0; i < pages_for_slots(att); ++i) ls.pages.push_back(next++);
        s.layers.push_back(ls);
      }
      plan.seqs.push_back(std::move(s));
    }
    if (next > be.info().num_pages) {
      std::printf("KV pool too small: %d pages needed, %d held\n", next, be.info().num_pages);
      return -1.0;
    }
    *kv_read_bytes = kv;
    const double ms = median_step_ms(be, plan, 3, 10);
    ncu_window(tag, [&] { be.step(plan); });
    return ms;
  };
  double kv_sparse = 0, kv_full = 0;
  CudaBackendProbe probe(be);
  if (leave_one_out) {
    // Every kernel node of the default sparse step's graph by name (a pattern no name holds
    // disables nothing), then each name left out in turn. Leaving a kernel out leaves its
    // outputs as the previous replay wrote them (the same plan every step: every buffer holds
    // what a full step wrote), so no later kernel reads an undefined index.
    probe.set_graph_skip("(no kernel has this name)");
    const double base = run(rules, &kv_sparse, "sparse_step_loo");
    const std::map<std::string, int> census = probe.graph_kernels();
    int nodes = 0;
    for (const auto& [name, n] : census) nodes += n;
    std::printf("sparse step b64 default path: %.3f ms, %d kernel nodes, %zu kernels\n", base,
                nodes, census.size());
    figure("bench_sparse_loo_base_ms", base);
    int k = 0;
    double saved = 0;
    for (const auto& [name, n] : census) {
      if (name.empty()) continue;  // the driver named no kernel: nothing to match
      probe.set_graph_skip(name);
      const double ms = run(rules, &kv_sparse, "sparse_step_loo");
      saved += base - ms;
      std::printf("leave out %3d x %-.150s: %.3f ms, saves %.3f ms = %.2f us per node\n",
                  probe.graph_skipped(), name.c_str(), ms, base - ms,
                  1e3 * (base - ms) / std::max(1, probe.graph_skipped()));
      figure("bench_sparse_loo_k" + std::to_string(k) + "_saves_ms", base - ms);
      ++k;
    }
    std::printf("the savings sum to %.3f ms of %.3f\n", saved, base);
    probe.set_graph_skip("");
    return;
  }
  // The score update recomputing q . k from the kept K (the path before issue 18; the figure
  // names of earlier runs), then reading the decode attention's own logits (the default).
  probe.set_score_update_from_logits(false);
  const double ms_sparse = run(rules, &kv_sparse, "sparse_step_recompute");
  probe.set_score_update_from_logits(true);
  // The resolve and update kernels on one stream (`fused`: the path before the switches), then
  // issue 18's switches: the update inside the attention, the resolve (and the update kernel) on
  // a side stream, both, the resolve inside the RoPE + K/V write (`rope`), that + the update in
  // the attention.
  const bool side = probe.sparse_side(), in_attn = probe.score_in_attention(),
             in_rope = probe.resolve_in_rope();
  auto variant = [&](bool sd, bool ia, bool ir, const char* tag) {
    probe.set_sparse_side(sd);
    probe.set_score_in_attention(ia);
    probe.set_resolve_in_rope(ir);
    return run(rules, &kv_sparse, tag);
  };
  const double ms_fused = variant(false, false, false, "sparse_step_fused");
  const double ms_in_attn = variant(false, true, false, "sparse_step_fused_in_attn");
  const double ms_side = variant(true, false, false, "sparse_step_fused_side");
  const double ms_side_in_attn = variant(true, true, false, "sparse_step_fused_side_in_attn");
  const double ms_rope = variant(false, false, true, "sparse_step_fused_rope");
  const double ms_rope_in_attn = variant(false, true, true, "sparse_step_fused_rope_in_attn");
  probe.set_sparse_side(side);
  probe.set_score_in_attention(in_attn);
  probe.set_resolve_in_rope(in_rope);
  const double ms_full = run(full_rules, &kv_full, "sparse_step_full");
  if (ms_sparse < 0 || ms_fused < 0 || ms_in_attn < 0 || ms_side < 0 || ms_side_in_attn < 0 ||
      ms_rope < 0 || ms_rope_in_attn < 0 || ms_full < 0)
    return;
  const double wbytes = static_cast<double>(be.info().weight_bytes) -
                        static_cast<double>(mc.vocab_size) * mc.hidden_size * 2;  // embed rows
  const double floor_sparse = (wbytes + kv_sparse) / kCopyBw * 1e3;
  const double floor_full = (wbytes + kv_full) / kCopyBw * 1e3;
  // What the sparse layers touch beyond the kept K/V: the score update re-reads K and
  // reads + writes one fp32 score per slot and head; the resolve reads the selected scores.
  int n_sparse = 0;
  for (const auto& r : rules) n_sparse += r.sparse() ? 1 : 0;
  const double extra = static_cast<double>(B) * n_sparse * prof.capacity * lay.kv_heads *
                       (lay.head_dim * lay.elem_bytes + 2.0 * 4 + 4);
  std::printf(
      "sparse decode step 8B B=%d ctx %d+%d (default profile, graphs): %.3f ms; HBM floor %.3f "
      "ms (%.3g GB weights + %.3g GB kept KV) -> %.2fx floor (score update/resolve add %.3g GB)\n",
      B, prompt, decoded, ms_sparse, floor_sparse, wbytes / 1e9, kv_sparse / 1e9,
      ms_sparse / floor_sparse, extra / 1e9);
  std::printf(
      "full-cache decode step 8B B=%d ctx %d+%d: %.3f ms; HBM floor %.3f ms (%.3g GB KV) -> "
      "%.2fx floor; sparse speed-up %.2fx\n",
      B, prompt, decoded, ms_full, floor_full, kv_full / 1e9, ms_full / floor_full,
      ms_full / ms_sparse);
  std::printf(
      "sparse decode step 8B B=%d, score update from the attention's logits (default): %.3f ms "
      "-> %.2fx floor; %.3f ms less than recomputing q . k; speed-up over the full cache %.2fx\n",
      B, ms_fused, ms_fused / floor_sparse, ms_sparse - ms_fused, ms_full / ms_fused);
  std::printf(
      "sparse decode step 8B B=%d, the opt-in switches: update in the attention kernel %.3f ms "
      "(%.2fx floor), resolve + update kernel on a side stream %.3f ms (%.2fx), both %.3f ms "
      "(%.2fx)\n",
      B, ms_in_attn, ms_in_attn / floor_sparse, ms_side, ms_side / floor_sparse, ms_side_in_attn,
      ms_side_in_attn / floor_sparse);
  std::printf(
      "sparse decode step 8B B=%d, the resolve inside the RoPE + K/V write: %.3f ms (%.2fx floor), "
      "with the update in the attention kernel %.3f ms (%.2fx)\n",
      B, ms_rope, ms_rope / floor_sparse, ms_rope_in_attn, ms_rope_in_attn / floor_sparse);
  for (const auto& [tag, ms] :
       {std::pair{"in_attn", ms_in_attn}, std::pair{"side", ms_side},
        std::pair{"side_in_attn", ms_side_in_attn}, std::pair{"rope", ms_rope},
        std::pair{"rope_in_attn", ms_rope_in_attn}}) {
    figure(std::string("bench_sparse_decode_8b_b64_fused_") + tag + "_ms", ms);
    figure(std::string("bench_sparse_decode_8b_b64_fused_") + tag + "_x_floor", ms / floor_sparse);
  }
  figure("bench_sparse_decode_8b_b64_fused_ms", ms_fused);
  figure("bench_sparse_decode_8b_b64_fused_x_floor", ms_fused / floor_sparse);
  figure("bench_sparse_decode_8b_b64_fused_speedup", ms_full / ms_fused);
  figure("bench_sparse_decode_8b_b64_ms", ms_sparse);
  figure("bench_sparse_decode_8b_b64_floor_ms", floor_sparse);
  figure("bench_sparse_decode_8b_b64_x_floor", ms_sparse / floor_sparse);
  figure("bench_full_decode_8b_b64_ctx4596_ms", ms_full);
  figure("bench_full_decode_8b_b64_ctx4596_x_floor", ms_full / floor_full);
  figure("bench_sparse_decode_8b_b64_speedup", ms_full / ms_sparse);

  // Memory: one sequence of 4000 prompt + 500 generated tokens (4500 positions written:
  // max_tokens 501, the last sampled token is never fed back), whole-prompt prefill.
  const std::size_t page_bytes = lay.page_bytes() + lay.score_elems() * sizeof(float);
  const std::size_t pool_bytes = static_cast<std::size_t>(be.info().num_pages) * page_bytes;
  for (const bool sparse : {true, false}) {
    const auto& rs = sparse ? rules : full_rules;
    const PagePlan pp = pages_needed(4000, 501, rs, /*chunked=*/false);
    const long fit = max_sequences(pool_bytes, page_bytes, 4000, 501, rs, /*chunked=*/false);
    const double kv_bytes = static_cast<double>(pp.final) * lay.page_bytes();
    const std::string tag = sparse ? "sparse" : "full";
    std::printf(
        "%s: KV per 4500-token sequence %.1f MiB (%d pages of %.0f KiB; peak %d pages), %ld "
        "such sequences fit in the %.1f GB pool\n",
        tag.c_str(), kv_bytes / (1 << 20), pp.final, lay.page_bytes() / 1024.0, pp.peak, fit,
        pool_bytes / 1e9);
    figure("bench_kv_mib_per_4500_seq_" + tag, kv_bytes / (1 << 20));
    figure("bench_seqs_4500_fit_" + tag, static_cast<double>(fit));
  }
}

// Issue 19 item 2: where the 4000-token prefill's time goes outside its GEMMs and attention.
// (1) The three element-wise kernels alone at the 8B shape and 4000 rows, scalar and 16-byte
// (RmsNormParams::vec etc.), against their fewest bytes (each input read once, each output
// written once) over the 4.27 TB/s copy ceiling. (2) The whole prefill (one 4000-token prompt,
// random:llama3-8b) with a CUDA event after each launch group inside the real forward
// (CudaBackendProbe::set_forward_profile; cuda/backend/forward_profile.h), scalar then 16-byte
// kernels in the same process: per class ms per forward, share, bytes or FLOPs and their
// ceiling ratio, and GEMM + attention (profiled) against the end-to-end step (unprofiled
// median): the done-when ratio of issue 19 (<= 1.05).
void bench_prefill_breakdown() {
  const int n = 4000;
  {
    const ModelConfig mc = preset_config("llama3-8b");
    const int H = mc.hidden_size, I = mc.intermediate_size, heads = mc.num_attention_heads,
              kvh = mc.num_key_value_heads, hd = mc.head_dim;
    const int qkv_dim = (heads + 2 * kvh) * hd;
    const KvLayout layout{kvh, hd, 2};
    const int pages = pages_for_slots(n);
    DeviceArray<bf16> table_src(static_cast<std::size_t>(n) * H), delta(table_src.size()),
        out(table_src.size()), w(static_cast<std::size_t>(H)),
        qkv(static_cast<std::size_t>(n) * qkv_dim),
        pool(static_cast<std::size_t>(pages) * layout.page_elems()),
        gu(static_cast<std::size_t>(n) * 2 * I), act(static_cast<std::size_t>(n) * I);
    DeviceArray<float> resid(table_src.size());
    fill_random(table_src.get(), table_src.size(), 21);
    fill_random(delta.get(), delta.size(), 22);
    fill_random(w.get(), w.size(), 23);
    fill_random(qkv.get(), qkv.size(), 24);
    fill_random(gu.get(), gu.size(), 25);
    std::vector<int> ids(static_cast<std::size_t>(n)), zeros(ids.size(), 0),
        tab(static_cast<std::size_t>(pages));
    for (int i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
    for (int i = 0; i < pages; ++i) tab[static_cast<std::size_t>(i)] = pages - 1 - i;
    const std::vector<double> inv = mc.rope_inv_freq();
    DeviceArray<int> d_ids(ids.size()), d_zero(ids.size()), d_tab(tab.size());
    DeviceArray<double> d_inv(inv.size());
    CUDA_CHECK(cudaMemcpy(d_ids.get(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_zero.get(), zeros.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_tab.get(), tab.data(), tab.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_inv.get(), inv.data(), inv.size() * 8, cudaMemcpyHostToDevice));
    // fp32 residual from random bf16 rows (row t = table_src row t).
    launch_embedding({d_ids.get(), table_src.get(), resid.get(), n, H}, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const double norm_bytes = static_cast<double>(n) * H * (4 + 2 + 4 + 2);
    const double rope_bytes =
        static_cast<double>(n) * 2 * ((heads + kvh) * hd * 2.0 + kvh * hd * 1.0 + 2.0 * kvh * hd);
    const double swiglu_bytes = static_cast<double>(n) * I * 6;
    for (bool vec : {false, true}) {
      const std::string tag = vec ? "vec" : "scalar";
      const double t_norm = median_ms(
          [&] {
            launch_rmsnorm(
                {resid.get(), delta.get(), w.get(), out.get(), nullptr, n, H, 1e-5f, {}, 0.0f, vec},
                nullptr);
          },
          3, 20);
      const double t_rope = median_ms(
          [&] {
            launch_rope_kv_write(
                {qkv.get(), d_ids.get(), d_zero.get(), d_tab.get(), pages, d_inv.get(), pool.get(),
                 static_cast<long long>(layout.page_elems()), n, heads, kvh, hd, nullptr, 0, vec},
                nullptr);
          },
          3, 20);
      const double t_swiglu = median_ms(
          [&] {
            launch_swiglu({gu.get(), act.get(), n, I, {}, 0.0f, vec}, nullptr);
          },
          3, 20);
      const struct {
        const char* name;
        double ms, bytes;
      } rows[] = {{"rmsnorm", t_norm, norm_bytes},
                  {"rope_kv", t_rope, rope_bytes},
                  {"swiglu", t_swiglu, swiglu_bytes}};
      for (const auto& r : rows) {
        const double frac = r.bytes / (r.ms * 1e-3) / kCopyBw;
        std::printf(
            "%-8s alone T=%d (%s): %.4f ms, %.3g MB -> %.1f%% of 4.27 TB/s (floor %.4f ms)\n",
            r.name, n, tag.c_str(), r.ms, r.bytes / 1e6, 100 * frac, r.bytes / kCopyBw * 1e3);
        figure(std::string("bench_elementwise_") + r.name + "_t4000_" + tag + "_ms", r.ms);
        figure(std::string("bench_elementwise_") + r.name + "_t4000_" + tag + "_frac_copy_bw",
               frac);
      }
    }
  }

  CudaBackend be(llama8b_bench_config(), 0);
  CudaBackendProbe probe(be);
  const ModelConfig& mc = be.model();
  const int L = mc.num_hidden_layers, H = mc.hidden_size, I = mc.intermediate_size,
            V = mc.vocab_size;
  const double qd = mc.q_dim(), kvd = mc.kv_dim(), N = n;
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<std::int32_t> empty;
  StepPlan pp;
  SeqStep s;
  s.seq_id = 2000;
  for (int i = 0; i < n; ++i) s.tokens.push_back((i * 7919) % V);
  s.start = 0, s.prompt_len = n, s.prefill = true, s.sample = true, s.params = &greedy,
  s.prompt = &empty, s.output = &empty;
  int next = 0;
  for (int l = 0; l < L; ++l) {
    LayerSlots ls;
    for (int i = 0; i < pages_for_slots(n); ++i) ls.pages.push_back(next++);
    s.layers.push_back(ls);
  }
  pp.seqs.push_back(s);
  // Per class over one forward: fewest bytes (bf16 activations, fp32 residual) and FLOPs.
  auto gemm_flops = [&](double Nn, double K) { return 2.0 * N * Nn * K * L; };
  auto gemm_bytes = [&](double Nn, double K) { return 2.0 * (N * K + Nn * K + N * Nn) * L; };
  std::map<std::string, std::pair<double, double>> count = {
      // name -> (bytes, flops)
      {"embedding", {N * H * 6, 0}},
      {"rmsnorm", {N * H * (6 + 12.0 * (2 * L - 1)), 0}},
      {"gemm_qkv", {gemm_bytes(qd + 2 * kvd, H), gemm_flops(qd + 2 * kvd, H)}},
      {"rope_kv", {N * L * 2 * ((qd + kvd) * 2 + kvd + 2 * kvd), 0}},
      {"attn_prefill",
       {N * L * 2 * (2 * qd + 2 * kvd),
        4.0 * mc.num_attention_heads * mc.head_dim * N * (N / 2) * L}},
      {"gemm_o", {gemm_bytes(H, qd), gemm_flops(H, qd)}},
      {"gemm_gate_up", {gemm_bytes(2.0 * I, H), gemm_flops(2.0 * I, H)}},
      {"swiglu", {N * I * 6.0 * L, 0}},
      {"gemm_down", {gemm_bytes(H, I), gemm_flops(H, I)}},
      {"lm_head", {2.0 * V * H, 2.0 * V * H}}};
  // scalar: the scalar element-wise kernels; vec: the 16-byte ones; fused: vec + the residual
  // add in the O / down GEMMs' epilogue (resid += x . W^T in fp32; the norms then read resid
  // once and write their bf16 output: 6 B per element instead of 12, the two GEMMs write 8 B
  // per element (read + write the fp32 rows) instead of 2). STRATA_PREFILL_FUSION=1 = fused.
  for (int mode = 0; mode < 3; ++mode) {
    const bool vec = mode >= 1, epi = mode == 2;
    const std::string tag = mode == 0 ? "scalar" : mode == 1 ? "vec" : "fused";
    probe.set_prefill_fusion(vec);
    probe.set_residual_epilogue(epi);
    count["rmsnorm"].first = epi ? N * H * 6.0 * 2 * L : N * H * (6 + 12.0 * (2 * L - 1));
    count["gemm_o"].first = gemm_bytes(H, qd) + (epi ? 6.0 * N * H * L : 0.0);
    count["gemm_down"].first = gemm_bytes(H, I) + (epi ? 6.0 * N * H * L : 0.0);
    probe.set_forward_profile(false);
    const double e2e = median_step_ms(be, pp, 1, 5);
    probe.set_forward_profile(true);
    be.step(pp);                      // warm with the events on
    probe.set_forward_profile(true);  // fresh profile: the next 5 steps
    for (int i = 0; i < 5; ++i) be.step(pp);
    const CudaBackendProbe::ForwardBreakdown b = probe.forward_profile();
    probe.set_forward_profile(false);
    const double f = b.forwards > 0 ? b.forwards : 1;
    double total = 0, gemm_attn = 0;
    for (double m : b.ms) total += m / f;
    std::printf(
        "prefill %d tokens 8B breakdown (%s kernels, STRATA_PREFILL_ATTN as set): %d "
        "profiled forwards, %.2f ms per forward (events), step %.2f ms profiled, %.2f ms "
        "unprofiled\n",
        n, tag.c_str(), b.forwards, total, b.step_ms / f, e2e);
    for (std::size_t i = 0; i < b.names.size(); ++i) {
      const double ms = b.ms[i] / f;
      if (ms <= 0) continue;
      const std::string& name = b.names[i];
      const bool mm = name.rfind("gemm", 0) == 0 || name == "attn_prefill";
      if (mm) gemm_attn += ms;
      const auto it = count.find(name);
      std::printf("  %-13s %8.3f ms %5.1f%%", name.c_str(), ms, 100 * ms / total);
      const std::string tg = "bench_prefill_breakdown_" + tag + "_" + name;
      figure(tg + "_ms", ms);
      figure(tg + "_share", ms / total);
      if (it != count.end()) {
        const double bw = it->second.first / (ms * 1e-3);
        std::printf("  %8.3g GB %5.1f%% of 4.27 TB/s", it->second.first / 1e9, 100 * bw / kCopyBw);
        figure(tg + "_frac_copy_bw", bw / kCopyBw);
        if (it->second.second > 0) {
          const double tf = it->second.second / (ms * 1e-3);
          std::printf("  %7.1f TFLOP/s %5.1f%% of 769", tf / 1e12, 100 * tf / kBf16Flops);
          figure(tg + "_tflops", tf / 1e12);
        }
      }
      std::printf("\n");
    }
    const double rest = e2e - gemm_attn;
    std::printf(
        "  GEMM + attention %.3f ms; end-to-end %.3f ms = %.4fx (issue 19: <= 1.05); rest "
        "%.3f ms (events add %.3f ms per step)\n",
        gemm_attn, e2e, e2e / gemm_attn, rest, b.step_ms / f - e2e);
    const std::string tg = "bench_prefill_breakdown_" + tag;
    figure(tg + "_gemm_attn_ms", gemm_attn);
    figure(tg + "_end_to_end_ms", e2e);
    figure(tg + "_rest_ms", rest);
    figure(tg + "_ratio_vs_gemm_attn", e2e / gemm_attn);
    figure(tg + "_event_overhead_ms", b.step_ms / f - e2e);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  try {
    if (what == "all" || what == "kernels" || what == "decode-attn") {
      bench_decode_attention(64, 4096);
      bench_decode_attention(256, 512);         // a sparse layer's shape (issue 18)
      bench_decode_attention(256, 512, true);   // ... with the fused update's logits
      bench_decode_attention_update(256, 512);  // ... with the update (kernel / in attention)
      bench_decode_attention_update(64, 512);   // the sparse layers of gpu_bench sparse
      bench_decode_attention_fp8(64, 4096);     // FP8 KV (issue 21)
      bench_decode_attention_fp8(256, 512);
    }
    if (what == "all" || what == "kernels") {
      bench_prefill_attention(1, 4096);
      bench_prefill_attention(8, 4096);
      bench_gemm(64);
      bench_gemm(128);
      bench_gemm(256);
    }
    if (what == "all" || what == "kernels" || what == "gemm-small") {
      for (int T : {1, 2, 4, 8, 16}) {
        bench_gemm(T, false);
        if (T <= kSkinnyMaxRows) bench_gemm(T, true);
      }
    }
    if (what == "prefill-attn") {  // the prefill attention kernels only (seconds)
      bench_prefill_attention(1, 4096);
      bench_prefill_attention(8, 4096);
      bench_prefill_attention(1, 4000, 4000);  // a 4000-token chunk after 4000 paged tokens
    }
    if (what == "all" || what == "gemm-tune") bench_gemm_tune();
    if (what == "all" || what == "gemm-fp8") bench_gemm_fp8();
    if (what == "gemm-fp8-graph") bench_gemm_fp8_graph();
    if (what == "stream-probe") bench_stream_probe();
    if (what == "all" || what == "copy") bench_copy();
    if (what == "all" || what == "sampling") bench_sampling();
    if (what == "all" || what == "model") bench_model();
    if (what == "all" || what == "sparse") bench_sparse();
    if (what == "sparse-loo") bench_sparse(true);
    if (what == "gemm-decode") strata::bench::bench_gemm_decode();  // issue 18 item 3
    if (what == "mixed") strata::bench::bench_mixed();              // issue 19 item 3
    if (what == "all" || what == "prefill-breakdown")
      bench_prefill_breakdown();  // issue 19  // issue 9 (well under 60 s)
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Start-up of the CUDA backend: device, activations and step buffers (fixed addresses for the
// graphs), the step planner and its pinned upload image, decode GEMM tuning, the KV pool.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/backend/backend_impl.h"
#include "cuda/dispatch.h"
#include "cuda/env_switch.h"
#include "cuda/tp/collectives.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model/random_model.h"

namespace strata::cuda {

namespace {
constexpr int kGraphBucketsDefault[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

// A driver entry point of the green-context API (CUDA 12.4+); null where the driver lacks it.
template <typename F>
F green_fn(const char* name) {
  return driver_fn<F>(name, 12040);
}

using GreenCtxDestroyFn = CUresult (*)(CUgreenCtx);

// STRATA_MIXED_OVERLAP=3: a green context over `sms` SMs of `device` and a non-blocking stream in
// it at `priority`, checked with the fork / join forward_layer does (`fork` recorded on `main`,
// one runtime launch on the new stream, `join` recorded there and waited on by `main`); "" on
// success, else why not (nothing left allocated).
std::string make_green_stream(int device, int sms, int priority, cudaStream_t main,
                              cudaEvent_t fork, cudaEvent_t join, CUgreenCtx* ctx,
                              cudaStream_t* out) {
  using DeviceGetFn = CUresult (*)(CUdevice*, int);
  using GetResFn = CUresult (*)(CUdevice, CUdevResource*, CUdevResourceType);
  using SplitFn = CUresult (*)(CUdevResource*, unsigned*, const CUdevResource*, CUdevResource*,
                               unsigned, unsigned);
  using DescFn = CUresult (*)(CUdevResourceDesc*, CUdevResource*, unsigned);
  using CreateFn = CUresult (*)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned);
  using StreamFn = CUresult (*)(CUstream*, CUgreenCtx, unsigned, int);
  const auto device_get = green_fn<DeviceGetFn>("cuDeviceGet");
  const auto get_res = green_fn<GetResFn>("cuDeviceGetDevResource");
  const auto split = green_fn<SplitFn>("cuDevSmResourceSplitByCount");
  const auto gen_desc = green_fn<DescFn>("cuDevResourceGenerateDesc");
  const auto create = green_fn<CreateFn>("cuGreenCtxCreate");
  const auto stream_create = green_fn<StreamFn>("cuGreenCtxStreamCreate");
  const auto destroy = green_fn<GreenCtxDestroyFn>("cuGreenCtxDestroy");
  if (!device_get || !get_res || !split || !gen_desc || !create || !stream_create || !destroy)
    return "the driver has no green-context API";
  CUdevice dev = 0;
  CUdevResource all{}, part{}, rest{};
  unsigned groups = 1;
  CUdevResourceDesc desc = nullptr;
  if (device_get(&dev, device) != CUDA_SUCCESS ||
      get_res(dev, &all, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS)
    return "cuDeviceGetDevResource failed";
  if (split(&part, &groups, &all, &rest, 0, static_cast<unsigned>(sms)) != CUDA_SUCCESS ||
      groups != 1)
    return "cuDevSmResourceSplitByCount(" + std::to_string(sms) + " of " +
           std::to_string(all.sm.smCount) + " SMs) failed";
  if (gen_desc(&desc, &part, 1) != CUDA_SUCCESS) return "cuDevResourceGenerateDesc failed";
  if (create(ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS)
    return "cuGreenCtxCreate failed";
  CUstream st = nullptr;
  if (stream_create(&st, *ctx, CU_STREAM_NON_BLOCKING, priority) != CUDA_SUCCESS) {
    destroy(*ctx);
    *ctx = nullptr;
    return "cuGreenCtxStreamCreate failed";
  }
  // The backend's kernels are runtime launches and its events the primary context's: check both
  // work with this stream.
  try {
    DeviceArray<bf16> one(1);
    CUDA_CHECK(cudaEventRecord(fork, main));
    CUDA_CHECK(cudaStreamWaitEvent(st, fork, 0));
    launch_random_fill({one.get(), 1, 1, 0, 1.0f, 0.0f}, st);
    CUDA_CHECK(cudaEventRecord(join, st));
    CUDA_CHECK(cudaStreamWaitEvent(main, join, 0));
    CUDA_CHECK(cudaStreamSynchronize(main));
  } catch (const std::exception& e) {
    cudaGetLastError();
    cudaStreamDestroy(st);
    destroy(*ctx);
    *ctx = nullptr;
    return std::string("the fork / join with a runtime launch on its stream failed (") + e.what() +
           ")";
  }
  std::fprintf(stderr,
               "strata: STRATA_MIXED_OVERLAP=3: mixed steps' decode attention on a green context "
               "of %u of %u SMs\n",
               part.sm.smCount, all.sm.smCount);
  *out = st;
  return "";
}
}  // namespace

cudaStream_t CudaBackendImpl::mixed_side_stream() {
  if (mixed_overlap == 1) return side_hi;
  if (mixed_overlap == 2) return side_lo;
  if (!green_tried) {  // mode 3, first use (never inside a capture: graphs hold no mixed step)
    green_tried = true;
    int sms = 40;
    if (const char* v = std::getenv("STRATA_MIXED_OVERLAP_SMS"); v && *v) sms = std::atoi(v);
    sms = std::clamp(sms, 8, std::max(8, num_sms - 8));
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUgreenCtx ctx = nullptr;
    const std::string why =
        make_green_stream(device, sms, greatest, stream, ev_fork, ev_join, &ctx, &side_green);
    green_ctx = ctx;
    if (!why.empty())
      std::fprintf(stderr,
                   "strata: STRATA_MIXED_OVERLAP=3: %s; mixed steps' decode attention runs on "
                   "the high-priority side stream (mode 1)\n",
                   why.c_str());
  }
  return side_green ? side_green : side_hi;
}

CudaBackendImpl::CudaBackendImpl(const Config& c, int dev, CudaTpRank tp_rank,
                                 const KvScales& given_kv_scales)
    : cfg(c), device(dev), tp(tp_rank) {
  fp8 = c.model.quantization == Quantization::kFp8;  // W8A8 linear layers (cuda/fp8.h)
  kv8 = c.cache.kv_dtype == KvDtype::kFp8;           // e4m3 KV pool (docs/kv-fp8.md)
  // What the fp8 pool does not run yet (tensor parallelism): refused before any device work
  // (CudaBackend checks the config too; this covers a rank built directly).
  check_kv_dtype(c.cache.kv_dtype, std::max(tp.size, c.backend.tp_size));
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (dev < 0 || dev >= n)
    throw ConfigError("backend.devices", "CUDA device " + std::to_string(dev) + " not present (" +
                                             std::to_string(n) + " device(s))");
  CUDA_CHECK(cudaSetDevice(dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&ev0));
  CUDA_CHECK(cudaEventCreate(&ev1));
  CUDA_CHECK(cudaEventCreate(&ev1_prev));
  // Mixed steps' side streams (forward.cpp, mixed_overlap): priorities are "lower is higher".
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&side_hi, cudaStreamNonBlocking, greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&side_lo, cudaStreamNonBlocking, least));
  CUDA_CHECK(cudaEventCreateWithFlags(&ev_fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&ev_join, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamCreateWithFlags(&side_sparse, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&ev_sp_fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&ev_sp_join, cudaEventDisableTiming));
  gemm = std::make_unique<Gemm>(stream);
  build_weights(given_kv_scales);
  check_head_dim(mc.head_dim, "CUDA backend");
  if (mc.gqa_ratio() > 8)
    throw ConfigError(
        "num_key_value_heads",
        "CUDA backend: GQA ratio " + std::to_string(mc.gqa_ratio()) + " > 8 is not supported");
  allocate_workspace();
  if (tp.size > 1) {
    logits_local = DeviceArray<float>(static_cast<std::size_t>(logit_rows) * shard.vocab_slice);
    logits_parts =
        DeviceArray<float>(static_cast<std::size_t>(tp.size) * logit_rows * shard.vocab_slice);
  }
  native_async = cfg.scheduler.async_steps && !tp.comm;  // pipeline.cpp
  use_graphs = cfg.backend.cuda_graphs;
  sparse_graphs = cfg.backend.sparse_graphs;
  if (tp.comm && !tp.comm->capturable()) use_graphs = false;  // host-staged collectives
  if (!cfg.backend.graph_batch_sizes.empty()) {
    buckets = cfg.backend.graph_batch_sizes;
  } else {
    buckets.assign(std::begin(kGraphBucketsDefault), std::end(kGraphBucketsDefault));
  }
  std::erase_if(buckets, [&](int b) { return b <= 0 || b > max_seqs; });
  std::sort(buckets.begin(), buckets.end());
  tune_decode_gemms();  // before the KV pool takes the free memory (temporary buffers)
  plan_kv_pool();
  planner = std::make_unique<StepPlanner>(step_limits());
  binfo.name = tp.size == 1 ? "cuda" : "cuda-tp" + std::to_string(tp.size);
  binfo.layout = KvLayout{mc.num_key_value_heads, mc.head_dim, kv8 ? 1 : 2};  // local KV heads
  binfo.tp_size = tp.size;
  // fp8 KV of a `random:` model without given scales: built so far with a bf16 pool, which runs
  // the calibration prompts; then the e4m3 pool replaces it (kv_calibration.cpp).
  if (kv_calibrate_on_device) calibrate_kv_on_device();
}

CudaBackendImpl::~CudaBackendImpl() {
  cudaSetDevice(device);
  if (async_ready) {  // pipelined steps: nothing may still read or write their pinned buffers
    cudaStreamSynchronize(stream);
    for (auto& pair : aev)
      for (cudaEvent_t e : pair)
        if (e) cudaEventDestroy(e);
  }
  for (auto& [k, g] : graphs) cudaGraphExecDestroy(g);
  if (ev0) cudaEventDestroy(ev0);
  if (ev1) cudaEventDestroy(ev1);
  if (ev1_prev) cudaEventDestroy(ev1_prev);
  if (ev_fork) cudaEventDestroy(ev_fork);
  if (ev_join) cudaEventDestroy(ev_join);
  if (ev_sp_fork) cudaEventDestroy(ev_sp_fork);
  if (ev_sp_join) cudaEventDestroy(ev_sp_join);
  gemm.reset();
  if (side_green) cudaStreamDestroy(side_green);
  if (green_ctx)
    if (const auto destroy = green_fn<GreenCtxDestroyFn>("cuGreenCtxDestroy"))
      destroy(static_cast<CUgreenCtx>(green_ctx));
  if (side_hi) cudaStreamDestroy(side_hi);
  if (side_lo) cudaStreamDestroy(side_lo);
  if (side_sparse) cudaStreamDestroy(side_sparse);
  if (stream) cudaStreamDestroy(stream);
}

void CudaBackendImpl::allocate_workspace() {
  std::size_t before_free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&before_free, &total));
  max_tokens = std::max(cfg.scheduler.max_num_batched_tokens, 1);
  max_seqs = std::max(cfg.scheduler.max_num_seqs, 1);
  max_tokens = std::max(max_tokens, max_seqs);
  const std::int64_t model_len =
      cfg.model.max_model_len > 0 ? cfg.model.max_model_len : mc.max_position_embeddings;
  pmax = static_cast<int>((model_len + kBlockSize - 1) / kBlockSize);
  if (env_switch("STRATA_ROPE_TABLE", true, "RoPE's cos/sin from a table built once",
                 "RoPE's cos/sin by fp64 sincos per use")) {
    rope_table_positions = static_cast<int>(model_len);
    rope_table = DeviceArray<float2>(static_cast<std::size_t>(model_len) * (mc.head_dim / 2));
    launch_rope_table(rope_table.get(), inv_freq.get(), mc.head_dim / 2, rope_table_positions,
                      stream);
  }
  max_tiles = max_tokens / 64 + max_seqs + 1;
  logit_rows = std::max(256, max_seqs);
  const std::size_t T = max_tokens, H = mc.hidden_size, I = mc.intermediate_size, V = mc.vocab_size;
  resid = DeviceArray<float>(T * H);
  normed = DeviceArray<bf16>(T * H);
  qkv = DeviceArray<bf16>(T * qkv_dim);
  attn = DeviceArray<bf16>(T * q_dim);
  delta = DeviceArray<bf16>(T * H);
  gu = DeviceArray<bf16>(T * 2 * I);
  act = DeviceArray<bf16>(T * I);
  lm_normed = DeviceArray<bf16>(static_cast<std::size_t>(logit_rows) * H);
  if (fp8) {  // the e4m3 GEMM input (cuda/fp8.h) and the fallback GEMM's fp32 buffer
    x8 = DeviceArray<std::uint8_t>(T * std::max({H, static_cast<std::size_t>(q_dim), I}));
    x8_scale = DeviceArray<float>(T);
    gemm->enable_fp8();
  }
  logits = DeviceArray<float>(static_cast<std::size_t>(logit_rows) * V);
  part_o = DeviceArray<float>(static_cast<std::size_t>(max_seqs) * mc.num_attention_heads *
                              kMaxDecodeSplits * mc.head_dim);
  part_ml = DeviceArray<float>(static_cast<std::size_t>(max_seqs) * mc.num_attention_heads *
                               kMaxDecodeSplits * 2);
  const std::size_t tables = static_cast<std::size_t>(max_seqs) * mc.num_hidden_layers * pmax;
  auto dev = [](DeviceArray<int>& d, std::size_t n) { d = DeviceArray<int>(n); };
  dev(d_tokens, T);
  dev(d_pos, T);
  dev(d_seq_of, T);
  dev(d_tables, tables);
  allocate_device_tables();  // resident page tables' delta buffers (tables.cpp)
  dev(d_row_start, max_seqs);
  dev(d_nq, max_seqs);
  dev(d_qpos0, max_seqs);
  if (kv8 || kv_calibrate_on_device) {  // fp8 KV: the prefill stage (backend_impl.h)
    const char* env = std::getenv("STRATA_FP8_PREFILL_STAGE");
    if (!(env && std::string(env) == "0")) {
      fp8_stage_pages = pmax + (max_tokens + kBlockSize - 1) / kBlockSize + max_seqs;
      fp8_stage_pool =
          DeviceArray<bf16>(static_cast<std::size_t>(fp8_stage_pages) *
                            KvLayout{mc.num_key_value_heads, mc.head_dim, 2}.page_elems());
      dev(fp8_stage_table, static_cast<std::size_t>(max_seqs) * pmax);
    }
  }
  dev(d_tile_seq, max_tiles);
  dev(d_tile_q0, max_tiles);
  dev(d_q_row, max_seqs);
  const std::size_t per_layer = static_cast<std::size_t>(mc.num_hidden_layers) * max_seqs;
  dev(d_seq_len, per_layer);
  dev(d_slots, per_layer);
  d_dec_seqs = DeviceArray<sparse::DecodeSeq>(per_layer);
  pre_lse = DeviceArray<float>(T * mc.num_attention_heads);
  dec_lse = DeviceArray<float>(static_cast<std::size_t>(max_seqs) * mc.num_attention_heads);
  // 256 sequences x 32 heads x 2048 columns: 64 MiB on the 8B shape.
  dec_logits_cols = std::min(kMaxFusedScoreSlots, pmax * kBlockSize);
  dec_logits = DeviceArray<float>(static_cast<std::size_t>(max_seqs) * mc.num_attention_heads *
                                  static_cast<std::size_t>(dec_logits_cols));
  dev(d_lm_rows, T);
  dev(d_argmax, logit_rows);
  h_argmax = PinnedArray<int>(logit_rows);
  d_logz = DeviceArray<float>(static_cast<std::size_t>(logit_rows));
  h_logz = PinnedArray<float>(static_cast<std::size_t>(logit_rows));
  h_logits = PinnedArray<float>(static_cast<std::size_t>(logit_rows) * V);
  // The step's upload image (cuda/step_layout.h): one pinned buffer, sections per device array.
  const StepImageLayout image_at = StepImageLayout::for_limits(step_limits());
  image_mem = PinnedArray<std::byte>(image_at.bytes);
  image = StepImage(std::span<std::byte>(image_mem.get(), image_mem.size()), image_at);
  CUDA_CHECK(cudaMemsetAsync(d_tables.get(), 0, d_tables.bytes(), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::size_t after_free = 0;
  CUDA_CHECK(cudaMemGetInfo(&after_free, &total));
  activation_bytes = before_free > after_free ? before_free - after_free : 0;
}

// Decode GEMM autotuning (cuda/gemm.h): every linear layer shape at every graph bucket's row
// count (the decode graphs run exactly those T), for models of >= 1 GiB of weights (where
// decode is weight-bandwidth bound; small test models keep bit-identical eager/graph GEMMs).
// STRATA_GEMM_AUTOTUNE=0 keeps cuBLAS's defaults, =1 tunes any model. The choices are logged
// on stderr, one line per shape and row count.
void CudaBackendImpl::tune_decode_gemms() {
  const char* env = std::getenv("STRATA_GEMM_AUTOTUNE");
  const std::string mode = env ? env : "";
  if (mode == "0" || buckets.empty() || layers.empty()) return;
  if (mode != "1" && binfo.weight_bytes < (1ull << 30)) return;
  const int H = mc.hidden_size, I = mc.intermediate_size, V = mc.vocab_size;
  const LayerDev& w = layers.front();
  std::vector<GemmShape> shapes;
  if (!fp8)  // fp8 layers: Gemm::autotune_fp8 below
    shapes = {{"qkv", qkv_dim, H, false, w.qkv},
              {"o", H, q_dim, false, w.o},
              {"gate_up", 2 * I, H, false, w.gate_up},
              {"down", H, I, false, w.down}};
  // tp > 1: the rank's vocabulary slice of rows
  shapes.push_back({"lm_head", tp.size > 1 ? shard.vocab_slice : V, H, true, lm_head});
  std::vector<int> rows;
  for (int b : buckets)
    if (b <= std::min(max_tokens, logit_rows)) rows.push_back(b);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<GemmTuneResult> res;
  try {
    res = gemm->autotune(shapes, rows, 1000.0);
  } catch (const std::exception& e) {  // tuning is an optimisation: keep what was verified
    cudaGetLastError();
    std::fprintf(stderr, "strata cuda: decode GEMM autotune stopped (%s); %d plans kept\n",
                 e.what(), gemm->tuned_count());
    return;
  }
  if (fp8) {  // which FP8 kernel (CUDA cores, tensor cores, cuBLASLt) per shape and bucket
    try {
      const auto r8 = gemm->autotune_fp8({{"qkv", qkv_dim, H, w.qkv8},
                                          {"o", H, q_dim, w.o8},
                                          {"gate_up", 2 * I, H, w.gate_up8},
                                          {"down", H, I, w.down8}},
                                         rows);
      res.insert(res.end(), r8.begin(), r8.end());
    } catch (const std::exception& e) {
      cudaGetLastError();
      std::fprintf(stderr, "strata cuda: FP8 GEMM autotune stopped (%s)\n", e.what());
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "strata cuda: decode GEMM autotune %.0f ms, %d of %zu (shape, rows) use cublasLt\n",
               ms, gemm->tuned_count(), res.size());
  for (const GemmTuneResult& r : res)
    std::fprintf(stderr,
                 "strata cuda:   %-8s N=%-6d K=%-6d T=%-4d default %8.1f us -> %8.1f us  %s (%d "
                 "candidates, %d rejected)\n",
                 r.name.c_str(), r.N, r.K, r.T, r.default_us, r.best_us, r.chosen.c_str(),
                 r.candidates, r.rejected);
}

void CudaBackendImpl::resolve_kv_scales(const std::shared_ptr<const ModelWeights>& host,
                                        const KvScales& given) {
  if (!kv8) return;
  const int L = full_mc.num_hidden_layers, G = full_mc.num_key_value_heads;
  if (host) {
    // The CPU backend's own function (given > checkpoint > its calibration on a temporary fp32-KV
    // CPU backend with the same weights and model.quantization): what make_cpu_backend uses for
    // this configuration, so the CUDA and CPU backends store the same codes for the same values.
    CpuBackendOptions o = cpu_backend_options(cfg);
    o.kv_scales = given;
    kv_scales = cpu_kv_scales(host, o);
  } else if (!given.empty()) {
    kv_scales = given;
    if (kv_scales.source.empty()) kv_scales.source = "given";
    kv_scales.check(L, G);
  } else {
    // A `random:` model: its weights exist only on the device, so the calibration runs there,
    // once the backend is built (with a bf16 pool until then: kv8 comes back on afterwards).
    kv_calibrate_on_device = true;
    kv8 = false;
    return;
  }
  upload_kv_scales();
}

void CudaBackendImpl::upload_kv_scales() {
  const int L = full_mc.num_hidden_layers, G = full_mc.num_key_value_heads;
  // [layers][kv_heads][2] (K, V): tp_size 1 only (check_kv_dtype), so local heads = the model's.
  std::vector<float> dev(static_cast<std::size_t>(L) * G * 2);
  for (int l = 0; l < L; ++l)
    for (int g = 0; g < G; ++g) {
      dev[(static_cast<std::size_t>(l) * G + g) * 2] = kv_scales.k_at(l, g);
      dev[(static_cast<std::size_t>(l) * G + g) * 2 + 1] = kv_scales.v_at(l, g);
    }
  d_kv_scales = DeviceArray<float>(dev.size());
  CUDA_CHECK(cudaMemcpy(d_kv_scales.get(), dev.data(), dev.size() * sizeof(float),
                        cudaMemcpyHostToDevice));
  std::fprintf(stderr, "strata cuda: fp8 KV cache, scales %s (%d layers x %d KV heads)\n",
               kv_scales.source.c_str(), L, G);
}

void CudaBackendImpl::plan_kv_pool() {
  // fp8: 1-byte e4m3 elements, the same 16 slots: half the bytes per page, twice the pages.
  const KvLayout layout{mc.num_key_value_heads, mc.head_dim, kv8 ? 1 : 2};
  std::size_t free_b = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  const std::size_t headroom = 256ull << 20;  // graphs, cuBLAS internals, driver
  std::size_t budget =
      free_b > headroom ? static_cast<std::size_t>((free_b - headroom) * cfg.cache.kv_fraction) : 0;
  if (cfg.cache.kv_bytes > 0) budget = std::min<std::size_t>(budget, cfg.cache.kv_bytes);
  // Every page carries its fp32 slot scores (sparse layers); the prefill scratch (a whole
  // step's tokens laid out as pages) comes from the same budget.
  scratch_pages = pages_for_slots(max_tokens) + max_seqs;
  // and their int32 token positions (the census of kept positions).
  const std::size_t per_page =
      layout.page_bytes() + layout.score_elems() * (sizeof(float) + sizeof(std::int32_t));
  const std::size_t all_pages = budget / per_page;
  const std::size_t pages =
      all_pages > static_cast<std::size_t>(scratch_pages) ? all_pages - scratch_pages : 0;
  if (pages < static_cast<std::size_t>(mc.num_hidden_layers))
    throw ConfigError("cache.kv_bytes",
                      "KV pool of " + std::to_string(budget) + " bytes holds " +
                          std::to_string(pages) + " pages of " +
                          std::to_string(layout.page_bytes()) + " (+" +
                          std::to_string(layout.score_elems() * (sizeof(float) + 4)) +
                          " score and position bytes) after " + std::to_string(scratch_pages) +
                          " scratch pages: fewer than one per layer (free device memory " +
                          std::to_string(free_b) + " bytes)");
  const std::size_t n_pages = std::min<std::size_t>(pages, 0x7fffffff - scratch_pages);
  const std::size_t with_scratch = n_pages + scratch_pages;
  if (kv8)
    kv_pool8 = DeviceArray<std::uint8_t>(with_scratch * layout.page_elems());
  else
    kv_pool = DeviceArray<bf16>(with_scratch * layout.page_elems());
  score_pool = DeviceArray<float>(with_scratch * layout.score_elems());
  pos_pool = DeviceArray<std::int32_t>(with_scratch * layout.score_elems());
  // The pool starts as zeros (K/V and scores), so results never depend on what the device
  // memory held before. STRATA_CUDA_POOL_POISON=1 fills it with NaN bits instead: every read
  // of a slot that was never written (K/V, or a sparse layer's score) then turns into NaN
  // logits (tests/gpu/sparse_model_test.cpp, NoReadOfUnwrittenSlots); 0xFF is e4m3's NaN code
  // too (S.1111.111), so the fp8 pool poisons the same way.
  const char* poison_env = std::getenv("STRATA_CUDA_POOL_POISON");
  const int fill = poison_env && std::string(poison_env) == "1" ? 0xFF : 0;
  if (kv8)
    CUDA_CHECK(cudaMemsetAsync(kv_pool8.get(), fill, kv_pool8.bytes(), stream));
  else
    CUDA_CHECK(cudaMemsetAsync(kv_pool.get(), fill, kv_pool.bytes(), stream));
  CUDA_CHECK(cudaMemsetAsync(score_pool.get(), fill, score_pool.bytes(), stream));
  CUDA_CHECK(cudaMemsetAsync(pos_pool.get(), fill, pos_pool.bytes(), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  kv_bytes = kv_pool.bytes() + kv_pool8.bytes() + score_pool.bytes() + pos_pool.bytes();
  binfo.num_pages = static_cast<int>(n_pages);
}

StepLimits CudaBackendImpl::step_limits() const {
  StepLimits lim;
  lim.num_layers = mc.num_hidden_layers;
  lim.vocab = mc.vocab_size;
  lim.num_pages = binfo.num_pages;
  lim.scratch_pages = scratch_pages;
  lim.max_seqs = max_seqs;
  lim.max_tokens = max_tokens;
  lim.max_table_pages = pmax;
  lim.max_tiles = max_tiles;
  lim.logit_rows = logit_rows;
  lim.kv_heads = mc.num_key_value_heads;
  lim.head_dim = mc.head_dim;
  lim.num_sms = num_sms;
  lim.graph_buckets = buckets;
  return lim;
}

}  // namespace strata::cuda

// The CPU reference backend: runs StepPlans exactly as docs/contracts.md defines them, in
// fp32 with fp64 where an oracle needs it (norm statistics, softmax sums, LSE, SnapKV
// scores). It is the oracle for the CUDA kernels and runs the whole product without a GPU.
// See docs/cpu-backend.md (computation, threading, speed) and docs/sparsity-cpu.md.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/kv_scales.h"
#include "runtime/model/model_loader.h"

namespace strata {

namespace cpu {
class Collectives;  // runtime/tp/tp_comm.h
}

struct CpuBackendOptions {
  int threads = 0;                        // total compute threads; 0 = hardware concurrency
  std::uint64_t kv_bytes = 512ull << 20;  // page pool size: num_pages = kv_bytes / page_bytes
  bool fp64_scores = true;                // SnapKV selection scores in fp64 (else fp32)
  // kFp8: the linear layers in e4m3, W8A8 (runtime/cpu/fp8_matmul.h, docs/cpu-backend.md
  // "FP8"), quantized at load; at tp_size > 1 each rank quantizes its own slices. Callers copy
  // it from Config::model.quantization (cpu_backend_options). A pre-quantized checkpoint
  // (ModelWeights::quantization().prequantized) ignores it: it runs with its own codes and
  // scales as its quantization_config says (W8A8 dynamic or static, or weight-only).
  Quantization quantization = Quantization::kNone;
  // cache.kv_dtype: kFp8 stores K/V as e4m3 codes (1 byte; a page is a quarter of the fp32
  // page, half of CUDA's bf16 page) with fixed per-(layer, KV head) scales (runtime/kv_scales.h),
  // dequantized where attention and scoring read them; compaction copies codes as they are.
  KvDtype kv_dtype = KvDtype::kBf16;
  // The fp8 cache's scales; empty: the checkpoint's kv_cache_scheme scales, else calibrated at
  // construction (cpu_kv_scales). Given scales (tests: the GPU oracle) are used as they are.
  KvScales kv_scales;
  // Calibration hook: when set, every K/V row the backend computes (after RoPE, before it is
  // stored) raises this amax (shaped [layers][model KV heads]). Not owned.
  KvAmax* kv_amax = nullptr;
};

// The scales make_cpu_backend uses for an fp8 KV cache (opts.kv_dtype kFp8): opts.kv_scales when
// given, else the checkpoint's, else calibrate_kv_scales on a temporary CPU backend with fp32 KV
// and the same weights and quantization (tp_size 1, the same result for every rank and process).
KvScales cpu_kv_scales(const std::shared_ptr<const ModelWeights>& weights,
                       const CpuBackendOptions& opts);

// The options a configuration gives: backend.threads, the KV pool (cache.cpu_kv_bytes, or
// cache.kv_bytes when smaller) and model.quantization. The one place the engine and the CLI
// derive them.
CpuBackendOptions cpu_backend_options(const Config& config);

// Converts the weights to fp32 once (the ModelWeights may be dropped afterwards by the
// caller; the backend keeps its own reference). Throws ConfigError when kv_bytes holds
// no page. With kv_dtype kFp8 the scales are resolved first (cpu_kv_scales).
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const ModelWeights> weights,
                                          const CpuBackendOptions& opts);

// Tensor parallelism on the CPU (docs/tensor-parallel.md): `tp_size` rank backends over the
// weights sharded as runtime/tp/tp_shard.h says, sharing an in-process communicator
// (runtime/tp/tp_comm.h) that sums the partial O/down outputs and gathers the
// vocabulary-split logits to rank 0. The forward pass is the CPU backend's own, on the rank's
// heads, intermediate rows and vocabulary slice.
// Every rank's step() must run concurrently with the others' on the same plan (one thread
// per rank: the engine's RankExecutors); rank 0 returns the results, the other ranks return
// the seq ids only. opts.kv_bytes is the total over the ranks (each rank holds 1/tp_size of
// every page, so num_pages equals tp_size 1's); opts.threads is split between the ranks.
// Throws ConfigError("backend.tp_size") when the model cannot be split tp_size ways.
std::vector<std::unique_ptr<Backend>> make_cpu_tp_backends(
    std::shared_ptr<const ModelWeights> weights, const CpuBackendOptions& opts, int tp_size);

// One rank of a tensor-parallel group whose ranks live in separate processes: the rank's
// shard, meeting the other ranks through `comm` (runtime/tp/tcp_comm.h). opts.kv_bytes is
// the total over the ranks as above; opts.threads are this rank's own (not split).
// Throws ConfigError("backend.tp_size") when the model cannot be split comm->size() ways.
std::unique_ptr<Backend> make_cpu_tp_rank_backend(std::shared_ptr<const ModelWeights> weights,
                                                  const CpuBackendOptions& opts, int rank,
                                                  std::shared_ptr<cpu::Collectives> comm);

}  // namespace strata

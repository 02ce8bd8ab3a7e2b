// The CPU reference backend: runs StepPlans exactly as docs/contracts.md defines them, in
// fp32 with fp64 where an oracle needs it (norm statistics, softmax sums, LSE, SnapKV
// scores). It is the oracle for the CUDA kernels and runs the whole product without a GPU.
// See docs/cpu-backend.md (computation, threading, speed) and docs/sparsity-cpu.md.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/backend.h"
#include "runtime/model_loader.h"

namespace strata {

struct CpuBackendOptions {
  int threads = 0;                        // total compute threads; 0 = hardware concurrency
  std::uint64_t kv_bytes = 512ull << 20;  // page pool size: num_pages = kv_bytes / page_bytes
  bool fp64_scores = true;                // SnapKV selection scores in fp64 (else fp32)
};

// Converts the weights to fp32 once (the ModelWeights may be dropped afterwards by the
// caller; the backend keeps its own reference). Throws ConfigError when kv_bytes holds
// no page.
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const ModelWeights> weights,
                                          const CpuBackendOptions& opts);

}  // namespace strata

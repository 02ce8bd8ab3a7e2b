// Per-kernel-class device time of the backend's eager forwards (issue 19 item 2: the prefill
// breakdown of gpu_bench prefill-breakdown). forward() marks the stream after each launch group
// with one CUDA event; each interval between two marks is charged to the class of the group it
// ends. Off (CudaBackendImpl::profile null): one pointer test per launch group, no event. Never
// inside a graph capture (forward() checks). Driven by the backend's thread.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <vector>

namespace strata::cuda {

enum class KernelClass : int {
  kEmbedding,
  kNorm,  // RMSNorm with the fused residual add (input, post-attention)
  kGemmQkv,
  kRopeKv,  // RoPE + K/V write into the pages
  kAttnDecode,
  kAttnPrefill,
  kAttnMixed,  // decode and prefill attention side by side (STRATA_MIXED_OVERLAP)
  kSparse,     // the sparse layers' resolve / update / prefill / shrink kernels
  kQuantize,   // fp8: the attention output's per-row quantization
  kGemmO,
  kAllReduce,  // tp > 1
  kGemmGateUp,
  kSwiglu,
  kGemmDown,
  kLmHead,  // the first lm chunk: final norm, lm_head GEMM, argmax
  kTaps,    // test hook copies
  kCount
};
const char* kernel_class_name(KernelClass c);

class ForwardProfile {
 public:
  ForwardProfile() = default;
  ~ForwardProfile();
  ForwardProfile(const ForwardProfile&) = delete;
  ForwardProfile& operator=(const ForwardProfile&) = delete;

  // Opens a forward: the first event (no interval).
  void begin(cudaStream_t s);
  // Closes the interval since the previous mark, charged to c.
  void mark(KernelClass c, cudaStream_t s);
  // After the forward's last event completed (run.cpp, once the step's ev1 did): adds the
  // intervals into ms and counts the forward; with step_ms, the step's ev0 -> ev1 time too.
  void collect(double step_ms);
  void reset();

  std::array<double, static_cast<std::size_t>(KernelClass::kCount)> ms{};  // summed
  int forwards = 0;
  double step_ms = 0.0;  // summed StepStats::device_ms of the profiled steps

 private:
  std::vector<cudaEvent_t> ev_;   // grow-only pool
  std::vector<KernelClass> cls_;  // cls_[i]: the class of the interval ending at event i + 1
  std::size_t used_ = 0;          // events recorded in this forward
};

}  // namespace strata::cuda

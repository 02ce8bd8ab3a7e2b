// ForwardProfile (forward_profile.h): CUDA events between the launch groups of a forward.
#include "cuda/backend/forward_profile.h"

#include "cuda/cuda_check.h"

namespace strata::cuda {

const char* kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::kEmbedding:
      return "embedding";
    case KernelClass::kNorm:
      return "rmsnorm";
    case KernelClass::kGemmQkv:
      return "gemm_qkv";
    case KernelClass::kRopeKv:
      return "rope_kv";
    case KernelClass::kAttnDecode:
      return "attn_decode";
    case KernelClass::kAttnPrefill:
      return "attn_prefill";
    case KernelClass::kAttnMixed:
      return "attn_mixed";
    case KernelClass::kSparse:
      return "sparse";
    case KernelClass::kQuantize:
      return "quantize";
    case KernelClass::kGemmO:
      return "gemm_o";
    case KernelClass::kAllReduce:
      return "all_reduce";
    case KernelClass::kGemmGateUp:
      return "gemm_gate_up";
    case KernelClass::kSwiglu:
      return "swiglu";
    case KernelClass::kGemmDown:
      return "gemm_down";
    case KernelClass::kLmHead:
      return "lm_head";
    case KernelClass::kTaps:
      return "taps";
    case KernelClass::kCount:
      break;
  }
  return "?";
}

ForwardProfile::~ForwardProfile() {
  for (cudaEvent_t e : ev_) cudaEventDestroy(e);
}

void ForwardProfile::begin(cudaStream_t s) {
  used_ = 0;
  cls_.clear();
  mark(KernelClass::kCount, s);  // the opening event; cls_ holds no entry for it
  cls_.clear();
}

void ForwardProfile::mark(KernelClass c, cudaStream_t s) {
  if (used_ == ev_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    ev_.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(ev_[used_], s));
  ++used_;
  cls_.push_back(c);
}

void ForwardProfile::collect(double step) {
  if (used_ < 2) return;
  for (std::size_t i = 1; i < used_; ++i) {
    float t = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&t, ev_[i - 1], ev_[i]));
    ms[static_cast<std::size_t>(cls_[i - 1])] += t;
  }
  ++forwards;
  step_ms += step;
  used_ = 0;
  cls_.clear();
}

void ForwardProfile::reset() {
  ms.fill(0.0);
  forwards = 0;
  step_ms = 0.0;
  used_ = 0;
  cls_.clear();
}

}  // namespace strata::cuda

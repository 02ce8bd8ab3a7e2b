// The CUDA backend's public face (cuda/cuda_backend.h): the Backend contract over
// CudaBackendImpl (cuda/backend/) and make_cuda_backends. (`random:` names are parsed by
// runtime/model/random_model.h.)
#include "cuda/cuda_backend.h"

#include <memory>
#include <string>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "cuda/dispatch.h"
#include "cuda/tp/tp_backends.h"
#include "runtime/error.h"

namespace strata::cuda {

namespace {
// cache.kv_dtype fp8: what the CUDA backend does not run yet, refused before any device work.
void check_kv(const Config& config) {
  check_kv_dtype(config.cache.kv_dtype, config.backend.tp_size);
}
const Config& checked(const Config& config) {
  check_kv(config);
  return config;
}
}  // namespace

CudaBackend::CudaBackend(const Config& config, int device, CudaTpRank tp, const KvScales& kv_scales)
    : impl_(std::make_unique<CudaBackendImpl>(checked(config), device, tp, kv_scales)) {}
CudaBackend::~CudaBackend() = default;
const BackendInfo& CudaBackend::info() const {
  return impl_->binfo;
}
const ModelConfig& CudaBackend::model() const {
  return impl_->full_mc;  // the whole model (impl_->mc holds this rank's local counts)
}
StepResult CudaBackend::step(const StepPlan& plan) {
  return impl_->step(plan);
}
void CudaBackend::submit(const StepPlan& plan) {
  if (!impl_->native_async) return Backend::submit(plan);
  impl_->submit(plan);
}
StepResult CudaBackend::collect() {
  if (!impl_->native_async) return Backend::collect();
  return impl_->collect();
}

std::vector<std::unique_ptr<Backend>> make_cuda_backends(const Config& config) {
  check_kv(config);
  if (config.backend.tp_size != 1) return tp::make_cuda_tp_backends(config);
  const int dev = config.backend.devices.empty() ? 0 : config.backend.devices.front();
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(std::make_unique<CudaBackend>(config, dev));
  return out;
}

}  // namespace strata::cuda
